"""The readiness gate `infergate.io/checked` of group leaders (the drift watch on): a
leader serves once its group is whole, unless its group is a restarted group of the
stable revision awaiting a drift run that passes; a held leader counts no ready replica
and still counts whole, so the restart is seen and re-checked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from infergate.api.drift import DriftStatus
from infergate.plan.deployment.gates import leader_gates
from infergate.plan.deployment.observed import (
    collect,
    observe_deployment,
    observe_pod,
    stable_group_digests,
)

from .test_group_workload import _REV, _lws, _pod

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
GATE = "infergate.io/checked"


def _leader(
    group: str = "0", *, checked: str | None = None, reason: str | None = None, ready: bool = True
) -> dict[str, Any]:
    """A leader with the gate: Ready only when the gate is True (as a kubelet says it)."""
    pod = _pod(group, "0", ready=ready)
    pod["spec"] = {"readinessGates": [{"conditionType": GATE}]}
    held = checked != "True"
    conditions: list[dict[str, Any]] = [
        {"type": "ContainersReady", "status": "True" if ready else "False"},
        {"type": "Ready", "status": "True" if ready and not held else "False"}
        | ({"reason": "ReadinessGatesNotReady"} if ready and held else {}),
    ]
    if checked is not None:
        conditions.append({"type": GATE, "status": checked, "reason": reason or "GroupChecked"})
    pod["status"] = {"conditions": conditions}
    return pod


def _gates(pods: list[dict[str, Any]], drift: DriftStatus | None) -> list[tuple[str, bool, str]]:
    workload = observe_deployment(_lws())
    assert workload is not None
    observed = [p for p in (observe_pod(body) for body in pods) if p is not None]
    seen = collect("uid-web", [workload], [], [], observed, owner_name="web")
    return [
        (w.pod, w.status, w.reason) for w in leader_gates(seen.deployments, observed, drift, NOW)
    ]


HELD = DriftStatus(revision=_REV, groups=["0=x"], held_groups=["0"], hold_run=2)
LEADER = f"web-{_REV}-group-0"
# Each case: its name, the pods, status.drift, and the gate writes expected.
_CASES: list[tuple[str, list[dict[str, Any]], DriftStatus | None, list[tuple[str, bool, str]]]] = [
    ("whole-unset-opens", [_leader(), _pod("0", "1")], None, [(LEADER, True, "GroupChecked")]),
    ("whole-open-no-write", [_leader(checked="True"), _pod("0", "1")], None, []),
    ("not-whole-left-alone", [_leader()], None, []),
    ("worker-not-ready-left-alone", [_leader(), _pod("0", "1", ready=False)], None, []),
    ("leader-not-ready-left-alone", [_leader(ready=False), _pod("0", "1")], None, []),
    ("held-unset-closes", [_leader(), _pod("0", "1")], HELD,
     [(LEADER, False, "AwaitingDriftCheck")]),
    ("held-open-closes", [_leader(checked="True"), _pod("0", "1")], HELD,
     [(LEADER, False, "AwaitingDriftCheck")]),
    ("held-closed-no-write",
     [_leader(checked="False", reason="AwaitingDriftCheck"), _pod("0", "1")], HELD, []),
    ("released-opens", [_leader(checked="False", reason="AwaitingDriftCheck"), _pod("0", "1")],
     HELD.model_copy(update={"held_groups": [], "hold_run": None}),
     [(LEADER, True, "GroupChecked")]),
    ("held-of-another-revision-opens", [_leader(), _pod("0", "1")],
     HELD.model_copy(update={"revision": "9" * 10}), [(LEADER, True, "GroupChecked")]),
    ("another-group-held", [_leader(), _pod("0", "1")],
     HELD.model_copy(update={"held_groups": ["1"]}), [(LEADER, True, "GroupChecked")]),
    ("no-gate-watch-off", [_pod("0", "0"), _pod("0", "1")], HELD, []),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pods", "drift", "writes"), _CASES, ids=[c[0] for c in _CASES])
def test_a_leader_serves_once_its_group_is_whole_and_not_held(
    case: str,
    pods: list[dict[str, Any]],
    drift: DriftStatus | None,
    writes: list[tuple[str, bool, str]],
) -> None:
    assert _gates(pods, drift) == writes


@pytest.mark.parametrize(
    ("checked", "ready_replicas"), [(None, 0), ("False", 0), ("True", 1)], ids=str
)
def test_a_held_group_is_whole_but_no_ready_replica(
    checked: str | None, ready_replicas: int
) -> None:
    pods = [_leader(checked=checked), _pod("0", "1")]
    workload = observe_deployment(_lws())
    assert workload is not None
    observed = [p for p in (observe_pod(body) for body in pods) if p is not None]
    seen = collect("uid-web", [workload], [], [], observed, owner_name="web")
    counted = seen.deployments[_REV]
    assert (counted.ready_replicas, counted.available_replicas) == (ready_replicas,) * 2
    # Whole all the same: the drift watch sees the group (and a restart of it).
    assert list(stable_group_digests(counted, observed) or {}) == ["0"]


def test_a_leader_not_ready_for_another_reason_is_not_whole() -> None:
    """Ready False for a reason other than the gates (a node lost): not whole."""
    pod = _leader()
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    ready["reason"] = "NodeNotReady"
    workload = observe_deployment(_lws())
    assert workload is not None
    observed = [p for p in (observe_pod(body) for body in [pod, _pod("0", "1")]) if p is not None]
    assert stable_group_digests(workload, observed) == {}
