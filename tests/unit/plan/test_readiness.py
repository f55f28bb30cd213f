"""Ready, Reconciling and Stalled, as `kubectl wait --for=condition=Ready`, kstatus and
Argo CD read them: tables over each kind's own conditions, then a rollout and a check
seen through them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from infergate.api.common import Condition
from infergate.api.crd import RESOURCE_KINDS, crd_document
from infergate.api.enums import CheckPhase, ConditionStatus
from infergate.plan import reasons
from infergate.plan.check.status import check_conditions, terminal_updates
from infergate.plan.conditions import ConditionUpdate, from_kube
from infergate.plan.readiness import State, check_readiness, deployment_readiness
from tests.unit.plan.deployment.world import World

T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _available(status: ConditionStatus, reason: str) -> ConditionUpdate:
    return ConditionUpdate(reasons.AVAILABLE, status, reason, f"available: {reason}")


def _progressing(status: ConditionStatus, reason: str) -> ConditionUpdate:
    return ConditionUpdate(reasons.PROGRESSING, status, reason, f"progressing: {reason}")


def _degraded(status: ConditionStatus, reason: str) -> ConditionUpdate:
    return ConditionUpdate(reasons.DEGRADED, status, reason, f"degraded: {reason}")


OK = _degraded(F, reasons.HEALTHY)
UP = _available(T, reasons.MINIMUM_REPLICAS_AVAILABLE)
DONE = _progressing(F, reasons.ROLLOUT_COMPLETE)


@pytest.mark.parametrize(
    ("available", "progressing", "degraded", "pods", "state", "reason"),
    [
        # Done: complete, at full size, healthy.
        (UP, DONE, OK, 2, State.READY, reasons.ROLLOUT_COMPLETE),
        (UP, DONE, OK, 3, State.READY, reasons.ROLLOUT_COMPLETE),
        # Scaled to zero on purpose is done too.
        (_available(F, reasons.SCALED_TO_ZERO), DONE, OK, 0, State.READY, reasons.SCALED_TO_ZERO),
        # Complete, serving, but not every pod of the stable revision is available yet.
        (UP, DONE, OK, 1, State.RECONCILING, reasons.WAITING_FOR_REPLICAS),
        # A rollout moving, whatever step, a manual gate and waiting for capacity included.
        (UP, _progressing(T, reasons.CANARY_STARTED), OK, 2, State.RECONCILING,
         reasons.CANARY_STARTED),
        (UP, _progressing(T, reasons.AWAITING_PARITY), OK, 2, State.RECONCILING,
         reasons.AWAITING_PARITY),
        (UP, _progressing(T, reasons.AWAITING_PROMOTION), OK, 2, State.RECONCILING,
         reasons.AWAITING_PROMOTION),
        (UP, _progressing(T, reasons.PROMOTION_SCALING_UP), OK, 1, State.RECONCILING,
         reasons.PROMOTION_SCALING_UP),
        (UP, _progressing(T, reasons.UNSCHEDULABLE), OK, 2, State.RECONCILING,
         reasons.UNSCHEDULABLE),
        (_available(F, reasons.NO_STABLE_REVISION), _progressing(T, reasons.REVISION_CREATED),
         OK, 0, State.RECONCILING, reasons.REVISION_CREATED),
        # The stable's pods went away: the operator waits for them, nothing for a person yet.
        (_available(F, reasons.REPLICAS_UNAVAILABLE), DONE,
         _degraded(T, reasons.REPLICAS_UNAVAILABLE), 0, State.RECONCILING,
         reasons.REPLICAS_UNAVAILABLE),
        # A person must act.
        (UP, _progressing(F, reasons.ROLLED_BACK), OK, 2, State.STALLED, reasons.ROLLED_BACK),
        (UP, _progressing(F, reasons.PROGRESS_DEADLINE_EXCEEDED),
         _degraded(T, reasons.PROGRESS_DEADLINE_EXCEEDED), 2, State.STALLED,
         reasons.PROGRESS_DEADLINE_EXCEEDED),
        (_available(F, reasons.NO_STABLE_REVISION), _progressing(F, reasons.INVALID_SPEC),
         _degraded(T, reasons.INVALID_SPEC), 0, State.STALLED, reasons.INVALID_SPEC),
        (UP, _progressing(F, reasons.REVISION_LOST), _degraded(T, reasons.REVISION_LOST), 2,
         State.STALLED, reasons.REVISION_LOST),
        # A name held by someone else's object stalls even a rollout in progress.
        (UP, _progressing(T, reasons.TRAFFIC_HELD), _degraded(T, reasons.NAME_TAKEN), 2,
         State.STALLED, reasons.NAME_TAKEN),
        # Unknown progress is not done.
        (UP, _progressing(U, reasons.REVISION_CREATED), OK, 2, State.RECONCILING,
         reasons.REVISION_CREATED),
    ],
)  # fmt: skip
def test_a_deployment_state_is_read_off_its_conditions(
    *,
    available: ConditionUpdate,
    progressing: ConditionUpdate,
    degraded: ConditionUpdate,
    pods: int,
    state: State,
    reason: str,
) -> None:
    replicas = 0 if available.reason == reasons.SCALED_TO_ZERO else 2
    readiness = deployment_readiness(
        available, progressing, degraded, available_replicas=pods, replicas=replicas
    )
    assert (readiness.state, readiness.reason) == (state, reason)


def test_the_three_conditions_say_one_state_with_one_reason() -> None:
    readiness = deployment_readiness(
        UP, _progressing(F, reasons.ROLLED_BACK), OK, available_replicas=2, replicas=2
    )
    assert [(u.type, u.status, u.reason) for u in readiness.updates()] == [
        (reasons.READY, F, reasons.ROLLED_BACK),
        (reasons.RECONCILING, F, reasons.ROLLED_BACK),
        (reasons.STALLED, T, reasons.ROLLED_BACK),
    ]
    assert {u.message for u in readiness.updates()} == {"progressing: RolledBack"}


def _check(*updates: ConditionUpdate) -> list[Condition]:
    return from_kube(check_conditions({}, list(updates), generation=1, at=AT))


@pytest.mark.parametrize(
    ("updates", "state", "reason"),
    [
        ([], State.RECONCILING, reasons.CHECK_NOT_STARTED),
        ([ConditionUpdate(reasons.CHECK_COMPLETE, F, reasons.CHECK_WAITING_FOR_SIDES, "w")],
         State.RECONCILING, reasons.CHECK_WAITING_FOR_SIDES),
        ([ConditionUpdate(reasons.CHECK_COMPLETE, F, reasons.CHECK_RUNNER_STARTED, "r"),
          ConditionUpdate(reasons.CHECK_RUNNER_ERROR, T, reasons.CHECK_RUNNER_FAILED, "x")],
         State.RECONCILING, reasons.CHECK_RUNNER_STARTED),
        (terminal_updates(CheckPhase.PASSED, reasons.CHECK_PARITY_PASSED, "p"),
         State.READY, reasons.CHECK_PARITY_PASSED),
        (terminal_updates(CheckPhase.FAILED, reasons.CHECK_PARITY_FAILED, "f"),
         State.STALLED, reasons.CHECK_PARITY_FAILED),
        (terminal_updates(CheckPhase.INCONCLUSIVE, reasons.CHECK_NOT_ENOUGH_EVIDENCE, "i"),
         State.STALLED, reasons.CHECK_NOT_ENOUGH_EVIDENCE),
        (terminal_updates(CheckPhase.ERROR, reasons.CHECK_DEADLINE_EXCEEDED, "e"),
         State.STALLED, reasons.CHECK_DEADLINE_EXCEEDED),
    ],
)  # fmt: skip
def test_a_check_state_is_that_of_a_job(
    updates: list[ConditionUpdate], state: State, reason: str
) -> None:
    readiness = check_readiness(from_kube(_raw(updates)))
    assert (readiness.state, readiness.reason) == (state, reason)


def _raw(updates: list[ConditionUpdate]) -> list[dict[str, Any]]:
    """Conditions as the check held them before Ready was derived from them."""
    return [
        {"type": u.type, "status": u.status.value, "reason": u.reason, "message": u.message,
         "lastTransitionTime": "2026-01-05T09:00:00Z"}
        for u in updates
    ]  # fmt: skip


def test_every_write_of_a_check_carries_ready_reconciling_and_stalled() -> None:
    running = _check(ConditionUpdate(reasons.CHECK_COMPLETE, F, reasons.CHECK_RUNNER_STARTED, "r"))
    shown = {c.type: c.status for c in running}
    assert (shown["Ready"], shown["Reconciling"], shown["Stalled"]) == (F, T, F)
    passed = _check(*terminal_updates(CheckPhase.PASSED, reasons.CHECK_PARITY_PASSED, "ok"))
    ready = next(c for c in passed if c.type == "Ready")
    assert (ready.status, ready.reason, ready.observed_generation) == (T, "ParityPassed", 1)
    assert [c.type for c in passed][-3:] == ["Ready", "Reconciling", "Stalled"]


def _shown(world: World) -> tuple[str, str, str, str]:
    ready = world.condition("Ready")
    return (ready[0], world.condition("Reconciling")[0], world.condition("Stalled")[0], ready[1])


def test_a_rollout_reads_reconciling_then_ready_then_stalled_after_a_rollback() -> None:
    world = World()
    world.reconcile()
    assert _shown(world) == ("False", "True", "False", "RevisionCreated")
    world.make_available()
    world.reconcile()
    assert _shown(world) == ("True", "False", "False", "RolloutComplete")
    ready = next(c for c in world.status.conditions if c.type == "Ready")
    assert ready.observed_generation == world.status.observed_generation == world.generation

    world.set("replicas", 3)
    world.reconcile()
    assert _shown(world) == ("False", "True", "False", "WaitingForReplicas")
    world.make_available()
    world.reconcile()
    assert _shown(world) == ("True", "False", "False", "RolloutComplete")

    world.change(dtype="float16")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    assert _shown(world) == ("False", "True", "False", "CanaryStarted")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"qwen-{canary}", "Failed", passed=False)
    world.reconcile()
    assert _shown(world) == ("False", "False", "True", "RolledBack")
    # Derived from the others, they post no Events of their own.
    messages = [e.message for plan in world.plans for e in plan.events]
    assert not [m for m in messages if m.startswith(("Ready:", "Reconciling:", "Stalled:"))]


@pytest.mark.parametrize("resource", RESOURCE_KINDS, ids=lambda r: r.kind)
def test_the_crd_keeps_the_conditions_kubectl_wait_reads(resource: Any) -> None:
    schema = crd_document(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = schema["properties"]["status"]["properties"]
    assert "observedGeneration" in status
    item = status["conditions"]["items"]
    assert {"type", "status", "reason", "observedGeneration"} <= set(item["properties"])
