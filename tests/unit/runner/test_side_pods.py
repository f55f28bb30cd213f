"""A side is reached only through pods its own workload made, never through a look-alike.

The tenant here has the namespace's `edit` role: it may create pods wearing the canary's
labels, and the cluster's own EndpointSlice controller then publishes them in the
canary Service's slices (a trusted publisher, controlled by the Service). The stable's
address sorts first, so the runner, taking the first ready address, would have the
harmful canary judged on the stable's answers and Pass. Each look-alike below ends the
check in Error (`SideObjectNotOurs`) naming the pod; an endpoint that cannot be tied to
its pod yet only makes the side wait; it never falls back to another address.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infergate.runner.endpoints import ENDPOINTSLICE_CONTROLLER
from infergate.runner.run import EXIT_DONE, EXIT_RETRY, run_check

from .fakes import FakeApi, check_owner, controller_ref, workload_ref
from .test_side_ownership import (
    BASE_IP,
    CANARY,
    CAND_URL,
    FAST,
    PROBE_IP,
    STABLE,
    cluster,
    ended_not_ours,
    harmful_canary,
    status,
)

CANARY_SERVICE = f"qwen-{CANARY}"


def _real_canary_pod(api: FakeApi) -> dict[str, Any]:
    return next(p for p in api.pods.values() if p["metadata"]["name"].startswith(CANARY_SERVICE))


def _publish(api: FakeApi, service: str, pod: dict[str, Any], address: str) -> None:
    """`pod` at `address` in `service`'s slice, as the EndpointSlice controller lists any
    pod the Service selects."""
    slice_ = api.slices[service][0]
    slice_["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] = (
        ENDPOINTSLICE_CONTROLLER
    )
    meta = pod["metadata"]
    slice_["endpoints"].append(
        {
            "addresses": [address],
            "conditions": {"ready": True},
            "targetRef": {
                "kind": "Pod",
                "name": meta["name"],
                "namespace": "llm",
                "uid": meta["uid"],
            },
        }
    )


def _tenant_pod(api: FakeApi, name: str, owner: dict[str, Any] | None, **labels: str) -> Any:
    """The tenant's pod running the stable's template at the stable's address (so a call
    to it is answered as the stable answers), wearing the canary pod's labels."""
    real = _real_canary_pod(api)
    pod = api.add_pod(
        name,
        BASE_IP,
        owner=owner or {},
        labels={**real["metadata"]["labels"], **labels},
    )
    if owner is None:
        pod["metadata"]["ownerReferences"] = []
    return pod


# What the tenant copies onto its pod: (its controller, label overrides).
LOOK_ALIKES = {
    "bare pod with the canary's labels": (None, {}),
    "made by the tenant's own ReplicaSet": (workload_ref("ReplicaSet", "tenant-app-7c9"), {}),
    "controller: the canary's Deployment itself": (
        workload_ref("Deployment", CANARY_SERVICE),
        {},
    ),
    "controller: the InferenceDeployment": (controller_ref("InferenceDeployment", "qwen"), {}),
}


@pytest.mark.parametrize("case", list(LOOK_ALIKES), ids=list(LOOK_ALIKES))
def test_a_pod_wearing_the_canarys_labels_ends_the_check_naming_it(case: str) -> None:
    owner, labels = LOOK_ALIKES[case]
    api = cluster()
    api.replica_sets["tenant-app-7c9"] = {
        "metadata": {
            "name": "tenant-app-7c9",
            "namespace": "llm",
            "uid": workload_ref("ReplicaSet", "tenant-app-7c9")["uid"],
            "ownerReferences": [workload_ref("Deployment", "tenant-app")],
        },
    }
    pod = _tenant_pod(api, "look-alike", owner, **labels)
    _publish(api, CANARY_SERVICE, pod, BASE_IP)
    message = ended_not_ours(api, harmful_canary())
    assert "Pod llm/look-alike" in message
    assert f"Service {CANARY_SERVICE} lists endpoint http://{BASE_IP}:8000" in message


def test_a_copied_owner_reference_to_the_real_replicaset_without_its_template_hash() -> None:
    """The uid of the canary's ReplicaSet can be read and copied; the pods that ReplicaSet
    makes carry its selector and template hash, which this one does not."""
    api = cluster()
    real = _real_canary_pod(api)
    [owner] = real["metadata"]["ownerReferences"]
    pod = _tenant_pod(api, "copied-owner", dict(owner), **{"pod-template-hash": "other"})
    _publish(api, CANARY_SERVICE, pod, BASE_IP)
    message = ended_not_ours(api, harmful_canary())
    assert "Pod llm/copied-owner names ReplicaSet" in message
    assert "does not carry its labels (pod-template-hash)" in message


def test_a_replicaset_of_another_deployment_than_the_recorded_one_is_refused() -> None:
    """A tenant's ReplicaSet claiming the InferenceDeployment: only the Deployment whose uid
    the operator recorded counts."""
    api = cluster()
    api.replica_sets["tenant-rs"] = {
        "metadata": {
            "name": "tenant-rs",
            "namespace": "llm",
            "uid": workload_ref("ReplicaSet", "tenant-rs")["uid"],
            "labels": {"pod-template-hash": "5d8f7c9b4"},
            "ownerReferences": [controller_ref("InferenceDeployment", "qwen")],
        },
        "spec": {"selector": {"matchLabels": {"infergate.io/revision": CANARY}}},
    }
    pod = _tenant_pod(api, "tenant-rs-pod", workload_ref("ReplicaSet", "tenant-rs"))
    _publish(api, CANARY_SERVICE, pod, BASE_IP)
    message = ended_not_ours(api, harmful_canary())
    assert "ReplicaSet llm/tenant-rs is not controlled by Deployment" in message


