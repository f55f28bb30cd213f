"""The InferenceDeployment controller against the real local cluster, with the operator
running as a pod under its own ServiceAccount: first revision, in-place changes, canary
with a parity gate (verdicts written by the test), rollback, rejection, deadlines,
placement that cannot be satisfied, and what `kubectl get idep` shows along the way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    deployment_manifest,
    idep_namespace,
    operator,
    settle,
)

pytestmark = pytest.mark.cluster
__all__ = ["idep_namespace", "operator"]


@pytest.mark.matrix
def test_first_revision_becomes_stable(cluster: Cluster, idep_namespace: str) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()

    status = idep.status()
    assert status["observedGeneration"] == idep.get()["metadata"]["generation"]
    # rollout.traffic defaults to dark: the serving Service selects the stable revision only.
    assert status["trafficMechanism"] == "Dark"
    assert status["endpoints"]["stable"] == {"service": "qwen", "port": 8000}
    assert status["readyReplicas"] == 2
    assert idep.condition("Available")["status"] == "True"
    assert idep.condition("Progressing")["reason"] == "RolloutComplete"
    assert idep.condition("Degraded")["status"] == "False"
    assert idep.revisions() == {stable: 2}
    # Everything it made is owned by it (garbage-collected with it).
    for kind in ("deployment", "service", "configmap"):
        owned = cluster.get_json(kind, "-n", idep_namespace, "-l", "infergate.io/deployment=qwen")
        assert owned["items"], kind
        for item in owned["items"]:
            [owner] = item["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["controller"]) == (
                "InferenceDeployment",
                "qwen",
                True,
            )
    table = idep.table()
    assert table["PHASE"] == "Stable"
    assert table["STABLE"] == stable
    assert table["CANARY"] == ""
    assert idep.wait_event("RolloutComplete")["type"] == "Normal"


def test_replicas_change_applies_in_place(cluster: Cluster, idep_namespace: str) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(replicas=3)
    idep.wait("3 ready replicas", lambda s: s.get("readyReplicas") == 3)
    assert idep.revisions() == {stable: 3}
    assert idep.status()["stableRevision"] == stable
    assert cluster.get_json("pcheck", "-n", idep_namespace)["items"] == []


@pytest.mark.matrix
def test_canary_is_promoted_when_parity_passes(cluster: Cluster, idep_namespace: str) -> None:
    # A delay long enough to be seen: the old stable is kept that long after the move.
    idep = Idep(cluster, idep_namespace, deployment_manifest(scale_down_delay=20))
    idep.apply()
    stable = idep.wait_stable()

    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    assert canary != stable
    assert idep.revisions() == {stable: 2, canary: 1}  # the stable keeps serving
    assert check["spec"]["baseline"] == {
        "inferenceDeploymentRef": {"name": "qwen"},
        "revision": stable,
    }
    assert check["spec"]["candidate"] == {
        "inferenceDeploymentRef": {"name": "qwen"},
        "revision": canary,
    }
    assert check["spec"]["sampling"]["maxTokens"] == 16  # from spec.rollout.parity
    [owner] = check["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("InferenceDeployment", "qwen")
    # The runner reaches the canary through its own Service.
    canary_service = cluster.get_json("service", f"qwen-{canary}", "-n", idep_namespace)
    assert canary_service["spec"]["selector"]["infergate.io/revision"] == canary
    # Dark: the Service clients call selects the stable revision's pods only while the
    # canary is checked.
    serving = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert serving["spec"]["selector"]["infergate.io/revision"] == stable
    idep.wait_phase("Verifying")
    table = idep.table()
    assert (table["PHASE"], table["STABLE"], table["CANARY"], table["PARITY"]) == (
        "Verifying",
        stable,
        canary,
        "Pending",
    )
    assert idep.status()["endpoints"]["canary"]["service"] == f"qwen-{canary}"

    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary)
    # The new stable at full size first, then the Service moves, then the old one goes.
    moved = idep.wait(
        "the Service moved and the old stable kept for the delay",
        lambda s: (s.get("promotion") or {}).get("step") == "ScaleDownDelay",
    )
    assert moved["promotion"]["previous"] == stable
    serving = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert serving["spec"]["selector"]["infergate.io/revision"] == canary
    assert idep.revisions() == {stable: 2, canary: 2}
    idep.wait_phase("Stable")
    idep.wait("old stable scaled down", lambda _: idep.revisions() == {stable: 0, canary: 2})
    assert "promotion" not in idep.status()
    serving = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert serving["spec"]["selector"]["infergate.io/revision"] == canary
    status = idep.status()
    records = {r["hash"]: r for r in status["revisions"]}
    assert records[canary]["verdict"] == "Passed"
    assert records[canary]["metrics"] == {"tokenMatchRate": 1.0}
    assert "promotedAt" in records[canary]
    assert idep.condition("ParityPassed")["status"] == "True"
    table = idep.table()
    assert (table["PHASE"], table["STABLE"], table["CANARY"], table["PARITY"]) == (
        "Stable",
        canary,
        "",
        "Passed",
    )
    wide = idep.table("-o", "wide")
    assert (wide["ENGINE"], wide["DTYPE"], wide["REPLICAS"]) == ("vllm", "float16", "2")
    for step in ("PromotionScalingUp", "PromotionSwitching", "PromotionScaleDownDelay"):
        idep.wait_event(step)
    idep.wait_event("ParityCheckCreated")


@pytest.mark.matrix
@pytest.mark.parametrize(("phase", "reason"), [("Failed", "CheckFailed"), ("Error", "CheckError")])
def test_failed_or_erred_check_rolls_back_and_is_not_retried(
    cluster: Cluster, idep_namespace: str, phase: str, reason: str
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()

    idep.verdict(check["metadata"]["name"], phase, passed=False if phase == "Failed" else None)
    idep.wait_phase("RolledBack")
    idep.wait("canary removed", lambda _: idep.revisions() == {stable: 2})
    status = idep.status()
    assert status["stableRevision"] == stable
    assert "canaryRevision" not in status
    record = {r["hash"]: r for r in status["revisions"]}[canary]
    assert record["rejected"] is True
    assert idep.condition("ParityPassed")["reason"] == reason
    assert idep.condition("Progressing")["reason"] == "RolledBack"
    assert idep.wait_event("RolledBack")["type"] == "Warning"

    settle()  # not retried while the spec stays
    assert idep.revisions() == {stable: 2}
    assert idep.status()["phase"] == "RolledBack"

    idep.apply(dtype="float32")  # the spec changes again: a new canary
    next_canary, _ = idep.wait_check()
    assert next_canary not in (stable, canary)


def test_a_check_without_a_verdict_by_its_deadline_ends_in_error_and_rolls_back(
    cluster: Cluster, idep_namespace: str
) -> None:
    """The check's own deadline ends it (the ParityCheck controller writes Error); the
    rollout acts on that verdict long before its own, later, deadline."""
    manifest = deployment_manifest()
    manifest["spec"]["rollout"]["parity"] |= {
        "deadlineSeconds": 60,
        "runner": {"activeDeadlineSeconds": 60},
    }
    idep = Idep(cluster, idep_namespace, manifest)
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    status = idep.wait_phase("RolledBack", timeout=150)
    assert status["stableRevision"] == stable
    record = {r["hash"]: r for r in status["revisions"]}[canary]
    assert record["verdict"] == "Error"
    assert "no verdict within deadlineSeconds=60" in record["message"]
    ended = cluster.get_json("pcheck", check["metadata"]["name"], "-n", idep_namespace)
    assert ended["status"]["phase"] == "Error"


def test_waiting_for_accelerators_is_progress_with_the_schedulers_reason(
    cluster: Cluster, idep_namespace: str
) -> None:
    # 16 GPUs per pod; the largest node has 8: it waits until progressDeadlineSeconds.
    idep = Idep(cluster, idep_namespace, deployment_manifest(accelerator_count=16))
    idep.apply()
    progressing = idep.wait(
        "Unschedulable",
        lambda s: any(c["reason"] == "Unschedulable" for c in s.get("conditions", [])),
    )
    assert progressing["phase"] == "Progressing"
    condition = idep.condition("Progressing")
    assert condition["status"] == "True"
    assert "nvidia.com/gpu" in condition["message"]
    assert idep.condition("Degraded")["status"] == "False"
    assert progressing.get("stableRevision") is None
    assert idep.table()["PHASE"] == "Progressing"


def route_weights(cluster: Cluster, namespace: str) -> dict[str, int] | None:
    """Revision -> weight of the deployment's HTTPRoute (a real Gateway API object)."""
    found = cluster.kubectl(
        "get", "httproutes.gateway.networking.k8s.io", "qwen", "-n", namespace, "-o", "json",
        check=False,
    )  # fmt: skip
    if found.returncode != 0:
        return None
    route = json.loads(found.stdout)
    return {
        backend["name"].removeprefix("qwen-"): int(backend["weight"])
        for rule in route["spec"]["rules"]
        for backend in rule["backendRefs"]
    }


