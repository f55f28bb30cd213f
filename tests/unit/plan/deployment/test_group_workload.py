"""A multi-node revision's LeaderWorkerSet is observed as its workload, and its ready and
available replicas are its whole groups, counted from its pods."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.plan.deployment.field_drift import field_drift
from infergate.plan.deployment.observed import (
    broken_groups,
    collect,
    observe_deployment,
    observe_pod,
    stable_group_digests,
)
from infergate.plan.deployment.sync import Delete, sync_children

_REV = "0123456789"
_HASH = _REV + "0" * 54
_NAME = f"web-{_REV}-group"
"""The LeaderWorkerSet's name: not the revision's own (`web-<rev>`, its Service's), whose
headless Service the LWS controller could then not make."""
_LABELS = {
    "app.kubernetes.io/managed-by": "infergate",
    "infergate.io/deployment": "web",
    "infergate.io/revision": _REV,
}


def _lws(replicas: int = 1, ready: int = 1, size: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": _NAME,
            "namespace": "llm",
            "uid": "uid-lws",
            "generation": 1,
            "labels": dict(_LABELS),
            "annotations": {"infergate.io/revision-hash": f"sha256:{_HASH}"},
            "ownerReferences": [
                {"kind": "InferenceDeployment", "name": "web", "uid": "uid-web",
                 "controller": True}
            ],
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size}},
        # The LWS controller's own count: it does not look at revisions.
        "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready,
                   "updatedReplicas": replicas},
    }  # fmt: skip


def _pod(
    group: str,
    worker: str,
    *,
    ready: bool = True,
    revision: str = _REV,
    full: str = _HASH,
    terminating: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": _NAME + f"-{group}" + ("" if worker == "0" else f"-{worker}"),
        "namespace": "llm",
        "labels": {
            **_LABELS,
            "infergate.io/revision": revision,
            "leaderworkerset.sigs.k8s.io/group-index": group,
            "leaderworkerset.sigs.k8s.io/worker-index": worker,
        },
        "annotations": {"infergate.io/revision-hash": f"sha256:{full}"},
    }
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = "True" if ready else "False"
    return {"metadata": metadata, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def _seen(lws: dict[str, Any], pods: list[dict[str, Any]]) -> Any:
    workload = observe_deployment(lws)
    assert workload is not None
    observed_pods = [p for p in (observe_pod(body) for body in pods) if p is not None]
    observed = collect("uid-web", [workload], [], [], observed_pods, owner_name="web")
    return observed.deployments[_REV], observed_pods


_WHOLE = [_pod("0", "0"), _pod("0", "1")]
# (case, LWS, pods, whole groups)
_CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], int]] = [
    ("whole", _lws(), _WHOLE, 1),
    ("worker-missing", _lws(), [_pod("0", "0")], 0),
    ("worker-not-ready", _lws(), [_pod("0", "0"), _pod("0", "1", ready=False)], 0),
    ("worker-restarting", _lws(), [_pod("0", "0"), _pod("0", "1", terminating=True)], 0),
    ("worker-of-another-hash", _lws(), [_pod("0", "0"), _pod("0", "1", full="f" * 64)], 0),
    ("worker-of-another-revision", _lws(), [_pod("0", "0"), _pod("0", "1", revision="9" * 10)], 0),
    ("one-of-two-groups", _lws(replicas=2, ready=2), [*_WHOLE, _pod("1", "0")], 1),
    ("two-groups", _lws(replicas=2, ready=2), [*_WHOLE, _pod("1", "0"), _pod("1", "1")], 2),
    ("no-pods-yet", _lws(ready=0), [], 0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "lws", "pods", "whole"), _CASES, ids=[c[0] for c in _CASES])
def test_a_group_counts_ready_only_when_whole_whatever_the_lws_status_says(
    case: str, lws: dict[str, Any], pods: list[dict[str, Any]], whole: int
) -> None:
    workload, observed_pods = _seen(lws, pods)
    assert workload.kind == "LeaderWorkerSet"
    assert (workload.ready_replicas, workload.available_replicas) == (whole, whole)
    assert workload.rolled_out is (whole == workload.spec_replicas)
    assert bool(broken_groups(workload, observed_pods)) is (
        whole
        < len({p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] for p in pods})
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [("LeaderWorkerSet", f"web-{_REV}"), ("Deployment", _NAME), ("LeaderWorkerSet", "web")],
)
def test_a_workload_is_the_revisions_only_under_the_name_of_its_kind(kind: str, name: str) -> None:
    """The operator adopts a LeaderWorkerSet only as `<name>-<revision>-group`, a Deployment
    only as `<name>-<revision>`: one of the other name, owner and labels alike, is none of
    the revision's."""
    body = _lws()
    body["kind"] = kind
    body["metadata"]["name"] = name
    workload = observe_deployment(body)
    assert workload is not None
    observed = collect("uid-web", [workload], [], [], [], owner_name="web")
    assert observed.deployments == {}


def test_a_retired_group_revision_is_deleted_as_its_own_kind() -> None:
    workload, _ = _seen(_lws(), _WHOLE)
    writes = sync_children([], collect("uid-web", [workload], [], [], [], owner_name="web"),
                           stable_service=None).writes  # fmt: skip
    deletes = [w for w in writes if isinstance(w, Delete)]
    assert [(d.ref.kind, d.ref.name) for d in deletes] == [("LeaderWorkerSet", _NAME)]


@pytest.mark.parametrize(
    ("desired", "observed", "drifts"),
    [("1024Gi", "1Ti", False), ("512Gi", "512Gi", False), ("1Gi", "2Gi", True),
     ("500m", "0.5", True), ("bfloat16", "float16", True)],
)  # fmt: skip
def test_a_quantity_re_encoded_by_a_webhook_is_no_drift(
    desired: str, observed: str, drifts: bool
) -> None:
    found = field_drift({"memory": desired}, {"memory": observed}, "spec")
    assert bool(found) is drifts


def _identity(body: dict[str, Any], uid: str, restarts: int = 0) -> dict[str, Any]:
    body["metadata"]["uid"] = uid
    body["status"]["containerStatuses"] = [{"name": "engine", "restartCount": restarts}]
    return body


def test_the_drift_watch_sees_a_worker_replaced_or_restarted_from_the_pod_bodies() -> None:
    """What the drift watch records of a stable group (plan/drift/restart.py) changes when a
    pod of it is replaced (a new uid) or its container restarts (a higher count), and a
    group that is not whole has none."""

    def digests(pods: list[dict[str, Any]]) -> dict[str, str] | None:
        workload, observed = _seen(_lws(), pods)
        return stable_group_digests(workload, observed)

    before = digests([_identity(_pod("0", "0"), "a"), _identity(_pod("0", "1"), "b")])
    assert before is not None
    assert list(before) == ["0"]
    same = digests([_identity(_pod("0", "0"), "a"), _identity(_pod("0", "1"), "b")])
    replaced = digests([_identity(_pod("0", "0"), "a"), _identity(_pod("0", "1"), "c")])
    restarted = digests([_identity(_pod("0", "0"), "a"), _identity(_pod("0", "1"), "b", 1)])
    assert same == before
    assert replaced != before
    assert restarted != before
    assert digests([_identity(_pod("0", "0"), "a")]) == {}
    assert stable_group_digests(None, []) is None