def test_an_address_that_is_not_its_pods_ends_the_check() -> None:
    """A slice endpoint naming the canary's own pod but the stable's address."""
    api = cluster()
    endpoint = api.slices[CANARY_SERVICE][0]["endpoints"][0]
    endpoint["addresses"] = [BASE_IP]
    message = ended_not_ours(api, harmful_canary())
    assert f"endpoint {BASE_IP} is not an address of Pod llm/{CANARY_SERVICE}-" in message


def test_an_endpoint_naming_no_pod_is_never_called_and_the_side_waits() -> None:
    api = cluster()
    del api.slices[CANARY_SERVICE][0]["endpoints"][0]["targetRef"]
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_RETRY
    s = status(api)
    assert s.get("phase") != "Passed"
    [runner] = [c for c in s["conditions"] if c["type"] == "RunnerError"]
    assert runner["reason"] == "SideUnreachable"
    assert "names no pod (targetRef)" in runner["message"]


def test_a_revision_whose_deployment_the_operator_has_not_recorded_waits() -> None:
    api = cluster()
    del api.recorded[("qwen", CANARY)]
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_RETRY
    [runner] = [c for c in status(api)["conditions"] if c["type"] == "RunnerError"]
    assert "has not recorded the uid of its Deployment" in runner["message"]


def test_pods_of_a_deployment_made_again_under_the_name_wait_for_its_record() -> None:
    """Someone deleted the canary's Deployment and the operator made it again: its pods
    are called once the operator has recorded the new uid, never before."""
    api = cluster()
    api.recorded[("qwen", CANARY)] = "uid-deployment-before"
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_RETRY
    [runner] = [c for c in status(api)["conditions"] if c["type"] == "RunnerError"]
    assert "not the one recorded (uid uid-deployment-before)" in runner["message"]


def test_a_pod_made_again_under_its_name_waits_for_its_slice() -> None:
    api = cluster()
    _real_canary_pod(api)["metadata"]["uid"] = "uid-pod-new"
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_RETRY


def test_the_real_pods_beside_a_terminating_look_alike_are_measured() -> None:
    """A look-alike the slice lists as not ready is never looked at: the canary is
    measured, and fails."""
    api = cluster()
    pod = _tenant_pod(api, "look-alike", None)
    _publish(api, CANARY_SERVICE, pod, BASE_IP)
    api.slices[CANARY_SERVICE][0]["endpoints"][-1]["conditions"] = {"ready": False}
    assert run_check(api, "check", FAST, connector=harmful_canary().connector()) == EXIT_DONE
    assert status(api)["phase"] == "Failed"
    report = json.loads(api.config_maps["check-report"]["data"]["result.json"])
    assert report["sides"]["candidate"]["url"] == CAND_URL


def test_a_pod_wearing_a_probes_labels_ends_the_check() -> None:
    """A vLLM side's fingerprints and hidden states come from its probe pod: the probe
    Service's only pod is the one of the probe's name the check controls."""
    api = cluster("vllm")
    probe = api.pods["check-probe-candidate"]
    forged = copy.deepcopy(probe)
    forged["metadata"].update(name="probe-look-alike", uid="uid-pod-probe-look-alike")
    api.pods["probe-look-alike"] = forged
    _publish(api, "check-probe-candidate", forged, PROBE_IP)
    message = ended_not_ours(api, harmful_canary(vllm=True))
    assert "Pod llm/probe-look-alike is not the probe pod check-probe-candidate" in message


def test_a_probe_pod_of_another_check_of_that_name_is_refused() -> None:
    api = cluster("vllm")
    probe = api.pods["check-probe-candidate"]
    probe["metadata"]["ownerReferences"] = [{**check_owner("check"), "uid": "uid-check-before"}]
    message = ended_not_ours(api, harmful_canary(vllm=True))
    assert "Pod llm/check-probe-candidate is not controlled by ParityCheck check" in message


def test_the_stable_side_is_guarded_the_same_way() -> None:
    api = cluster()
    stable = f"qwen-{STABLE}"
    pod = api.add_pod("stable-look-alike", "127.64.0.1", owner={}, labels={})
    pod["metadata"]["ownerReferences"] = []
    _publish(api, stable, pod, "127.64.0.1")
    message = ended_not_ours(api, harmful_canary())
    assert "Pod llm/stable-look-alike is not made by a ReplicaSet" in message


def test_the_slice_the_local_executor_publishes_leads_to_the_revisions_own_pod() -> None:
    """The local cluster keeps working: the executor names each endpoint's pod (name and
    uid) at its pod IP, and the pod's owner is the ReplicaSet the real controller-manager
    made for the revision's Deployment."""
    from infergate.runner.side_pods import RevisionPods, own_pod_url
    from infergate_dev.localcluster.executor.endpoints import desired_slice

    api = cluster()
    pod = copy.deepcopy(_real_canary_pod(api))
    pod["spec"] = {"nodeName": "local", "containers": [{"name": "e", "ports": [
        {"name": "http", "containerPort": 8000}]}]}  # fmt: skip
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    service = api.services[CANARY_SERVICE]
    selector = pod["metadata"]["labels"]
    published = desired_slice({**service, "spec": {**service["spec"], "selector": selector}}, [pod])
    assert published is not None
    pods = RevisionPods.of("qwen", CANARY, api.recorded[("qwen", CANARY)])
    url = own_pod_url(api, service, [published], pods)
    assert url == CAND_URL
