"""Rollout steps that move revisions forward: pick the canary, start the first revision,
wait for the canary to become available (pure).

Waiting has one rule, for the first revision and for a canary alike (`waiting`): until
the progress deadline, a revision that is starting or waiting for accelerators is
progress (Progressing=True, reason CanaryStarted/RevisionCreated or Unschedulable, the
scheduler's message quoted); past it, it has failed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from infergate.api.enums import ConditionStatus
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.desired import revision_json
from infergate.plan.deployment.judge import fail_or_wait, judge
from infergate.plan.deployment.revision_diff import revision_changes, summary
from infergate.plan.deployment.state import Context, Rollout, clock
from infergate.plan.deployment.traffic import advance_steps, step_failed, stepping


def choose_canary(ctx: Context, rollout: Rollout) -> Rollout:
    """The desired revision is the canary when there is a stable one and it differs."""
    # A rejected revision may be tried again once the spec has moved on from it.
    records = {
        h: r.model_copy(update={"rejected": False}) if r.rejected and h != ctx.desired else r
        for h, r in rollout.records.items()
    }
    rollout = replace(rollout, records=records)
    if rollout.stable is None or ctx.desired == rollout.stable:
        return rollout.with_record(ctx, ctx.desired)
    record = rollout.record(ctx, ctx.desired)
    if record.rejected:
        return rollout.with_record(ctx, ctx.desired)
    if ctx.state.status.canary_revision != ctx.desired:
        # A new attempt (first, or again after the spec came back to it): a fresh record.
        rollout = rollout.with_record(
            ctx,
            ctx.desired,
            created_at=ctx.now,
            verdict=None,
            metrics=None,
            parity_check=None,
            parity_check_uid=None,
            parity_check_digest=None,  # an earlier attempt's check is never this one's
            message=None,
            promoted_at=None,
        )
    return replace(rollout, canary=ctx.desired)


@dataclass(frozen=True)
class Waiting:
    """Where a revision that is not available yet stands."""

    progress: ConditionUpdate
    deadline_passed: bool
    unschedulable: str | None
    due: datetime | None = None
    """When the deadline passes (None once it has)."""


def waiting(
    ctx: Context,
    revision: str,
    started: datetime,
    *,
    what: str,
    deadline_message: str,
    detail: str = "",
) -> Waiting:
    """The one rule for a revision that is not available yet: the deadline first, then
    whether the scheduler cannot place it, else it is starting."""
    unschedulable = ctx.unschedulable(revision)
    seconds = ctx.spec.rollout.progress_deadline_seconds
    if ctx.now - started > ctx.progress_deadline:
        message = (
            f"{what} not available within progressDeadlineSeconds ({seconds}s): "
            f"{ctx.availability(revision)}" + (f"; {unschedulable}" if unschedulable else "")
        )
        return Waiting(
            ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.FALSE,
                reasons.PROGRESS_DEADLINE_EXCEEDED,
                message + deadline_message,
            ),
            True,
            unschedulable,
        )
    # The deadline is passed once more than progressDeadlineSeconds went by (to the second).
    due = started + ctx.progress_deadline + timedelta(seconds=1)
    if unschedulable is not None:
        return Waiting(
            ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.UNSCHEDULABLE,
                f"{what} waits for capacity: {unschedulable}; it fails if still unscheduled "
                f"at {clock(due)} (progressDeadlineSeconds {seconds})",
            ),
            False,
            unschedulable,
            due,
        )
    started_reason = (
        reasons.CANARY_STARTED if what.startswith("canary") else reasons.REVISION_CREATED
    )
    return Waiting(
        ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            started_reason,
            f"{what} starting: {ctx.availability(revision)}{detail}",
        ),
        False,
        None,
        due,
    )


def advance_initial(ctx: Context, rollout: Rollout) -> Rollout:
    """No stable yet: the desired revision becomes stable once it is rolled out."""
    if rollout.stable is not None:
        return rollout
    revision = ctx.desired
    rollout = replace(
        rollout,
        parity=ConditionUpdate(
            reasons.PARITY_PASSED,
            ConditionStatus.UNKNOWN,
            reasons.NO_PARITY_CHECK,
            "first revision: there is no stable revision to compare with",
        ),
    )
    if ctx.ready(revision, ctx.spec.replicas):
        rollout = rollout.with_record(ctx, revision, promoted_at=ctx.now)
        return replace(rollout, stable=revision)
    record = rollout.record(ctx, revision)
    wait = waiting(
        ctx,
        revision,
        record.created_at or ctx.now,
        what=f"first revision {revision}",
        deadline_message="; fix the spec or the cluster's capacity",
    )
    return replace(rollout, progress=wait.progress, unschedulable=wait.unschedulable).due_at(
        wait.due
    )


def _changes(ctx: Context, stable: str | None) -> str:
    """What the canary changes against the stable revision, for the Progressing message."""
    stable_spec = ctx.revision_spec(stable) if stable is not None else None
    if stable_spec is None:
        return ""
    changes = revision_changes(revision_json(stable_spec), revision_json(ctx.spec))
    return f"; next to stable {stable}, it changes {summary(changes)}"


def advance_canary(ctx: Context, rollout: Rollout) -> Rollout:
    """The canary: wait for it to become available, then have it judged."""
    canary = rollout.canary
    if canary is None:
        return rollout
    state = stepping(ctx, canary)
    if state is not None:
        # Its check passed and it serves a share of requests: it must stay available.
        if not ctx.ready(canary, ctx.spec.rollout.canary_replicas):
            why = f"the canary is not available ({ctx.availability(canary)})"
            return step_failed(ctx, rollout, canary, state, why)
        return advance_steps(ctx, rollout, canary, state)
    record = rollout.record(ctx, canary)
    if not ctx.ready(canary, ctx.spec.rollout.canary_replicas):
        wait = waiting(
            ctx,
            canary,
            record.created_at or ctx.now,
            what=f"canary {canary}",
            deadline_message="",
            detail=_changes(ctx, rollout.stable),
        )
        rollout = replace(
            rollout,
            unschedulable=wait.unschedulable,
            parity=ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.PARITY_CHECK_PENDING,
                f"canary {canary} is checked once it is available",
            ),
        )
        if wait.deadline_passed:
            return fail_or_wait(
                ctx, rollout, canary, reasons.ROLLBACK_DEADLINE, wait.progress.message
            )
        return replace(rollout, progress=wait.progress).due_at(wait.due)
    if ctx.spec.rollout.parity is None:
        return replace(
            rollout,
            parity=ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.NO_PARITY_CHECK,
                "spec.rollout.parity is unset: no check is made",
            ),
            progress=ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.AWAITING_PROMOTION,
                f"canary {canary} is available; no parity check is set, so it waits for a "
                "person: infergate promote or infergate abort",
            ),
        )
    return judge(ctx, rollout, canary)
