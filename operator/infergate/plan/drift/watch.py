"""The drift watch of the stable revision: when to run, and what a run's verdict means (pure).

`rollout.parity.watch` re-runs the suite on the stable revision's live pods and compares
it with the stable's own golden record (`baseline: {golden: {revision: <stable>}}`): a
revision whose spec did not change can still drift under a driver, firmware or library
update. One run is a ParityCheck `<deployment>-<stable>-drift<N>`, labelled
`infergate.io/check-purpose: drift`; it never promotes or rolls back a canary.

    decide_drift(DriftInput) -> DriftPlan

- One run at a time per deployment, none while a canary is rolled out, none without a
  golden record of the stable revision (a run against nothing could only end in Error).
- A run is due one period after the last run started (before the first: after the
  revision became stable). A run that outlasts the period delays the next; missed slots
  are skipped, never queued. A run has a deadline: its check's deadlineSeconds (the check
  ends itself in Error), and a minute on top after which the watch gives up on it.
- The verdict counts only when it is bound to the run (its spec as the operator made it,
  judged at its generation, on the stable revision against the stable's record): Passed ->
  Drifted False; Failed -> Drifted True, a Warning Event and, with onDrift.action
  rollback, a rollback to onDrift.rollbackTo if that revision is retained; Inconclusive
  and Error are not a pass: Drifted becomes Unknown (or stays True after a drift was
  seen) and status says why.

Nothing is remembered but `status.drift`; the runs themselves are the truth, so a
restarted operator decides the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from infergate.api.common import Condition
from infergate.api.drift import DriftAction, DriftStatus, DriftWatch, OnDrift
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.golden.keys import EntryName, Role
from infergate.plan import reasons
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.notices import Notice, Outcome

GRACE = timedelta(seconds=60)
"""Past a run's deadline, the time its check has to land its own Error; and how long a run
the status names may take to show in the watch before it counts as never made."""
SELF_SCORED_MATCH = 1.0
"""A revision's record made as a candidate is a usable baseline only if its outputs matched
its baseline's on every prompt (tokenMatchRate 1): else it was scored along the other side's
sequence."""
_RUN = re.compile(r"-drift(\d+)$")
# Drifted reasons that a run's verdict gave: they stand until the next verdict.
_VERDICT_REASONS = frozenset(
    {
        reasons.DRIFT_DETECTED,
        reasons.NO_DRIFT_DETECTED,
        reasons.DRIFT_CHECK_INCONCLUSIVE,
        reasons.DRIFT_CHECK_ERROR,
        reasons.DRIFT_CHECK_NOT_BOUND,
    }
)


@dataclass(frozen=True)
class DriftInput:
    """Everything the drift watch decides from, as plain data."""

    deployment: str
    owner_uid: str
    watch: DriftWatch | None
    on_drift: OnDrift
    check_deadline_seconds: int
    """The drift run's ParityCheck deadlineSeconds (the rollout template's)."""
    stable: str | None
    stable_since: datetime | None
    """When the stable revision became stable (its record's promotedAt)."""
    canary: str | None
    """A canary being rolled out (the watch pauses meanwhile)."""
    golden_store: bool
    """The operator keeps golden records (--golden-config)."""
    checks: Sequence[ObservedCheck]
    """Every ParityCheck of the deployment, drift runs and canary checks alike."""
    previous: DriftStatus | None
    previous_condition: Condition | None
    """The Drifted condition as status has it."""
    retained: Sequence[str]
    """Revisions a rollback may go to: in the history, once promoted, their spec known."""
    history_limit: int
    """How many finished drift runs are kept (revisionHistoryLimit)."""
    now: datetime


@dataclass(frozen=True)
class DriftPlan:
    """What the drift watch does in this reconcile."""

    status: DriftStatus | None
    """status.drift; None when no watch is set."""
    condition: ConditionUpdate | None
    """The Drifted condition; None: the condition goes (no watch)."""
    create_run: int | None = None
    """Start run N of the stable revision now."""
    delete: tuple[str, ...] = ()
    """Drift runs to delete: superseded, overdue, or beyond the history limit."""
    wake_in: float | None = None
    """Seconds until the watch must look again (the next run, or a run's deadline)."""
    rollback_to: str | None = None
    """Roll back to this revision now (onDrift.action rollback after a drift)."""
    notices: tuple[Notice, ...] = ()
    outcomes: tuple[Outcome, ...] = ()


def run_number(name: str) -> int | None:
    """N of a drift run's name `<deployment>-<revision>-drift<N>`; None for other names."""
    found = _RUN.search(name)
    return int(found.group(1)) if found else None


def next_run(watch: DriftWatch, anchor: datetime) -> datetime:
    """When the run after `anchor` (the last run's start, or when the revision became stable)
    is due."""
    cron = watch.cron()
    if cron is not None:
        return cron.next_after(anchor)
    assert watch.interval_seconds is not None  # noqa: S101 - exactly one of the two is set
    return anchor + timedelta(seconds=watch.interval_seconds)


def golden_record_known(checks: Sequence[ObservedCheck], owner_uid: str, revision: str) -> bool:
    """Whether a Passed check of the deployment's stored a record of `revision` that can be a
    baseline: its baseline's record, or its candidate's when the outputs matched throughout."""
    for check in checks:
        if check.owner_uid != owner_uid or check.drift or check.phase is not CheckPhase.PASSED:
            continue
        for entry in check.golden_entries:
            name = EntryName.parse(entry.rsplit("/", 1)[-1])
            if name is None or name.revision != revision:
                continue
            if name.role is Role.BASELINE:
                return True
            if check.metrics.get("tokenMatchRate") == SELF_SCORED_MATCH:
                return True
    return False


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
class _Seen:
    """The watch's view of the stable revision's runs."""

    latest: ObservedCheck | None
    """The newest run the watch sees."""
    run: int
    """The highest run number used (seen, or asked for in status)."""
    last_run: datetime | None
    previous: DriftStatus | None
    prior: Condition | None
    unseen: bool = False
    """Status names a newer run than any seen: just asked for (the watch lags), or never made."""


def _seen(inp: DriftInput, stable: str, mine: Sequence[ObservedCheck]) -> _Seen:
    previous = inp.previous if inp.previous and inp.previous.revision == stable else None
    prior = inp.previous_condition if previous is not None else None
    if prior is not None and prior.reason not in _VERDICT_REASONS:
        prior = None  # what the watch was waiting for is decided afresh
    runs = [c for c in mine if c.spec_candidate == stable and run_number(c.name) is not None]
    latest = max(runs, key=lambda c: run_number(c.name) or 0, default=None)
    # Every run name of this revision counts, whoever made it: the next name is free.
    named = [
        run_number(c.name) or 0
        for c in inp.checks
        if c.name.startswith(f"{inp.deployment}-{stable}-drift")
    ]
    asked = (previous.run or 0) if previous is not None else 0
    newest = run_number(latest.name) or 0 if latest is not None else 0
    starts = [
        t
        for t in (
            latest.created if latest is not None else None,
            previous.last_run if previous is not None else None,
        )
        if t is not None
    ]
    return _Seen(
        latest,
        max([asked, *named]),
        max(starts, default=None),
        previous,
        prior,
        unseen=previous is not None and previous.running is True and asked > newest,
    )


def _garbage(inp: DriftInput, mine: Sequence[ObservedCheck], keep: str | None) -> list[str]:
    """Runs to delete: unfinished ones the watch no longer follows (another revision, or no
    watch), and finished ones beyond the newest `history_limit`."""
    gone = [
        c.name
        for c in mine
        if not c.terminal
        and (inp.watch is None or c.spec_candidate != inp.stable)
        and c.name != keep
    ]
    finished = sorted(
        (c for c in mine if c.terminal and c.name != keep),
        key=lambda c: (c.created or inp.now, run_number(c.name) or 0),
        reverse=True,
    )
    kept = inp.history_limit - (1 if keep is not None else 0)
    return gone + [c.name for c in finished[max(kept, 0) :]]


def _phase(check: ObservedCheck) -> str:
    return check.phase.value if check.phase is not None else CheckPhase.PENDING.value


def _seconds(until: datetime, now: datetime) -> float:
    return max(0.0, (until - now).total_seconds())


def decide_drift(inp: DriftInput) -> DriftPlan:
    """What the drift watch does now (see the module docstring)."""
    mine = [c for c in inp.checks if c.drift and c.owner_uid == inp.owner_uid]
    watch, stable = inp.watch, inp.stable
    if watch is None:
        return DriftPlan(status=None, condition=None, delete=tuple(_garbage(inp, mine, None)))
    if stable is None:
        return DriftPlan(
            status=DriftStatus(message="no stable revision yet: nothing to watch"),
            condition=ConditionUpdate(
                reasons.DRIFTED,
                ConditionStatus.UNKNOWN,
                reasons.NO_STABLE_REVISION,
                "no revision is stable yet: the drift watch starts once one is",
            ),
            delete=tuple(_garbage(inp, mine, None)),
        )
    seen = _seen(inp, stable, mine)
    latest = seen.latest
    previous = seen.previous
    status = DriftStatus(
        revision=stable,
        run=seen.run or None,
        check=latest.name if latest else (previous.check if previous else None),
        last_run=seen.last_run,
        last_verdict=previous.last_verdict if previous else None,
        last_verdict_check=previous.last_verdict_check if previous else None,
        last_verdict_time=previous.last_verdict_time if previous else None,
    )
    prior = seen.prior
    condition = (
        ConditionUpdate(prior.type, prior.status, prior.reason, prior.message) if prior else None
    )
    delete = _garbage(inp, mine, latest.name if latest else None)
    judged = _Judged(status, condition)
    if seen.unseen and previous is not None:
        # The run asked for last is not in sight yet: wait for it, or once the grace is
        # over take it as never made (and make it again).
        started = previous.last_run or inp.now
        if inp.now < started + GRACE:
            kept = inp.previous_condition
            return DriftPlan(
                status=previous,
                condition=ConditionUpdate(kept.type, kept.status, kept.reason, kept.message)
                if kept is not None
                else ConditionUpdate(
                    reasons.DRIFTED,
                    ConditionStatus.UNKNOWN,
                    reasons.DRIFT_CHECK_PENDING,
                    f"drift run {previous.check} of stable revision {stable} is under way",
                ),
                delete=tuple(delete),
                wake_in=_seconds(started + GRACE, inp.now),
            )
        latest = None
        seen = _Seen(None, seen.run, None, previous, prior)
        judged = _Judged(status.model_copy(update={"running": None}), condition)
    judged_run = run_number(previous.last_verdict_check or "") if previous else None
    if (
        latest is not None
        and judged_run is not None
        and (run_number(latest.name) or 0) < judged_run
    ):
        # A newer run was judged and is gone (stopped at its deadline): this one was judged
        # before it, and says nothing new.
        latest = None
    if latest is not None:
        found = _judge(inp, stable, seen=seen, latest=latest, status=status, condition=condition)
        if isinstance(found, DriftPlan):
            return replace(found, delete=(*delete, *found.delete))
        judged = found
        if judged.stopped:
            delete.append(latest.name)
        if judged.rollback_to is not None:
            return DriftPlan(
                status=judged.status.model_copy(
                    update={"message": f"drifted: rolled back to revision {judged.rollback_to}"}
                ),
                condition=judged.condition,
                delete=tuple(delete),
                rollback_to=judged.rollback_to,
                notices=judged.notices,
                outcomes=judged.outcomes,
            )
    plan = _schedule(
        inp, watch=watch, stable=stable, seen=seen, status=judged.status,
        condition=judged.condition,
    )  # fmt: skip
    if judged.refused is not None and plan.status is not None:
        # Why a drift was not rolled back stays in sight until the next run.
        plan = replace(plan, status=plan.status.model_copy(update={"message": judged.refused}))
    return replace(plan, delete=tuple(delete), notices=judged.notices, outcomes=judged.outcomes)


@dataclass(frozen=True)
class _Judged:
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


def _judge(
    inp: DriftInput,
    stable: str,
    *,
    seen: _Seen,
    latest: ObservedCheck,
    status: DriftStatus,
    condition: ConditionUpdate | None,
) -> _Judged | DriftPlan:
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
            wake_in=_seconds(deadline + GRACE, inp.now),
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
    judged = _Judged(
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


def _schedule(
    inp: DriftInput,
    *,
    watch: DriftWatch,
    stable: str,
    seen: _Seen,
    status: DriftStatus,
    condition: ConditionUpdate | None,
) -> DriftPlan:
    """No run in flight: start one if due and possible, else say when or why not."""

    def waiting(reason: str, message: str) -> DriftPlan:
        shown = condition or ConditionUpdate(
            reasons.DRIFTED, ConditionStatus.UNKNOWN, reason, message
        )
        return DriftPlan(
            status=status.model_copy(update={"next_run": None, "message": message}),
            condition=shown,
        )

    if inp.canary is not None:
        return waiting(
            reasons.DRIFT_WATCH_PAUSED,
            f"paused while canary {inp.canary} is rolled out: the stable revision may change",
        )
    if not inp.golden_store:
        return waiting(
            reasons.GOLDEN_STORE_NOT_CONFIGURED,
            "the operator keeps no golden records (its --golden-config is unset), so there is "
            f"no record of stable revision {stable} to compare it with",
        )
    if not golden_record_known(inp.checks, inp.owner_uid, stable):
        return waiting(
            reasons.NO_GOLDEN_RECORD,
            f"no golden record of stable revision {stable} is known: a record is stored by a "
            "Passed check that compared it (as baseline, or as a candidate whose outputs "
            "matched on every prompt); the watch starts once one exists",
        )
    anchor = seen.last_run or inp.stable_since or inp.now
    due = next_run(watch, anchor)
    if due > inp.now:
        shown = condition or ConditionUpdate(
            reasons.DRIFTED,
            ConditionStatus.UNKNOWN,
            reasons.DRIFT_WATCH_WAITING,
            f"the first drift run of stable revision {stable} starts at {due.isoformat()}",
        )
        return DriftPlan(
            status=status.model_copy(
                update={"next_run": due, "message": f"next run at {due.isoformat()}"}
            ),
            condition=shown,
            wake_in=_seconds(due, inp.now),
        )
    run = seen.run + 1
    name = f"{inp.deployment}-{stable}-drift{run}"
    shown = condition or ConditionUpdate(
        reasons.DRIFTED,
        ConditionStatus.UNKNOWN,
        reasons.DRIFT_CHECK_PENDING,
        f"drift run {name} of stable revision {stable} is under way",
    )
    return DriftPlan(
        status=status.model_copy(
            update={
                "run": run,
                "check": name,
                "last_run": inp.now,
                "running": True,
                "next_run": None,
                "message": f"run {name} started",
            }
        ),
        condition=shown,
        create_run=run,
        wake_in=GRACE.total_seconds(),
    )


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