def gateway_manifest() -> dict[str, Any]:
    """The test deployment in gateway mode: parent Gateway `public`, one step of 30%."""
    manifest = deployment_manifest()
    manifest["spec"]["rollout"]["traffic"] = {
        "mode": "gateway",
        "gateway": {
            "parentRefs": [{"name": "public"}],
            "steps": [{"weight": 30, "pauseSeconds": 5}],
        },
    }
    return manifest


@pytest.mark.matrix  # each version with the Gateway API release it takes (v1.4.1 before 1.31)
def test_gateway_weights_wait_for_the_verdict_then_follow_the_steps(
    cluster: Cluster, idep_namespace: str
) -> None:
    """The HTTPRoute against the Gateway API CRDs installed on the local cluster (no Gateway
    implementation here: the weights are what one would apply; test_gateway_traefik.py
    sends requests through Traefik by them)."""
    manifest = gateway_manifest()
    idep = Idep(cluster, idep_namespace, manifest)
    idep.apply()
    stable = idep.wait_stable()
    assert idep.status()["trafficMechanism"] == "GatewayWeights"
    assert wait_for(lambda: route_weights(cluster, idep_namespace), 60, "the route") == {
        stable: 100
    }
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    # Weight 0 for the canary while it is checked.
    wait_for(
        lambda: route_weights(cluster, idep_namespace) == {stable: 100, canary: 0},
        60,
        "the canary in the route at weight 0",
    )
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    wait_for(
        lambda: route_weights(cluster, idep_namespace) == {stable: 70, canary: 30},
        60,
        "the first step (30%)",
    )
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=120)
    wait_for(
        lambda: route_weights(cluster, idep_namespace) == {canary: 100},
        60,
        "the route on the promoted revision alone",
    )


