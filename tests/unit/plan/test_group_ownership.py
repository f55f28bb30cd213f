"""A multi-node revision's leader is trusted only through the recorded LeaderWorkerSet uid:
pod -> leader StatefulSet -> LeaderWorkerSet; copyable metadata alone decides nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infergate.plan.ownership import (
    leader_not_made_by,
    revision_group_set,
    stateful_set_of,
)

LWS = revision_group_set("web", "0123456789", "uid-lws")
SELECTOR = {"leaderworkerset.sigs.k8s.io/name": "web-0123456789-group", "role": "leader"}


def _ref(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}


def _stateful_set(owner: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-0123456789-group",
            "uid": "uid-sts",
            "ownerReferences": [
                owner or _ref("LeaderWorkerSet", "web-0123456789-group", "uid-lws")
            ],
        },
        "spec": {"selector": {"matchLabels": dict(SELECTOR)}},
    }


def _leader(owner: dict[str, Any] | None = None, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-0123456789-group-0",
            "namespace": "llm",
            "labels": {**SELECTOR, **labels},
            "ownerReferences": [owner or _ref("StatefulSet", "web-0123456789-group", "uid-sts")],
        }
    }


def test_a_leader_of_the_recorded_leader_worker_set_is_accepted() -> None:
    assert stateful_set_of(_leader()) == "web-0123456789-group"
    assert leader_not_made_by(_leader(), _stateful_set(), LWS) is None


def _other_lws_uid() -> tuple[dict[str, Any], dict[str, Any]]:
    return _leader(), _stateful_set(_ref("LeaderWorkerSet", "web-0123456789-group", "uid-tenant"))


def _worker_set() -> tuple[dict[str, Any], dict[str, Any]]:
    # A worker's StatefulSet is controlled by its leader pod, never by the LWS.
    return _leader(), _stateful_set(_ref("Pod", "web-0123456789-group-0", "uid-leader"))


def _set_under_the_revision_name() -> tuple[dict[str, Any], dict[str, Any]]:
    # The revision's own name (its Service's) is not its LeaderWorkerSet's, whatever the uid.
    return _leader(), _stateful_set(_ref("LeaderWorkerSet", "web-0123456789", "uid-lws"))


def _tenant_set() -> tuple[dict[str, Any], dict[str, Any]]:
    return _leader(), _stateful_set(_ref("StatefulSet", "tenant", "uid-x"))


def _pod_of_another_set() -> tuple[dict[str, Any], dict[str, Any]]:
    return _leader(_ref("StatefulSet", "web-0123456789-group", "uid-other")), _stateful_set()


def _pod_without_selector() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = _leader()
    pod["metadata"]["labels"] = {"infergate.io/revision": "0123456789"}
    return pod, _stateful_set()


def _set_without_selector() -> tuple[dict[str, Any], dict[str, Any]]:
    sts = copy.deepcopy(_stateful_set())
    sts["spec"] = {}
    return _leader(), sts


@pytest.mark.parametrize(
    ("case", "says"),
    [
        (_other_lws_uid, "not controlled by LeaderWorkerSet web-0123456789-group"),
        (_set_under_the_revision_name, "not controlled by LeaderWorkerSet web-0123456789-group"),
        (_worker_set, "not controlled by LeaderWorkerSet"),
        (_tenant_set, "not controlled by LeaderWorkerSet"),
        (_pod_of_another_set, "is not controlled by StatefulSet"),
        (_pod_without_selector, "does not carry its selector"),
        (_set_without_selector, "does not carry its selector"),
    ],
    ids=["another-lws-uid", "revision-name", "worker-set", "tenant-set", "pod-of-another-set",
         "pod-without-selector", "set-without-selector"],
)  # fmt: skip
def test_a_pod_outside_the_recorded_group_chain_is_refused(case: Any, says: str) -> None:
    pod, stateful_set = case()
    why = leader_not_made_by(pod, stateful_set, LWS)
    assert why is not None
    assert says in why, why
