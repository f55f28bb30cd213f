"""A verdict is never forged: the runner reads only what infergate and the cluster made.

The tenant here may create ConfigMaps, Services and EndpointSlices in the check's
namespace but not edit the InferenceDeployment. Every forgery below, left unrefused,
would let a harmful canary pass (its sides made to look, or to be, the stable model);
each ends the check in Error (`SideObjectNotOurs`) naming the object and the owner it
should have, or, for an EndpointSlice, is ignored so that the real canary is measured.
"""

from __future__ import annotations

import json
from typing import Any

from infergate.runner.run import EXIT_DONE, EXIT_RETRY, RunOptions, run_check

from .fakes import FakeApi, ToyConnector, ToyEngine, check_owner, controller_ref

STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"
BASE_IP, CAND_IP, PROBE_IP = "127.64.0.10", "127.64.0.11", "127.64.0.12"
BASE_URL, CAND_URL, PROBE_URL = (f"http://{ip}:8000" for ip in (BASE_IP, CAND_IP, PROBE_IP))
FAST = RunOptions(concurrency=2, wait_for_sides=0.2, progress_interval=0.0)
TENANT = controller_ref("Deployment", "tenant-app")
OWNER = "InferenceDeployment qwen (uid uid-qwen)"


def spec() -> dict[str, Any]:
    return {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": STABLE},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": CANARY},
        "suite": {"inline": [{"id": f"p{i}", "tokenIds": [i + 1, i + 2]} for i in range(32)]},
        "sampling": {"maxTokens": 16, "topLogprobs": 5},
        "profile": "dtype-change",
        "thresholds": {"minLongPrompts": 0, "minScoredSteps": 256},
    }


def cluster(candidate_engine: str = "mindformers") -> FakeApi:
    """The stable and a canary revision as the operator made them; the baseline runs vLLM
    (it has a probe) when the canary does, MindFormers (our adapter) otherwise."""
    api = FakeApi()
    api.add_deployment("qwen", {"stableRevision": STABLE})
    api.add_revision("qwen", STABLE, engine=candidate_engine, dtype="float16", ip=BASE_IP)
    api.add_revision("qwen", CANARY, engine=candidate_engine, dtype="float16", ip=CAND_IP)
    api.add_check("check", spec())
    if candidate_engine == "vllm":
        api.add_probe("check", "baseline", PROBE_IP)
        api.add_probe("check", "candidate", PROBE_IP)
    return api


def harmful_canary(vllm: bool = False) -> ToyConnector:
    """The canary's pods serve a numerically different model: measured, it fails."""
    return ToyConnector(
        {
            BASE_URL: ToyEngine(adapter=not vllm),
            PROBE_URL: ToyEngine(adapter=False),
            CAND_URL: ToyEngine(offset=3, shift=-1.0, adapter=not vllm),
        }
    )


def status(api: FakeApi) -> dict[str, Any]:
    return api.checks["check"].get("status") or {}


def ended_not_ours(api: FakeApi, connector: ToyConnector) -> str:
    """Run the check; it must end in Error, reason SideObjectNotOurs; its message."""
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Error"
    [error] = [c for c in s["conditions"] if c["type"] == "Error"]
    assert error["status"] == "True"
    assert error["reason"] == "SideObjectNotOurs"
    message = str(s["verdict"]["reasons"][0]["message"])
    assert message in error["message"] or error["message"] in message
    return message


def test_the_harmful_canary_as_the_operator_made_it_fails() -> None:
    """The baseline of every case below: nothing forged, the canary is measured and fails."""
    api = cluster()
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_DONE
    assert status(api)["phase"] == "Failed"


def test_a_canary_configmap_someone_else_made_ends_the_check_in_error() -> None:
    """The tenant got `qwen-<canary>` first (the operator never overwrites a name held by
    another's object), pinning what the stable pins: the config is not read."""
    api = cluster()
    forged = api.config_maps[f"qwen-{CANARY}"]
    forged["data"] = dict(api.config_maps[f"qwen-{STABLE}"]["data"])
    forged["metadata"]["ownerReferences"] = []
    message = ended_not_ours(api, harmful_canary())
    assert f"ConfigMap llm/qwen-{CANARY} is not controlled by {OWNER}" in message
    assert message.endswith("it has no controller; it is not read")
    assert message.startswith(f"candidate (InferenceDeployment qwen revision {CANARY})")


def test_a_configmap_of_an_earlier_deployment_of_that_name_is_refused() -> None:
    api = cluster()
    old = {**controller_ref("InferenceDeployment", "qwen"), "uid": "uid-qwen-before"}
    api.config_maps[f"qwen-{STABLE}"]["metadata"]["ownerReferences"] = [old]
    message = ended_not_ours(api, harmful_canary())
    assert f"ConfigMap llm/qwen-{STABLE} is not controlled by {OWNER}" in message
    assert "(uid uid-qwen-before), another object of that name" in message


