"""What a finished drift run's verdict means, and what the watch does about it (pure).

A verdict counts only when it is bound to the run (its spec as the operator made it,
judged at its generation, on the stable revision against the stable's record): Passed ->
Drifted False; Failed -> Drifted True, a Warning Event and, with onDrift.action
rollback, a rollback to onDrift.rollbackTo if that revision is retained; Inconclusive
and Error are not a pass: Drifted becomes Unknown (or stays True after a drift was
seen). A run past its deadline (and the grace on top) is stopped and counts as an Error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from infergate.api.common import Condition
from infergate.api.drift import DriftAction, DriftStatus
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.plan import reasons
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.drift.state import GRACE, DriftInput, DriftPlan, Seen, seconds_until
from infergate.plan.notices import Notice, Outcome


def bound_drift_verdict(check: ObservedCheck, stable: str) -> tuple[VerdictOutcome, str | None]:
    """(outcome, why a verdict does not count) of a drift run, failing closed.

    Passed and Failed both count only when bound to the run: a forged Failed would roll
    back as surely as a forged Passed would hide a drift. An unbound one is an Error."""
    phase = check.phase
    if phase is None or not check.terminal:
        return VerdictOutcome.PENDING, None
    outcome = VerdictOutcome(phase.value)
    if outcome not in (VerdictOutcome.PASSED, VerdictOutcome.FAILED):
        return outcome, None
    problems = []
    if check.passed is not (outcome is VerdictOutcome.PASSED):
        problems.append(f"verdict.passed is {check.passed} for phase {phase.value}")
    if check.outcome is not outcome:
        problems.append(f"verdict.outcome is {check.outcome.value if check.outcome else 'unset'}")
    if (check.spec_golden, check.spec_candidate) != (stable, stable):
        problems.append(
            f"its spec compares {check.spec_candidate} with the record of {check.spec_golden}, "
            f"not stable {stable} with its own"
        )
    if (check.status_baseline, check.status_candidate) != (stable, stable):
        problems.append(
            f"it resolved {check.status_baseline} and {check.status_candidate}, not {stable}"
        )
    problems.extend(check.binding_problems())
    if problems:
        return VerdictOutcome.ERROR, "; ".join(problems)
    return outcome, None


def verdict_condition(
    outcome: VerdictOutcome,
    *,
    check: str,
    stable: str,
    summary: str,
    unbound: str | None,
    prior: Condition | None,
) -> ConditionUpdate:
    """The Drifted condition a finished run stands for.

    Inconclusive and Error are never a pass: Unknown, or True still when a drift was seen
    before (no evidence clears an alarm)."""
    if outcome is VerdictOutcome.PASSED:
        return ConditionUpdate(
            reasons.DRIFTED,
            ConditionStatus.FALSE,
            reasons.NO_DRIFT_DETECTED,
            f"drift run {check}: stable revision {stable} still answers like its golden record "
            f"({summary})",
        )
    if outcome is VerdictOutcome.FAILED:
        return ConditionUpdate(
            reasons.DRIFTED,
            ConditionStatus.TRUE,
            reasons.DRIFT_DETECTED,
            f"drift run {check}: stable revision {stable} no longer answers like its golden "
            f"record, with no spec change ({summary})",
        )
    if unbound is not None:
        reason, said = reasons.DRIFT_CHECK_NOT_BOUND, f"its verdict does not count: {unbound}"
    elif outcome is VerdictOutcome.INCONCLUSIVE:
        reason, said = reasons.DRIFT_CHECK_INCONCLUSIVE, f"too little evidence ({summary})"
    else:
        reason, said = reasons.DRIFT_CHECK_ERROR, f"could not judge ({summary})"
    if prior is not None and prior.status is ConditionStatus.TRUE:
        return ConditionUpdate(
            reasons.DRIFTED,
            ConditionStatus.TRUE,
            reasons.DRIFT_DETECTED,
            f"{prior.message.split(' | latest run ', 1)[0]} | latest run {check}: {said}; the "
            "drift stands until a run passes",
        )
    return ConditionUpdate(
        reasons.DRIFTED,
        ConditionStatus.UNKNOWN,
        reason,
        f"drift run {check}: {said}; this is not a pass: whether stable revision {stable} "
        "drifted is unknown until a run passes or fails",
    )


@dataclass(frozen=True)
class Judged:
    """What the latest finished run says, as the watch reads it."""

    status: DriftStatus
    condition: ConditionUpdate | None
    notices: tuple[Notice, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    rollback_to: str | None = None
    refused: str | None = None
    """Why a drift was not rolled back (onDrift.action rollback)."""
    stopped: bool = False
    """The run outlived its deadline: it is deleted and counts as an Error."""


def judge_run(
    inp: DriftInput,
    stable: str,
    *,
    seen: Seen,
    latest: ObservedCheck,
    status: DriftStatus,
    condition: ConditionUpdate | None,
) -> Judged | DriftPlan:
    """The latest run's verdict; a plan to wait when it still runs."""
    outcome, unbound = bound_drift_verdict(latest, stable)
    deadline = (latest.created or inp.now) + timedelta(seconds=inp.check_deadline_seconds)
    stopped = outcome is VerdictOutcome.PENDING and inp.now >= deadline + GRACE
    summary = latest.summary or f"phase {_phase(latest)}"
    if stopped:
        outcome, unbound = VerdictOutcome.ERROR, None
        summary = (
            f"no verdict within its deadlineSeconds ({inp.check_deadline_seconds}s); the run "
            "was stopped"
        )
    if outcome is VerdictOutcome.PENDING:
        return DriftPlan(
            status=status.model_copy(
                update={"running": True, "message": f"run {latest.name} is {_phase(latest)}"}
            ),
            condition=condition
            or ConditionUpdate(
                reasons.DRIFTED,
                ConditionStatus.UNKNOWN,
                reasons.DRIFT_CHECK_PENDING,
                f"drift run {latest.name} of stable revision {stable} is under way",
            ),
            wake_in=seconds_until(deadline + GRACE, inp.now),
        )
    previous = seen.previous
    first_seen = previous is None or (
        previous.last_verdict_check != latest.name or previous.last_verdict is not outcome
    )  # a run's verdict, once counted, is never counted again (nor an older run's: above)
    update = verdict_condition(
        outcome, check=latest.name, stable=stable, summary=summary, unbound=unbound,
        prior=seen.prior,
    )  # fmt: skip
    ended = latest.completion_time or (
        inp.now if first_seen or status.last_verdict_time is None else status.last_verdict_time
    )
    judged = Judged(
        status.model_copy(
            update={
                "last_verdict": outcome,
                "last_verdict_check": latest.name,
                "last_verdict_time": ended,
                "running": None,
            }
        ),
        update,
        stopped=stopped,
    )
    action = inp.on_drift.action
    if first_seen:
        judged = replace(
            judged,
            notices=tuple(_verdict_notices(action, outcome, update, seen.prior)),
            outcomes=(Outcome("drift", outcome.value),),
        )
    if outcome is VerdictOutcome.FAILED and action is DriftAction.ROLLBACK:
        target, why = _rollback(inp, stable)
        judged = replace(judged, rollback_to=target, refused=why)
        if why is not None and first_seen:
            refusal = Notice(True, reasons.DRIFT_ROLLBACK_REFUSED, why)
            judged = replace(judged, notices=(*judged.notices, refusal))
    return judged


