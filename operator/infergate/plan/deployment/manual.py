"""Rollout steps for what a person asked by annotation: roll back to, abort, promote (pure).

Each step takes the rollout so far and returns the next; a request that cannot be
honoured leaves it as it was and says why in a warning Event. What is honoured is
audited: who asked (`infergate.io/requested-by`, stamped by the API server's admission
policy from the authenticated user), against which verdict, in the revision's record
(with the time), the Progressing condition and an Event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from infergate.api.enums import VerdictOutcome
from infergate.plan import reasons
from infergate.plan.deployment.promotion import abort_promotion, abortable
from infergate.plan.deployment.state import Context, Rollout


def _by(ctx: Context) -> str:
    """Who asked, as the API server authenticated them."""
    user = ctx.state.manual.requested_by
    return (
        f"by {user}"
        if user
        else "by hand (no requester stamped: is manifests/admission installed?)"
    )


def _not_this_canary(
    rollout: Rollout, action: str, asked: str, applies: Callable[[str], bool]
) -> Rollout | None:
    """The refusal of a request when there is no canary or it names another revision
    (`applies`: ManualRequests.promotes or .aborts); None when it applies."""
    canary = rollout.canary
    if canary is None:
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED, f"{action}: there is no canary", warning=True
        )
    if not applies(canary):
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"{action}: asked for revision {asked}, but the canary is {canary}",
            warning=True,
        )
    return None


def retained_revisions(ctx: Context, rollout: Rollout) -> list[str]:
    """Revisions a rollback may go to: once promoted, not stable, their spec still known."""
    return sorted(
        r.hash
        for r in rollout.records.values()
        if r.promoted_at is not None and r.hash != rollout.stable
        if ctx.revision_spec(r.hash) is not None
    )


def manual_rollback(ctx: Context, rollout: Rollout) -> Rollout:
    """`infergate.io/rollback-to: <hash>`: a retained, once-promoted revision becomes stable."""
    target = ctx.state.manual.rollback_to
    if target is None:
        return rollout
    if target == rollout.stable:
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"rollback-to {target}: it is already the stable revision",
            warning=True,
        )
    retained = retained_revisions(ctx, rollout)
    if target not in retained:
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"rollback-to {target}: not a retained revision; retained: "
            f"{', '.join(retained) or 'none'}",
            warning=True,
        )
    previous = rollout.stable
    rollout = roll_back(ctx, rollout, target, reason=reasons.ROLLBACK_BY_HAND, why=_by(ctx))
    return rollout.noting(
        reasons.MANUAL_ACTION, f"rolled back {_by(ctx)} from {previous} to {target}"
    )


def roll_back(ctx: Context, rollout: Rollout, target: str, *, reason: str, why: str) -> Rollout:
    """`target` (a retained, once-promoted revision) becomes stable: a canary is rejected, and
    the desired revision too unless it is the target (not retried until the spec changes).
    `why` completes "rolled back ...", e.g. "by alice"."""
    previous = rollout.stable
    if rollout.canary is not None:
        rollout = rollout.reject(
            ctx, rollout.canary, reason, f"rolled back {why} to {target}", count=False
        )
    rollout = rollout.promote(
        ctx, target, reason, f"rolled back {why} from {previous}", count=False
    )
    rollout = rollout.counting("rollback", reason)
    if ctx.desired != target:
        rollout = rollout.with_record(
            ctx, ctx.desired, rejected=True, message=f"rolled back {why} to revision {target}"
        )
    return rollout


def manual_abort(ctx: Context, rollout: Rollout) -> Rollout:
    """`infergate.io/abort: "true"`: the canary is rolled back; so is a promotion while its
    revision still scales up (`plan.deployment.promotion`), and the stable before it stays,
    untouched. Once traffic moves to the promoted revision, an abort is refused: a rollback
    to the previous revision goes back."""
    manual = ctx.state.manual
    if manual.abort is None:
        return rollout
    canary = rollout.canary
    if canary is None:
        promoting = ctx.state.status.promotion
        if promoting is not None and promoting.revision == rollout.stable:
            return _abort_promotion(ctx, rollout, promoting.revision, promoting.previous)
    refused = _not_this_canary(rollout, "abort", str(manual.abort), manual.aborts)
    if refused is not None or canary is None:
        return refused or rollout
    verdict = rollout.record(ctx, canary).verdict
    said = f"aborted {_by(ctx)}; parity verdict {verdict.value if verdict else 'none'}"
    rollout = rollout.reject(ctx, canary, reasons.ROLLBACK_ABORTED, said)
    return rollout.noting(reasons.MANUAL_ACTION, f"canary {canary} {said}")


def _abort_promotion(ctx: Context, rollout: Rollout, revision: str, previous: str) -> Rollout:
    manual = ctx.state.manual
    if not manual.aborts(revision):
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"abort: asked for revision {manual.abort}, but the revision being promoted is "
            f"{revision}",
            warning=True,
        )
    if abortable(ctx, rollout) is None:
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"abort: revision {revision} is promoted and traffic is moving to it; roll back "
            f"to revision {previous} instead (infergate.io/rollback-to), which keeps its pods "
            "until scaleDownDelaySeconds after the move",
            warning=True,
        )
    verdict = rollout.record(ctx, revision).verdict
    said = (
        f"promotion aborted {_by(ctx)} before traffic moved; parity verdict "
        f"{verdict.value if verdict else 'none'}"
    )
    rollout = abort_promotion(ctx, rollout, reasons.ROLLBACK_ABORTED, said)
    return rollout.noting(
        reasons.MANUAL_ACTION, f"revision {revision} {said}; revision {previous} stays stable"
    )


def manual_promote(ctx: Context, rollout: Rollout) -> Rollout:
    """`infergate.io/promote: "true" | <hash>`: an available canary becomes stable, whatever
    its verdict (which the record and the Event name)."""
    manual = ctx.state.manual
    if manual.promote is None:
        return rollout
    canary = rollout.canary
    refused = _not_this_canary(rollout, "promote", str(manual.promote), manual.promotes)
    if refused is not None or canary is None:
        return refused or rollout
    if not ctx.ready(canary, ctx.spec.rollout.canary_replicas):
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED,
            f"promote: canary {canary} is not available yet ({ctx.availability(canary)})",
            warning=True,
        )
    taken = ctx.serving_taken()
    if taken is not None:
        return rollout.noting(
            reasons.MANUAL_ACTION_REFUSED, f"promote: canary {canary}: {taken}", warning=True
        )
    verdict = rollout.record(ctx, canary).verdict
    said = verdict.value if verdict else "none"
    rollout = rollout.promote(
        ctx, canary, reasons.PROMOTION_BY_HAND, f"promoted {_by(ctx)}; parity verdict {said}"
    )
    rollout = replace(rollout, canary=None)
    return rollout.noting(
        reasons.MANUAL_ACTION,
        f"canary {canary} promoted {_by(ctx)} (parity verdict {said})",
        warning=verdict is not VerdictOutcome.PASSED,
    )
