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
- Only the run the operator made is judged: the one status.drift records by name, uid
  and spec digest (`made_by_watch`); a check that copies a run's name, labels and owner
  reference is ignored, listed in status.drift.ignored and announced once.
- The verdict counts only when it is bound to the run (its spec as the operator made it,
  judged at its generation, on the stable revision against the stable's record): Passed ->
  Drifted False; Failed -> Drifted True, a Warning Event and, with onDrift.action
  rollback, a rollback to onDrift.rollbackTo if that revision is retained; Inconclusive
  and Error are not a pass: Drifted becomes Unknown (or stays True after a drift was
  seen) and status says why.

`decide_drift` (here) reads the runs and hands over to `plan.drift.verdict` (the latest
run's verdict) and `plan.drift.schedule` (the next run); `plan.drift.state` holds the
records they share. Nothing is remembered but `status.drift` (which only the operator may
write): it says which run is the watch's, the run says what it found, so a restarted
operator decides the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from infergate.api.drift import DriftStatus
from infergate.api.enums import ConditionStatus
from infergate.plan import reasons
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.drift.restart import observe_restarts, with_restarts
from infergate.plan.drift.schedule import schedule_run
from infergate.plan.drift.state import (
    GRACE,
    DriftInput,
    DriftPlan,
    Seen,
    run_number,
    seconds_until,
)
from infergate.plan.drift.verdict import Judged, judge_run
from infergate.plan.notices import Notice

_IGNORED_SHOWN = 16
"""Look-alike runs status.drift.ignored names at most (the newest)."""

# Drifted reasons that a run's verdict gave: they stand until the next verdict.
_VERDICT_REASONS = frozenset(
    {
        reasons.DRIFT_DETECTED,
        reasons.NO_DRIFT_DETECTED,
        reasons.DRIFT_CHECK_INCONCLUSIVE,
        reasons.DRIFT_CHECK_ERROR,
        reasons.DRIFT_CHECK_NOT_BOUND,
        # Stands until the run that re-checks the restarted group gives its verdict.
        reasons.GROUP_RESTARTED,
    }
)


def decide_drift(inp: DriftInput) -> DriftPlan:
    """What the drift watch does now (see the module docstring); a restart inside the stable
    revision's groups calls a run ahead of the schedule (`plan.drift.restart`)."""
    restarts = None
    if inp.watch is not None and inp.stable is not None:
        restarts = observe_restarts(inp.previous, inp.stable, inp.groups, inp.group_replicas)
    plan = _decide(inp, restarts.restarted if restarts is not None else ())
    if restarts is None or inp.stable is None:
        return plan
    return with_restarts(plan, inp.stable, restarts)


def _decide(inp: DriftInput, restarted: Sequence[str]) -> DriftPlan:
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
    ignored = _look_alikes(inp, stable, seen)
    status = DriftStatus(
        revision=stable,
        # The run the watch asked for, never a look-alike's higher number: a run named
        # after it would otherwise hide the real one (taken as never made, never judged).
        run=seen.asked or None,
        check=latest.name if latest else (previous.check if previous else None),
        check_uid=previous.check_uid if previous else None,
        spec_digest=previous.spec_digest if previous else None,
        ignored=[c.name for c in ignored],
        last_run=seen.last_run,
        last_verdict=previous.last_verdict if previous else None,
        last_verdict_check=previous.last_verdict_check if previous else None,
        last_verdict_time=previous.last_verdict_time if previous else None,
    )
    noted = tuple(_ignored_notice(c, stable, previous) for c in ignored
                  if previous is None or c.name not in previous.ignored)  # fmt: skip
    prior = seen.prior
    condition = (
        ConditionUpdate(prior.type, prior.status, prior.reason, prior.message) if prior else None
    )
    delete = _garbage(inp, mine, latest.name if latest else None)
    judged = Judged(status, condition)
    if seen.unseen and previous is not None:
        # The run asked for last is not in sight yet: wait for it, or once the grace is
        # over take it as never made (and make it again).
        started = previous.last_run or inp.now
        if inp.now < started + GRACE:
            kept = inp.previous_condition
            return DriftPlan(
                status=previous.model_copy(update={"ignored": status.ignored}),
                condition=ConditionUpdate(kept.type, kept.status, kept.reason, kept.message)
                if kept is not None
                else ConditionUpdate(
                    reasons.DRIFTED,
                    ConditionStatus.UNKNOWN,
                    reasons.DRIFT_CHECK_PENDING,
                    f"drift run {previous.check} of stable revision {stable} is under way",
                ),
                delete=tuple(delete),
                wake_in=seconds_until(started + GRACE, inp.now),
                notices=noted,
            )
        latest = None
        seen = Seen(None, seen.run, None, previous, prior, asked=seen.asked)
        judged = Judged(status.model_copy(update={"running": None}), condition)
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
        found = judge_run(inp, stable, seen=seen, latest=latest, status=status, condition=condition)
        if isinstance(found, DriftPlan):
            return replace(found, delete=(*delete, *found.delete), notices=noted)
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
                notices=(*noted, *judged.notices),
                outcomes=judged.outcomes,
            )
    plan = schedule_run(
        inp, watch=watch, stable=stable, seen=seen, status=judged.status,
        condition=judged.condition, restarted=restarted,
    )  # fmt: skip
    if judged.refused is not None and plan.status is not None:
        # Why a drift was not rolled back stays in sight until the next run.
        plan = replace(plan, status=plan.status.model_copy(update={"message": judged.refused}))
    return replace(
        plan, delete=tuple(delete), notices=(*noted, *judged.notices), outcomes=judged.outcomes
    )


def _seen(inp: DriftInput, stable: str, mine: Sequence[ObservedCheck]) -> Seen:
    previous = inp.previous if inp.previous and inp.previous.revision == stable else None
    prior = inp.previous_condition if previous is not None else None
    if prior is not None and prior.reason not in _VERDICT_REASONS:
        prior = None  # what the watch was waiting for is decided afresh
    runs = [c for c in mine if c.spec_candidate == stable and run_number(c.name) is not None]
    # Only the run the operator made and recorded can be judged: name, uid and spec.
    latest = next((c for c in runs if made_by_watch(c, previous)), None)
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
    return Seen(
        latest,
        max([asked, *named]),
        max(starts, default=None),
        previous,
        prior,
        unseen=previous is not None and previous.running is True and asked > newest,
        asked=asked,
    )


def made_by_watch(check: ObservedCheck, recorded: DriftStatus | None) -> bool:
    """Whether `check` is the run the watch made and recorded in status.drift: the same
    name, the uid the create returned, and the spec it was made with. Labels, names and
    owner references can be copied; these not. (Whether its verdict is bound to that spec
    is `verdict.bound_drift_verdict`'s question.)"""
    return (
        recorded is not None
        and recorded.check == check.name
        and recorded.check_uid is not None
        and recorded.check_uid == check.uid
        and recorded.spec_digest is not None
        and recorded.spec_digest == check.digest
    )


def _look_alikes(inp: DriftInput, stable: str, seen: Seen) -> list[ObservedCheck]:
    """Checks named and labelled like a run of `stable`, not older than the run the watch
    recorded, that it did not make: their verdicts never count, and status names them."""
    previous = seen.previous
    recorded = (previous.run or 0) if previous is not None else 0
    # Without a run of this revision recorded, runs from before it last became stable are
    # the watch's own old ones, not look-alikes.
    since = inp.stable_since if previous is None else None
    prefix = f"{inp.deployment}-{stable}-drift"
    found = [
        c
        for c in inp.checks
        if c.drift
        and c.name.startswith(prefix)
        and (run_number(c.name) or 0) >= recorded
        and (since is None or c.created is None or c.created >= since)
        and c is not seen.latest
        and not made_by_watch(c, previous)
    ]
    return sorted(found, key=lambda c: run_number(c.name) or 0)[-_IGNORED_SHOWN:]


def _ignored_notice(check: ObservedCheck, stable: str, recorded: DriftStatus | None) -> Notice:
    if recorded is not None and recorded.check == check.name and recorded.check_uid is not None:
        why = (
            f"it is not the object the operator created under that name (uid {check.uid}, "
            f"recorded {recorded.check_uid}) or its spec is not the one it was made with"
        )
    else:
        why = "the operator did not create it (status.drift does not record it)"
    return Notice(
        True,
        reasons.DRIFT_CHECK_NOT_BOUND,
        f"ParityCheck {check.name} looks like a drift run of stable revision {stable}, but "
        f"{why}: its verdict is ignored and moves neither the rollout nor Drifted",
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
