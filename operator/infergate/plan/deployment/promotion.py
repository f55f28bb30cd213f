"""The rollout step that moves the stable revision without dropping it (pure).

Whenever the stable revision changes (a canary promoted by its check, its last gateway
step or a person; a rollback to a retained revision, by hand or after a drift), the new
stable does not take the traffic at once. A promotion goes, one step at a time:

    ScalingUp        the new stable grows to `replicas`; the stable Service and the
                     HTTPRoute stay as they were, the previous stable serves at its size
    Switching        every pod of the new stable is available: the stable Service's
                     selector (dark, gateway) and the HTTPRoute's weights (gateway) move
    ScaleDownDelay   the move is seen (the Service and the route as read back send
                     requests to the new stable): the previous one keeps its pods for
                     `rollout.scaleDownDelaySeconds`
    (done)           the previous stable is scaled to 0 and kept in history

Never both at once: the previous stable loses no pod in a reconcile that moves traffic,
nor before one has read the move back and the delay has passed.

Level, not edge: each step is decided again on every reconcile from the pods available
per revision, the Service and the route as observed, and `status.promotion` (which
revision served before, when the move was first seen). A restarted operator continues
where the stopped one was; a write the API server refused (a 409 on the Service) leaves
the Service as it was, so the same step is decided again and the write retried, while the
previous stable keeps its pods.

A promotion interrupted:

- `infergate.io/abort` while the new stable scales up (before the move was ever asked
  for) undoes it: the new revision is rejected and the previous one stays stable, its
  Service and pods untouched (`abort_promotion`). Once the move is asked for (Switching)
  or seen (ScaleDownDelay) an abort is refused: roll back to the previous revision, which
  keeps its pods until the delay has passed.
- A rollback, or any other change of stable, starts a new promotion from the revision
  that serves now (the one the stable Service is seen selecting). A rollback to the
  previous stable before the move finds it serving already: nothing moves, and the
  abandoned revision goes at once, as an aborted canary would (it never took the stable's
  traffic). A revision that served before the last move and is neither keeps its pods
  until the new stable is ready (`plan.deployment.history.sizes`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from infergate.api.enums import ConditionStatus, PromotionStep
from infergate.api.traffic import TrafficMode
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.state import Context, Promotion, Rollout, clock


def serving_now(ctx: Context) -> str | None:
    """The revision that takes the stable's requests now: the one the stable Service is seen
    selecting; in replicas mode (which selects every revision), the one status says."""
    selected = ctx.selected_revision()
    if selected is not None:
        return selected
    status = ctx.state.status
    seen = status.promotion
    if seen is None:
        return status.stable_revision
    return seen.revision if seen.switched_at is not None else seen.previous


def _previous(ctx: Context, stable: str) -> tuple[str | None, datetime | None]:
    """(the revision to keep serving until the move, when the move was first seen)."""
    seen = ctx.state.status.promotion
    if seen is not None and seen.revision == stable:
        return seen.previous, seen.switched_at
    return serving_now(ctx), None


def advance_promotion(ctx: Context, rollout: Rollout) -> Rollout:
    """Where the change to the stable revision stands: scaling up, switching, waiting out
    the delay, or none (nothing to move, or done)."""
    stable = rollout.stable
    if stable is None:
        return replace(rollout, promotion=None)
    previous, switched_at = _previous(ctx, stable)
    # Nothing serves that could be dropped: the first revision, or a previous stable
    # whose Deployment is gone.
    if previous is None or previous == stable or previous not in ctx.observed.deployments:
        return replace(rollout, promotion=None)
    replicas = ctx.spec.replicas
    if switched_at is None and ctx.ready(stable, replicas) and ctx.moved_to(stable):
        switched_at = ctx.now
    if switched_at is not None:
        ends = switched_at + timedelta(seconds=ctx.spec.rollout.scale_down_delay_seconds)
        if ends <= ctx.now:
            return replace(rollout, promotion=None)
        promotion = Promotion(
            stable, previous, PromotionStep.SCALE_DOWN_DELAY, switched_at, scale_down_at=ends
        )
        message = (
            f"traffic moved to revision {stable} at {clock(switched_at)}; revision {previous} "
            f"keeps its pods until {clock(ends)} (scaleDownDelaySeconds "
            f"{ctx.spec.rollout.scale_down_delay_seconds}), then it is scaled down"
        )
        return _in_step(rollout, promotion, reasons.PROMOTION_SCALE_DOWN_DELAY, message).due_at(
            ends
        )
    if not ctx.ready(stable, replicas):
        carried = ctx.route_weight(stable) or 0
        promotion = Promotion(stable, previous, PromotionStep.SCALING_UP, carried=carried)
        unschedulable = ctx.unschedulable(stable)
        message = (
            f"revision {stable} grows to {replicas} pods before traffic moves to it "
            f"({ctx.availability(stable)})" + (f"; {unschedulable}" if unschedulable else "")
            + f"; revision {previous} keeps serving meanwhile"
        )  # fmt: skip
        return replace(
            _in_step(rollout, promotion, reasons.PROMOTION_SCALING_UP, message),
            unschedulable=unschedulable or rollout.unschedulable,
        )
    promotion = Promotion(stable, previous, PromotionStep.SWITCHING)
    return _in_step(
        rollout,
        promotion,
        reasons.PROMOTION_SWITCHING,
        f"revision {stable} is ready at {replicas} pods; traffic moves to it ({_moving(ctx)}); "
        f"revision {previous} keeps its pods until the move is seen",
    )


def _moving(ctx: Context) -> str:
    name = ctx.state.owner.name
    if ctx.spec.rollout.traffic.mode is TrafficMode.GATEWAY:
        return f"Service {name} and HTTPRoute {name}"
    return f"Service {name}"


def _in_step(rollout: Rollout, promotion: Promotion, reason: str, message: str) -> Rollout:
    """The rollout at `promotion`'s step. Its Progressing condition says the step unless an
    earlier step said something else this reconcile (a canary started meanwhile, a
    rollback): status.promotion shows the step either way."""
    progress = rollout.progress
    if progress is None or progress.reason == reasons.PROMOTING:
        progress = ConditionUpdate(reasons.PROGRESSING, ConditionStatus.TRUE, reason, message)
    return replace(rollout, promotion=promotion, progress=progress)


def abortable(ctx: Context, rollout: Rollout) -> str | None:
    """The revision being promoted, while an abort can still undo its promotion: status
    says it is scaling up, so no move of traffic to it was ever asked for (status is
    written before any child)."""
    seen = ctx.state.status.promotion
    if (
        rollout.canary is None
        and seen is not None
        and seen.revision == rollout.stable
        and seen.step is PromotionStep.SCALING_UP
    ):
        return seen.revision
    return None


def abort_promotion(ctx: Context, rollout: Rollout, reason: str, message: str) -> Rollout:
    """Undo the promotion `abortable` names: the revision that served before stays stable,
    untouched; the promoted one is rejected (not retried until the spec changes)."""
    seen = ctx.state.status.promotion
    if seen is None:
        return rollout
    revision = seen.revision
    rollout = replace(rollout, stable=seen.previous, promotion=None)
    rollout = rollout.with_record(ctx, revision, promoted_at=None)
    return rollout.reject(ctx, revision, reason, message)
