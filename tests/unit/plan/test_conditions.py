"""Conditions as metav1.Condition: transition times, Events per change, phase from conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.enums import ConditionStatus, DeploymentPhase
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate, set_condition
from infergate.plan.deployment.reconcile import condition_events, invalid_spec_status
from infergate.plan.phases import deployment_phase

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE


def test_transition_time_moves_only_when_status_flips() -> None:
    first = set_condition(
        [], ConditionUpdate("Available", FALSE, "NoStableRevision", "x"), generation=1, now=T0
    )
    same = set_condition(
        first,
        ConditionUpdate("Available", FALSE, "ReplicasUnavailable", "y"),
        generation=2,
        now=T0 + timedelta(minutes=1),
    )
    assert same[0].last_transition_time == T0
    assert same[0].reason == "ReplicasUnavailable"
    assert same[0].observed_generation == 2
    flipped = set_condition(
        same,
        ConditionUpdate("Available", TRUE, "MinimumReplicasAvailable", "z"),
        generation=2,
        now=T0 + timedelta(minutes=2),
    )
    assert flipped[0].last_transition_time == T0 + timedelta(minutes=2)


@pytest.mark.parametrize(
    ("status", "reason", "phase"),
    [
        (TRUE, reasons.REVISION_CREATED, DeploymentPhase.PROGRESSING),
        (TRUE, reasons.CANARY_STARTED, DeploymentPhase.PROGRESSING),
        (TRUE, reasons.AWAITING_PARITY, DeploymentPhase.VERIFYING),
        (TRUE, reasons.AWAITING_PROMOTION, DeploymentPhase.VERIFYING),
        (TRUE, reasons.PROMOTING, DeploymentPhase.PROMOTING),
        (FALSE, reasons.ROLLOUT_COMPLETE, DeploymentPhase.STABLE),
        (FALSE, reasons.ROLLED_BACK, DeploymentPhase.ROLLED_BACK),
        (TRUE, reasons.UNSCHEDULABLE, DeploymentPhase.PROGRESSING),
        (FALSE, reasons.PROGRESS_DEADLINE_EXCEEDED, DeploymentPhase.FAILED),
        (FALSE, reasons.INVALID_SPEC, DeploymentPhase.FAILED),
    ],
)
def test_phase_is_read_off_progressing(
    status: ConditionStatus, reason: str, phase: DeploymentPhase
) -> None:
    conditions = set_condition(
        [], ConditionUpdate(reasons.PROGRESSING, status, reason, "m"), generation=1, now=T0
    )
    assert deployment_phase(conditions) is phase


def test_events_only_for_changed_conditions_and_warnings_for_bad_ones() -> None:
    before = set_condition(
        [], ConditionUpdate("Degraded", FALSE, "Healthy", "ok"), generation=1, now=T0
    )
    before = set_condition(
        before, ConditionUpdate("Available", TRUE, "MinimumReplicasAvailable", "1/2"),
        generation=1, now=T0,
    )  # fmt: skip
    after = set_condition(
        before, ConditionUpdate("Degraded", TRUE, "Unschedulable", "no node"), generation=1, now=T0
    )
    after = set_condition(
        after, ConditionUpdate("Available", TRUE, "MinimumReplicasAvailable", "2/2"),
        generation=1, now=T0,
    )  # fmt: skip
    [event] = condition_events(before, after)
    assert event.warning
    assert event.reason == "Unschedulable"
    assert "no node" in event.message


def test_invalid_spec_status_says_why_and_keeps_the_rest() -> None:
    previous = InferenceDeploymentStatus(stable_revision="0123456789")
    status = invalid_spec_status(previous, 3, "spec.engine.dtype: 'auto' is not allowed", T0)
    assert status.stable_revision == "0123456789"
    assert status.phase is DeploymentPhase.FAILED
    assert status.observed_generation == 3
    assert {c.type: c.reason for c in status.conditions} == {
        "Progressing": "InvalidSpec",
        "Degraded": "InvalidSpec",
    }


def test_one_event_per_transition_with_what_changed_alongside_and_warnings_apart() -> None:
    before = set_condition(
        [], ConditionUpdate("Progressing", FALSE, "RolloutComplete", "stable a"), generation=1,
        now=T0,
    )  # fmt: skip
    before = set_condition(
        before, ConditionUpdate("ParityPassed", TRUE, "Passed", "a passed"), generation=1, now=T0
    )
    before = set_condition(
        before, ConditionUpdate("Degraded", FALSE, "Healthy", "ok"), generation=1, now=T0
    )
    after = set_condition(
        before, ConditionUpdate("Progressing", TRUE, "CanaryStarted", "canary b starting"),
        generation=2, now=T0,
    )  # fmt: skip
    after = set_condition(
        after, ConditionUpdate("ParityPassed", ConditionStatus.UNKNOWN, "CheckPending", "b waits"),
        generation=2, now=T0,
    )  # fmt: skip
    [started] = condition_events(before, after)
    assert (started.warning, started.reason) == (False, "CanaryStarted")
    assert started.message == "Progressing: canary b starting; ParityPassed: b waits"

    degraded = set_condition(
        after, ConditionUpdate("Degraded", TRUE, "Unschedulable", "no node"), generation=2, now=T0
    )
    events = condition_events(before, degraded)
    assert [(e.warning, e.reason) for e in events] == [
        (False, "CanaryStarted"),
        (True, "Unschedulable"),
    ]
    # Without a rollout transition each change is its own Event.
    quiet = set_condition(
        before, ConditionUpdate("ParityPassed", FALSE, "Failed", "a failed"), generation=1, now=T0
    )
    assert [(e.warning, e.reason) for e in condition_events(before, quiet)] == [(True, "Failed")]