def _phase(check: ObservedCheck) -> str:
    return check.phase.value if check.phase is not None else CheckPhase.PENDING.value


def _verdict_notices(
    action: DriftAction,
    outcome: VerdictOutcome,
    condition: ConditionUpdate,
    prior: Condition | None,
) -> list[Notice]:
    """The Events of a verdict seen for the first time (none with onDrift.action none)."""
    if action is DriftAction.NONE:
        return []
    if outcome is VerdictOutcome.PASSED:
        if prior is not None and prior.status is ConditionStatus.TRUE:
            return [Notice(False, condition.reason, condition.message)]
        return []
    return [Notice(True, condition.reason, condition.message)]


def _rollback(inp: DriftInput, stable: str) -> tuple[str | None, str | None]:
    """(revision to roll back to now, why not)."""
    target = inp.on_drift.rollback_to
    if target is None:
        return None, None
    if target == stable:
        return None, (
            f"drifted, not rolled back: onDrift.rollbackTo {target} is the drifted stable "
            "revision itself"
        )
    if target not in inp.retained:
        retained = ", ".join(sorted(inp.retained)) or "none"
        return None, (
            f"drifted, not rolled back: onDrift.rollbackTo {target} is not a retained, once "
            f"promoted revision (retained: {retained}); set it to one of those"
        )
    if inp.canary is not None:
        return None, (
            f"drifted: the rollback to {target} waits for canary {inp.canary} to finish (if "
            "it is promoted, the drifted revision is replaced anyway)"
        )
    return target, None
