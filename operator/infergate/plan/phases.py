"""Phases of both kinds, read off their conditions or verdicts, in one place.

A phase is for people; the conditions are the truth it is derived from (Argo Rollouts'
`CalculateRolloutPhase`). A ParityCheck's terminal phases are the four verdicts: once a
check has one, nothing changes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from infergate.api.common import Condition
from infergate.api.enums import CheckPhase, DeploymentPhase, VerdictOutcome
from infergate.plan import reasons

CHECK_TERMINAL_PHASES = frozenset(
    {CheckPhase.PASSED, CheckPhase.FAILED, CheckPhase.INCONCLUSIVE, CheckPhase.ERROR}
)
# The ParityCheck condition that is True for each terminal phase.
CHECK_PHASE_CONDITION = {
    CheckPhase.PASSED: reasons.CHECK_PASSED,
    CheckPhase.FAILED: reasons.CHECK_FAILED,
    CheckPhase.INCONCLUSIVE: reasons.CHECK_INCONCLUSIVE,
    CheckPhase.ERROR: reasons.CHECK_ERROR,
}


def check_phase(value: object) -> CheckPhase | None:
    """A ParityCheck phase as written in its status; None for anything else."""
    try:
        return CheckPhase(str(value))
    except ValueError:
        return None


def is_check_terminal(value: object) -> bool:
    """Whether a ParityCheck phase is a verdict (Passed, Failed, Inconclusive, Error)."""
    return check_phase(value) in CHECK_TERMINAL_PHASES


def outcome_of_phase(phase: CheckPhase) -> VerdictOutcome:
    """The verdict outcome a terminal phase stands for (Pending while it runs)."""
    if phase in CHECK_TERMINAL_PHASES:
        return VerdictOutcome(phase.value)
    return VerdictOutcome.PENDING


_PROGRESSING_PHASE: dict[str, DeploymentPhase] = {
    reasons.REVISION_CREATED: DeploymentPhase.PROGRESSING,
    reasons.CANARY_STARTED: DeploymentPhase.PROGRESSING,
    # Waiting for accelerators is progress until the deadline says otherwise.
    reasons.UNSCHEDULABLE: DeploymentPhase.PROGRESSING,
    reasons.AWAITING_PARITY: DeploymentPhase.VERIFYING,
    reasons.AWAITING_PROMOTION: DeploymentPhase.VERIFYING,
    reasons.PROMOTING: DeploymentPhase.PROMOTING,
    reasons.PROMOTION_SCALING_UP: DeploymentPhase.PROMOTING,
    reasons.PROMOTION_SWITCHING: DeploymentPhase.PROMOTING,
    reasons.PROMOTION_SCALE_DOWN_DELAY: DeploymentPhase.PROMOTING,
    # Gateway steps: the canary serves a growing share after its check passed.
    reasons.TRAFFIC_STEPPING: DeploymentPhase.PROMOTING,
    reasons.ROLLOUT_COMPLETE: DeploymentPhase.STABLE,
    reasons.ROLLED_BACK: DeploymentPhase.ROLLED_BACK,
    reasons.PROGRESS_DEADLINE_EXCEEDED: DeploymentPhase.FAILED,
    reasons.INVALID_SPEC: DeploymentPhase.FAILED,
    reasons.REVISION_LOST: DeploymentPhase.FAILED,
}


def deployment_phase(conditions: Sequence[Condition]) -> DeploymentPhase:
    """An InferenceDeployment's phase, read off its Progressing condition's reason.

    Every Progressing reason maps to exactly one phase, so the phase never says
    something the conditions do not.
    """
    progressing = next((c for c in conditions if c.type == reasons.PROGRESSING), None)
    if progressing is None:
        return DeploymentPhase.PROGRESSING
    return _PROGRESSING_PHASE.get(progressing.reason, DeploymentPhase.PROGRESSING)
