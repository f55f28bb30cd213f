"""Multi-node revisions (spec.topology.nodes 2) rolled out as LeaderWorkerSet groups by the
operator, against the real LeaderWorkerSet controller (`localcluster up --with lws`) on
KWOK's simulated GPU nodes: a group becomes stable, a canary group that fails its check is
rolled back, one that passes is promoted, a canary group that cannot be placed waits
with the scheduler's reason, a stable group with a worker gone counts no ready replica
until whole, and with the drift watch on, a restarted stable group is re-checked ahead of
the schedule. Verdicts are written by the test, as in test_controller_rollout.py and
test_drift_watch.py (the simulated sides never answer)."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from infergate_dev.localcluster import lws
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    golden_namespace,
    golden_operator,
    idep_namespace,
    operator,
)

pytestmark = pytest.mark.cluster
__all__ = ["golden_namespace", "golden_operator", "idep_namespace", "operator"]
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module", autouse=True)
def lws_controller(cluster: Cluster) -> None:
    """The real LeaderWorkerSet controller, started once (idempotent)."""
    lws.start(cluster.layout, say=False)


def group_manifest(per_node: int = 4) -> dict[str, Any]:
    """One replica of two pods (pipeline parallel 2), `per_node` GPUs each."""
    manifest = deployment_manifest(replicas=1, accelerator_count=per_node)
    manifest["spec"]["topology"] = {
        "nodes": 2,
        "acceleratorsPerNode": per_node,
        "pipelineParallelSize": 2,
    }
    # A group's hidden states are not probed: asked for, a check ends Inconclusive.
    manifest["spec"]["rollout"]["parity"]["hiddenStates"] = {"enabled": False}
    return manifest


def group_sets(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """Revision -> the LeaderWorkerSet the operator made for it, as the API has it."""
    listed = cluster.get_json(
        "leaderworkersets.leaderworkerset.x-k8s.io", "-n", namespace,
        "-l", "infergate.io/deployment=qwen",
    )["items"]  # fmt: skip
    return {item["metadata"]["labels"]["infergate.io/revision"]: item for item in listed}


def group_pods(cluster: Cluster, namespace: str, revision: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json(
        "pods", "-n", namespace, "-l", f"infergate.io/revision={revision}"
    )["items"]
    return items


def _service(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    got = cluster.kubectl("get", "service", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def headless_services(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """Revision -> the headless Service the LWS controller made for its LeaderWorkerSet,
    checked as DNS needs it: named after the LeaderWorkerSet (never the revision Service's
    name), `clusterIP: None`, controlled by that LeaderWorkerSet, selecting its pods, and
    publishing them before they are ready (a worker reaches its leader first). The
    controller never logged that a Service of that name already existed."""
    found = {}
    for revision, group in group_sets(cluster, namespace).items():
        name = group["metadata"]["name"]
        assert name == f"qwen-{revision}-group"
        service = wait_for(
            functools.partial(_service, cluster, namespace, name),
            60,
            f"the LWS controller's headless Service {name}",
        )
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": name}
        assert service["spec"].get("publishNotReadyAddresses") is True
        [owner] = [r for r in service["metadata"]["ownerReferences"] if r.get("controller")]
        assert (owner["kind"], owner["uid"]) == ("LeaderWorkerSet", group["metadata"]["uid"])
        revision_service = cluster.get_json("service", f"qwen-{revision}", "-n", namespace)
        assert revision_service["spec"]["clusterIP"] != "None"
        found[revision] = service
    log = cluster.layout.logs / f"{lws.NAME}.log"
    clashes = [
        line
        for line in log.read_text(errors="replace").splitlines()
        if "already exists" in line and namespace in line
    ]
    assert clashes == [], clashes
    return found


def test_a_group_becomes_stable_and_the_lws_controller_shows_it(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = Idep(cluster, idep_namespace, group_manifest())
    idep.apply()
    stable = idep.wait_stable()
    assert idep.status()["readyReplicas"] == 1
    assert cluster.get_json("deployments", "-n", idep_namespace)["items"] == []
    group = group_sets(cluster, idep_namespace)[stable]
    # The real controller's own status: one group, ready.
    assert group["status"]["readyReplicas"] == 1
    assert group["spec"]["leaderWorkerTemplate"]["size"] == 2
    pods = group_pods(cluster, idep_namespace, stable)
    assert sorted(p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]
                  for p in pods) == ["0", "1"]  # fmt: skip
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # one pod per node
    # The revision Service selects the group's leader only.
    service = cluster.get_json("service", f"qwen-{stable}", "-n", idep_namespace)
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "engine"
    # Beside it, the LWS controller's headless Service publishes the pods' DNS names.
    assert set(headless_services(cluster, idep_namespace)) == {stable}


def test_a_canary_group_that_fails_its_check_is_rolled_back_one_that_passes_is_promoted(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = Idep(cluster, idep_namespace, group_manifest())
    idep.apply()
    stable = idep.wait_stable()

    idep.apply(dtype="float16")
    harmful, check = idep.wait_check()
    # The canary is a separate group; the stable group keeps serving. Each has its DNS.
    assert set(group_sets(cluster, idep_namespace)) == {stable, harmful}
    assert set(headless_services(cluster, idep_namespace)) == {stable, harmful}
    idep.verdict(check["metadata"]["name"], "Failed", passed=False)
    idep.wait_phase("RolledBack")
    wait_for(
        lambda: set(group_sets(cluster, idep_namespace)) == {stable} or None,
        60,
        "the failed canary group removed",
    )
    assert idep.status()["stableRevision"] == stable

    idep.apply(dtype="float32")
    benign, check = idep.wait_check()
    assert benign not in (stable, harmful)
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait("promotion", lambda s: s.get("stableRevision") == benign)
    idep.wait_phase("Stable")
    serving = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert serving["spec"]["selector"]["infergate.io/revision"] == benign
    sets = wait_for(
        lambda: (
            ((s := group_sets(cluster, idep_namespace))[stable]["spec"]["replicas"] == 0 and s)
            or None
        ),
        60,
        "the old stable group scaled to zero",
    )
    assert sets[benign]["status"]["readyReplicas"] == 1


def ascend_group_manifest() -> dict[str, Any]:
    """One MindFormers replica over two simulated 8-NPU Ascend nodes: model parallel 4 x
    pipeline stages 2 = 4 NPUs on each node (the shape of manifests/examples'
    mindformers-ascend-multinode.yaml, at half its width)."""
    manifest = group_manifest()
    spec = manifest["spec"]
    spec["engine"] = {
        "kind": "mindformers",
        "dtype": "bfloat16",
        "paramsDtype": "bfloat16",
        "maxModelLen": 2048,
        "tensorParallelSize": 4,
    }
    spec["accelerator"] = {"kind": "ascend-npu", "count": 1}
    spec["topology"] = {"nodes": 2, "acceleratorsPerNode": 4, "pipelineParallelSize": 2}
    return manifest


def test_an_ascend_group_is_placed_over_two_npu_nodes_and_promoted_as_one(
    cluster: Cluster, idep_namespace: str
) -> None:
    """The rollout mechanics on simulated Ascend nodes: the group's two pods land on the two
    Ascend nodes (4 of each node's 8 NPUs), the real LWS controller reports it ready, and a
    canary group that passes is promoted while the old group is scaled to zero."""
    idep = Idep(cluster, idep_namespace, ascend_group_manifest())
    idep.apply()
    stable = idep.wait_stable()
    group = group_sets(cluster, idep_namespace)[stable]
    assert group["status"]["readyReplicas"] == 1
    pods = group_pods(cluster, idep_namespace, stable)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["ascend-node-0", "ascend-node-1"]
    for pod in pods:
        [engine] = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
        assert engine["resources"]["limits"]["huawei.com/Ascend910"] == "4"

    idep.apply(dtype="float16", paramsDtype="float16")
    canary, check = idep.wait_check()
    assert set(group_sets(cluster, idep_namespace)) == {stable, canary}
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary)
    wait_for(
        lambda: group_sets(cluster, idep_namespace)[stable]["spec"]["replicas"] == 0 or None,
        90,
        "the old Ascend group scaled to zero",
    )
    moved = {p["spec"]["nodeName"] for p in group_pods(cluster, idep_namespace, canary)}
    assert moved == {"ascend-node-0", "ascend-node-1"}


def test_a_canary_group_that_cannot_be_placed_waits_with_the_schedulers_reason(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = Idep(cluster, idep_namespace, group_manifest())
    idep.apply()
    stable = idep.wait_stable()
    # 8 GPUs on each of two nodes: the stable group holds 4 of each node's 8.
    idep.manifest["spec"]["topology"]["acceleratorsPerNode"] = 8
    idep.apply(accelerator={"kind": "nvidia-gpu", "count": 8})
    idep.wait(
        "Unschedulable",
        lambda s: any(c["reason"] == "Unschedulable" for c in s.get("conditions", [])),
    )
    condition = idep.condition("Progressing")
    assert "nvidia.com/gpu" in condition["message"]
    status = idep.status()
    assert status["stableRevision"] == stable
    assert cluster.get_json("pcheck", "-n", idep_namespace)["items"] == []  # never judged
    serving = cluster.get_json("service", "qwen", "-n", idep_namespace)
    assert serving["spec"]["selector"]["infergate.io/revision"] == stable


def test_a_stable_group_with_a_worker_gone_is_not_ready_until_whole(
    cluster: Cluster, idep_namespace: str
) -> None:
    """The worker is deleted while no node can take a pod (both GPU nodes cordoned): the
    LWS controller makes the group again (RecreateGroupOnPodRestart), and until every pod
    of it is back and Ready the operator counts no ready replica."""
    idep = Idep(cluster, idep_namespace, group_manifest())
    idep.apply()
    stable = idep.wait_stable()
    [worker] = [
        p
        for p in group_pods(cluster, idep_namespace, stable)
        if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1"
    ]
    nodes = ("gpu-node-0", "gpu-node-1")
    try:
        for node in nodes:
            cluster.kubectl("cordon", node)
        cluster.kubectl("delete", "pod", worker["metadata"]["name"], "-n", idep_namespace)
        idep.wait("no whole group", lambda s: s.get("readyReplicas") == 0)
        assert idep.status()["stableRevision"] == stable
    finally:
        for node in nodes:
            cluster.kubectl("uncordon", node)
    idep.wait("the group whole again", lambda s: s.get("readyReplicas") == 1, timeout=120)
    assert idep.status()["stableRevision"] == stable


def _drifted(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def _conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}


def _leader(cluster: Cluster, namespace: str, revision: str) -> dict[str, Any] | None:
    """The stable group's leader pod (worker index 0), not terminating; None while absent."""
    leaders = [
        p for p in group_pods(cluster, namespace, revision)
        if p["metadata"]["labels"].get(WORKER_INDEX) == "0"
        and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
    return leaders[0] if len(leaders) == 1 else None


def _serving(pod: dict[str, Any] | None) -> bool:
    """The leader is Ready: a ready endpoint of the revision and stable Services. (KWOK's
    pod IPs are loopback addresses, which EndpointSlices refuse: the pod's Ready condition,
    which the EndpointSlice controller reads, is what is checked.)"""
    return pod is not None and _conditions(pod).get("Ready", {}).get("status") == "True"


def test_a_restarted_stable_group_is_held_until_the_drift_watch_re_checks_it(
    cluster: Cluster, golden_namespace: str, golden_operator: OperatorInstall
) -> None:
    """With the drift watch on (a daily interval: no run due for a day), a worker of the
    stable group deleted: once the group is whole again, a drift run of the stable revision
    starts at once, Drifted says why, and the group's leader is not Ready (its readiness
    gate infergate.io/checked held False by the operator): no Service reaches it. A Failed
    re-check raises the drift alarm and keeps it held, an Inconclusive one keeps it held and
    says why; only a Passed re-check made after the restart lets it serve again."""
    manifest = group_manifest()
    manifest["spec"]["rollout"]["parity"]["watch"] = {"intervalSeconds": 86400}
    idep = Idep(cluster, golden_namespace, manifest)
    idep.apply()
    old = idep.wait_stable()
    # A canary whose check passes stores both sides' records; it becomes stable.
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    entries = [
        f"{golden_namespace}/qwen/{revision}-20260105T090000000000Z-{role}-0a1b2c3d"
        for revision, role in ((old, "baseline"), (canary, "candidate"))
    ]
    idep.verdict(
        check["metadata"]["name"], "Passed", passed=True, metrics={"tokenMatchRate": 1.0},
        extra={"golden": {"stored": True, "entries": entries}},
    )  # fmt: skip
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=90)
    # The old stable group keeps its pods for scaleDownDelaySeconds after the switch and
    # counts meanwhile: wait until it is gone and the new one alone is ready.
    wait_for(
        lambda: group_sets(cluster, golden_namespace)[old]["spec"]["replicas"] == 0 or None,
        90,
        "the old stable group scaled to zero",
    )
    status = idep.wait(
        "the stable group recorded by the drift watch, alone ready",
        lambda s: (
            _drifted(s).get("reason") == "DriftWatchWaiting"
            and len((s.get("drift") or {}).get("groups") or []) == 1
            and s.get("readyReplicas") == 1
        ),
        timeout=90,
    )
    recorded = status["drift"]["groups"]
    assert status["drift"].get("heldGroups", []) == []
    leader = _leader(cluster, golden_namespace, canary)
    assert leader is not None
    # The leader waits for the operator's gate, which is open: it serves.
    assert leader["spec"]["readinessGates"] == [{"conditionType": "infergate.io/checked"}]
    assert _conditions(leader)["infergate.io/checked"]["status"] == "True"
    assert _serving(leader)

    def runs() -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = cluster.get_json(
            "pcheck", "-n", golden_namespace, "-l", "infergate.io/check-purpose=drift"
        )["items"]
        return listed

    def restart(run: int) -> dict[str, Any]:
        """Delete the stable group's worker; the drift run `run` made for its restart."""
        [worker] = [
            p for p in group_pods(cluster, golden_namespace, canary)
            if p["metadata"]["labels"][WORKER_INDEX] == "1"
            and not p["metadata"].get("deletionTimestamp")
        ]  # fmt: skip
        cluster.kubectl("delete", "pod", worker["metadata"]["name"], "-n", golden_namespace)
        name = f"qwen-{canary}-drift{run}"
        return wait_for(
            lambda: next((c for c in runs() if c["metadata"]["name"] == name), None),
            120,
            f"drift run {name} after the restart",
        )

    def held(what: str) -> dict[str, Any]:
        """The group whole again, its leader held out of serving; the status then."""
        pod = wait_for(
            lambda: (
                (
                    (p := _leader(cluster, golden_namespace, canary)) is not None
                    and _conditions(p).get("infergate.io/checked", {}).get("reason")
                    == "AwaitingDriftCheck"
                    and _conditions(p).get("ContainersReady", {}).get("status") == "True"
                    and p
                )
                or None
            ),
            60,
            f"the restarted group's leader held ({what})",
        )
        assert _conditions(pod)["infergate.io/checked"]["status"] == "False"
        assert not _serving(pod)
        return idep.wait(
            f"no ready group while held ({what})",
            lambda s: s.get("readyReplicas") == 0 and s["drift"].get("heldGroups") == ["0"],
        )

    assert runs() == []
    run = restart(1)
    assert run["spec"]["candidate"]["revision"] == canary
    status = held("awaiting drift run 1")
    assert status["drift"]["groups"] != recorded  # the group as seen whole again
    assert _drifted(status)["reason"] == "GroupRestarted"
    assert run["metadata"]["name"] in _drifted(status)["message"]
    assert idep.wait_event("GroupRestarted")["type"] == "Warning"
    assert status["stableRevision"] == canary

    # Failed: the drift watch raises its alarm (onDrift alert), and the group stays held.
    idep.verdict(run["metadata"]["name"], "Failed", passed=False)
    status = idep.wait("drift detected", lambda s: _drifted(s).get("reason") == "DriftDetected")
    assert _drifted(status)["status"] == "True"
    assert "held out of serving" in _drifted(status)["message"]
    held("after a Failed re-check")
    assert idep.status()["stableRevision"] == canary

    # Restarted again: run 2 re-checks it; Inconclusive keeps it held and says why.
    run = restart(2)
    held("awaiting drift run 2")
    idep.verdict(run["metadata"]["name"], "Inconclusive", passed=False)
    status = idep.wait(
        "the re-check inconclusive",
        lambda s: (s.get("drift") or {}).get("lastVerdict") == "Inconclusive",
    )
    assert "held out of serving" in _drifted(status)["message"]
    assert run["metadata"]["name"] in _drifted(status)["message"]
    held("after an Inconclusive re-check")

    # Restarted once more: run 3 passes, and the group serves again.
    run = restart(3)
    held("awaiting drift run 3")
    idep.verdict(run["metadata"]["name"], "Passed", passed=True)
    idep.wait("no drift", lambda s: _drifted(s).get("reason") == "NoDriftDetected")
    wait_for(
        lambda: _serving(_leader(cluster, golden_namespace, canary)) or None,
        60,
        "the re-checked group's leader Ready again",
    )
    status = idep.wait("the group serving again", lambda s: s.get("readyReplicas") == 1)
    assert status["drift"].get("heldGroups", []) == []
    assert status["stableRevision"] == canary