def test_a_canary_service_someone_else_made_ends_the_check_in_error() -> None:
    """A Service `qwen-<canary>` of the tenant's, selecting pods that serve the stable
    model: never called."""
    api = cluster()
    api.services[f"qwen-{CANARY}"]["metadata"]["ownerReferences"] = [TENANT]
    api.slices[f"qwen-{CANARY}"][0]["endpoints"][0]["addresses"] = [BASE_IP]
    message = ended_not_ours(api, harmful_canary())
    assert f"Service llm/qwen-{CANARY} is not controlled by {OWNER}" in message
    assert "its controller is Deployment tenant-app (uid uid-tenant-app)" in message


def test_a_probe_service_someone_else_made_ends_the_check_in_error() -> None:
    """A vLLM side's fingerprints and hidden states come from its probe: a probe Service
    the check does not control is refused."""
    api = cluster("vllm")
    api.services["check-probe-candidate"]["metadata"]["ownerReferences"] = [TENANT]
    message = ended_not_ours(api, harmful_canary(vllm=True))
    assert "candidate (InferenceDeployment qwen revision bbbbbbbbbb) probe" in message
    assert (
        "Service llm/check-probe-candidate is not controlled by ParityCheck check (uid uid-check)"
        in message
    )


def test_a_probe_left_by_an_earlier_check_of_that_name_is_refused() -> None:
    api = cluster("vllm")
    earlier = {**check_owner("check"), "uid": "uid-check-before"}
    api.services["check-probe-baseline"]["metadata"]["ownerReferences"] = [earlier]
    message = ended_not_ours(api, harmful_canary(vllm=True))
    assert "Service llm/check-probe-baseline is not controlled by ParityCheck check" in message


def test_the_vllm_sides_with_their_own_probes_run() -> None:
    """The probe rule refuses only what is not the check's own: its own probes are used."""
    api = cluster("vllm")
    connector = harmful_canary(vllm=True)
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    assert status(api)["phase"] == "Failed"


def forged_slice(service: str, address: str, **metadata: Any) -> dict[str, Any]:
    """A tenant's EndpointSlice for `service`, pointing it at `address`."""
    return {
        "metadata": {
            "name": f"{service}-forged",
            "namespace": "llm",
            "labels": {"kubernetes.io/service-name": service},
            **metadata,
        },
        "addressType": "FQDN",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8000}],
    }


FORGERIES = {
    "no manager, no owner": {},
    "the executor's label, no owner": {
        "labels": {
            "kubernetes.io/service-name": f"qwen-{CANARY}",
            "endpointslice.kubernetes.io/managed-by": "local-executor.infergate.io",
        }
    },
    "owned by the Service, a tenant's manager": {
        "labels": {
            "kubernetes.io/service-name": f"qwen-{CANARY}",
            "endpointslice.kubernetes.io/managed-by": "tenant.example.com",
        },
        "ownerReferences": [controller_ref("Service", f"qwen-{CANARY}")],
    },
}


def test_a_slice_pointing_the_canary_service_at_the_stable_pod_is_ignored() -> None:
    """The stable pod's address sorts first, so a trusted forged slice would be the one
    called: the canary would be compared with the stable model itself, and pass."""
    for name, metadata in FORGERIES.items():
        api = cluster()
        service = f"qwen-{CANARY}"
        api.slices[service].append(forged_slice(service, BASE_IP, **metadata))
        assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_DONE
        assert status(api)["phase"] == "Failed", name
        report = api.config_maps["check-report"]["data"]["result.json"]
        assert json.loads(report)["sides"]["candidate"]["url"] == CAND_URL, name


def test_only_forged_slices_never_pass_and_the_retry_says_they_were_ignored() -> None:
    """The canary's own pods have no endpoint yet; the tenant's slice is all there is."""
    api = cluster()
    service = f"qwen-{CANARY}"
    api.slices[service] = [forged_slice(service, BASE_IP)]
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_RETRY
    s = status(api)
    assert s.get("phase") != "Passed"
    [runner] = [c for c in s["conditions"] if c["type"] == "RunnerError"]
    assert runner["reason"] == "SideUnreachable"
    assert (
        f"Service llm/{service} has no ready endpoint: 1 EndpointSlices, none trusted"
        in (runner["message"])
    )
    assert f"EndpointSlice llm/{service}-forged is managed by None" in runner["message"]


def test_a_forged_canary_ends_the_check_even_while_the_stable_is_not_ready() -> None:
    """A refusal is for good: it does not wait behind the other side's pods (nor end,
    after the Job's retries, as a mere SideUnreachable)."""
    api = cluster()
    api.slices[f"qwen-{STABLE}"][0]["endpoints"][0]["conditions"]["ready"] = False
    api.config_maps[f"qwen-{CANARY}"]["metadata"]["ownerReferences"] = [TENANT]
    message = ended_not_ours(api, harmful_canary())
    assert f"ConfigMap llm/qwen-{CANARY} is not controlled by {OWNER}" in message