def test_a_route_someone_else_made_under_the_name_is_left_alone_and_holds_the_steps(
    cluster: Cluster, idep_namespace: str
) -> None:
    """An HTTPRoute `qwen` made by hand before the deployment: infergate never writes it,
    says so in Degraded, and moves no canary weight until the name is free."""
    theirs = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "qwen"},
        "spec": {"parentRefs": [{"name": "public"}],
                 "rules": [{"backendRefs": [{"name": "legacy", "port": 8000}]}]},
    }  # fmt: skip
    cluster.apply(theirs, idep_namespace)
    manifest = gateway_manifest()
    idep = Idep(cluster, idep_namespace, manifest)
    idep.apply()
    stable = idep.wait_stable()
    degraded = idep.wait(
        "Degraded NameTaken",
        lambda s: any(c["type"] == "Degraded" and c["reason"] == "NameTaken"
                      for c in s.get("conditions") or []),
    )  # fmt: skip
    message = next(c["message"] for c in degraded["conditions"] if c["type"] == "Degraded")
    assert "HTTPRoute qwen already exists and was not made by infergate" in message
    assert idep.wait_event("NameTaken")["type"] == "Warning"

    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait(
        "the passed canary held",
        lambda s: any(c["type"] == "Progressing" and c["reason"] == "TrafficHeld"
                      for c in s.get("conditions") or []),
    )  # fmt: skip
    settle()
    status = idep.status()
    assert status["stableRevision"] == stable
    route = cluster.get_json("httproutes.gateway.networking.k8s.io", "qwen", "-n", idep_namespace)
    assert [b["name"] for b in route["spec"]["rules"][0]["backendRefs"]] == ["legacy"]
    assert not route["metadata"].get("ownerReferences")

    cluster.kubectl("delete", "httproutes.gateway.networking.k8s.io", "qwen", "-n", idep_namespace)
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=120)
    # The route moves once the promoted revision runs at full size.
    wait_for(
        lambda: route_weights(cluster, idep_namespace) == {canary: 100},
        60,
        "the route on the promoted revision alone",
    )
    assert idep.condition("Degraded")["reason"] == "Healthy"


def test_a_stable_service_someone_else_made_is_left_alone_and_said(
    cluster: Cluster, idep_namespace: str
) -> None:
    """A Service `qwen` made by hand: its create (sent by the background queue) finds it,
    Degraded says whose it is, and its selector stays theirs."""
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "qwen"},
        "spec": {"selector": {"app": "legacy"}, "ports": [{"port": 8000}]},
    }
    cluster.apply(theirs, idep_namespace)
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    idep.wait_stable()
    degraded = idep.wait(
        "Degraded NameTaken",
        lambda s: any(c["type"] == "Degraded" and c["reason"] == "NameTaken"
                      for c in s.get("conditions") or []),
    )  # fmt: skip
    message = next(c["message"] for c in degraded["conditions"] if c["type"] == "Degraded")
    assert "Service qwen already exists and was not made by infergate" in message
    service = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert service["spec"]["selector"] == {"app": "legacy"}
    cluster.kubectl("delete", "service", "qwen", "-n", idep_namespace)
    idep.wait(
        "Degraded cleared",
        lambda s: any(c["type"] == "Degraded" and c["reason"] == "Healthy"
                      for c in s.get("conditions") or []),
        timeout=90,
    )  # fmt: skip
    service = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert service["metadata"]["ownerReferences"][0]["kind"] == "InferenceDeployment"
