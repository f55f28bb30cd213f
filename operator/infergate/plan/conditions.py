"""metav1.Condition-shaped conditions: one pure setter, lookups, and the phase they imply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from infergate.api.common import Condition
from infergate.api.enums import ConditionStatus, DeploymentPhase
from infergate.plan import reasons

# Kubernetes caps condition messages at 32768 characters.
_MESSAGE_MAX = 32768


@dataclass(frozen=True)
class ConditionUpdate:
    """The wanted state of one condition; `set_condition` decides the transition time."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    """Whether the condition is present with status True."""
    found = find_condition(conditions, type_)
    return found is not None and found.status is ConditionStatus.TRUE


def set_condition(
    conditions: Sequence[Condition],
    update: ConditionUpdate,
    *,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Conditions with `update` applied; lastTransitionTime moves only when the status flips."""
    previous = find_condition(conditions, update.type)
    since = (
        previous.last_transition_time
        if previous is not None and previous.status is update.status
        else now
    )
    replacement = Condition(
        type=update.type,
        status=update.status,
        reason=update.reason,
        message=update.message[:_MESSAGE_MAX],
        observed_generation=generation,
        last_transition_time=since,
    )
    kept = [c for c in conditions if c.type != update.type]
    ordered = [*kept, replacement]
    order = {name: index for index, name in enumerate(reasons.CONDITION_TYPES)}
    return sorted(ordered, key=lambda c: order.get(c.type, len(order)))


def changed_conditions(before: Sequence[Condition], after: Sequence[Condition]) -> list[Condition]:
    """Conditions of `after` whose status or reason differ from `before` (each is an Event)."""
    changed: list[Condition] = []
    for condition in after:
        old = find_condition(before, condition.type)
        if old is None or old.status is not condition.status or old.reason != condition.reason:
            changed.append(condition)
    return changed


_PROGRESSING_PHASE: dict[str, DeploymentPhase] = {
    reasons.REVISION_CREATED: DeploymentPhase.PROGRESSING,
    reasons.CANARY_STARTED: DeploymentPhase.PROGRESSING,
    reasons.AWAITING_PARITY: DeploymentPhase.VERIFYING,
    reasons.AWAITING_PROMOTION: DeploymentPhase.VERIFYING,
    reasons.PROMOTING: DeploymentPhase.PROMOTING,
    reasons.ROLLOUT_COMPLETE: DeploymentPhase.STABLE,
    reasons.ROLLED_BACK: DeploymentPhase.ROLLED_BACK,
    reasons.PROGRESS_DEADLINE_EXCEEDED: DeploymentPhase.FAILED,
    reasons.UNSCHEDULABLE: DeploymentPhase.FAILED,
    reasons.INVALID_SPEC: DeploymentPhase.FAILED,
    reasons.REVISION_LOST: DeploymentPhase.FAILED,
}


def derive_phase(conditions: Sequence[Condition]) -> DeploymentPhase:
    """The phase shown to people, read off the Progressing condition's reason.

    Every Progressing reason maps to exactly one phase, so the phase never says
    something the conditions do not (as Argo Rollouts derives its phase).
    """
    progressing = find_condition(conditions, reasons.PROGRESSING)
    if progressing is None:
        return DeploymentPhase.PROGRESSING
    return _PROGRESSING_PHASE.get(progressing.reason, DeploymentPhase.PROGRESSING)
