"""A group leader held out of serving by the readiness gate `infergate.io/checked` (a
restarted group awaiting its drift run) is no ready endpoint: users never reach it, and a
canary check never calls it. The check that re-checks it (the candidate of a check against
a golden record, as a drift run is) calls it first, if its containers are ready, that gate
alone holds it, and the revision's own LeaderWorkerSet made it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infergate.jsontypes import JSON
from infergate.runner.endpoints import ENDPOINTSLICE_CONTROLLER, EndpointResolutionError
from infergate.runner.side_pods import (
    ForgedEndpointError,
    RevisionPods,
    held_by_gate,
    own_pod_url,
)

NAME = "web-0123456789-group"
"""The LeaderWorkerSet of revision 0123456789 of InferenceDeployment web; its leader
StatefulSet takes its name."""
SERVICE_NAME = "web-0123456789"
SELECTOR = {"leaderworkerset.sigs.k8s.io/name": NAME, "role": "leader"}
SERVICE: dict[str, Any] = {
    "metadata": {"name": SERVICE_NAME, "namespace": "llm", "uid": "uid-svc"},
    "spec": {"ports": [{"name": "http", "port": 8000}]},
}
MAKER = RevisionPods.of("web", "0123456789", "uid-lws")


def _ref(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}


STATEFUL_SET: dict[str, Any] = {
    "metadata": {"name": NAME, "uid": "uid-sts",
                 "ownerReferences": [_ref("LeaderWorkerSet", NAME, "uid-lws")]},
    "spec": {"selector": {"matchLabels": dict(SELECTOR)}},
}  # fmt: skip


def _leader(
    group: int, *, gate: str | None, ready_reason: str = "ReadinessGatesNotReady"
) -> dict[str, Any]:
    """Leader of group `group` at 127.114.0.<group+1>; `gate` None: Ready, no gate held."""
    conditions: list[dict[str, Any]] = [{"type": "ContainersReady", "status": "True"}]
    if gate is None:
        conditions.append({"type": "Ready", "status": "True"})
    else:
        conditions += [
            {"type": "Ready", "status": "False", "reason": ready_reason},
            {"type": "infergate.io/checked", "status": gate},
        ]
    return {
        "metadata": {"name": f"{NAME}-{group}", "namespace": "llm", "uid": f"uid-{group}",
                     "labels": dict(SELECTOR),
                     "ownerReferences": [_ref("StatefulSet", NAME, "uid-sts")]},
        "spec": {"readinessGates": [{"conditionType": "infergate.io/checked"}]},
        "status": {"podIP": f"127.114.0.{group + 1}", "conditions": conditions},
    }  # fmt: skip


class _Reads:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}

    def pod(self, name: str) -> JSON | None:
        return self.pods.get(name)

    def replica_set(self, name: str) -> JSON | None:
        del name  # a group leader is made by a StatefulSet, never a ReplicaSet
        return None

    def stateful_set(self, name: str) -> JSON | None:
        return copy.deepcopy(STATEFUL_SET) if name == NAME else None


def _slice(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The EndpointSlice controller's slice: a pod not Ready is listed with ready false."""
    endpoints = []
    for pod in pods:
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in pod["status"]["conditions"])  # fmt: skip
        endpoints.append({
            "addresses": [pod["status"]["podIP"]],
            "conditions": {"ready": ready, "serving": ready, "terminating": False},
            "targetRef": {"kind": "Pod", "name": pod["metadata"]["name"],
                          "uid": pod["metadata"]["uid"]},
        })  # fmt: skip
    return {
        "metadata": {
            "name": f"{SERVICE_NAME}-abcde",
            "labels": {"kubernetes.io/service-name": SERVICE_NAME,
                       "endpointslice.kubernetes.io/managed-by": ENDPOINTSLICE_CONTROLLER},
            "ownerReferences": [_ref("Service", SERVICE_NAME, "uid-svc")],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": endpoints,
    }  # fmt: skip


def _url(pods: list[dict[str, Any]], *, awaiting: bool) -> str:
    return own_pod_url(_Reads(pods), SERVICE, [_slice(pods)], MAKER, awaiting_check=awaiting)


def test_the_re_check_calls_the_held_leader_first() -> None:
    pods = [_leader(0, gate=None), _leader(1, gate="False")]
    assert _url(pods, awaiting=True) == "http://127.114.0.2:8000"
    # Any other check calls a serving leader only.
    assert _url(pods, awaiting=False) == "http://127.114.0.1:8000"


def test_a_held_leader_alone_is_reached_only_by_its_re_check() -> None:
    pods = [_leader(0, gate="False")]
    assert _url(pods, awaiting=True) == "http://127.114.0.1:8000"
    with pytest.raises(EndpointResolutionError, match="no ready endpoint"):
        _url(pods, awaiting=False)


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(_leader(0, gate="False", ready_reason="NodeNotReady"), id="not-ready-else"),
        pytest.param(_leader(0, gate="True", ready_reason="ContainersNotReady"), id="gate-open"),
    ],
)
def test_a_leader_not_ready_for_another_reason_is_never_called(pod: dict[str, Any]) -> None:
    assert not held_by_gate(pod)
    with pytest.raises(EndpointResolutionError):
        _url([pod], awaiting=True)


def test_a_held_look_alike_leader_ends_the_check() -> None:
    """A pod naming the leader StatefulSet as owner without its selector: not made by it."""
    look_alike = _leader(0, gate="False")
    look_alike["metadata"]["labels"] = {"infergate.io/revision": "0123456789"}
    pods = [look_alike]
    with pytest.raises(ForgedEndpointError):
        _url(pods, awaiting=True)
