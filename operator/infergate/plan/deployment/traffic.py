"""Rollout steps of a gateway rollout after the canary's check passed (pure).

With `rollout.traffic.mode: gateway` a passed check does not promote at once: the
canary takes the weight of the first step of `traffic.gateway.steps`, holds it for the
step's pause, has its parity checked again when the step asks (a new ParityCheck,
`<name>-<revision>-step<N>`, while it serves that weight), then takes the next step's
weight; after the last step it is promoted. A re-check that does not pass, or a canary
that stops being available during a step, rolls it back: its weight goes to 0.

Level, not edge: where the canary stands (its revision, the step, when the step
started, the re-check asked for) is written to `status.traffic` and read back from
there on every reconcile, so a restarted operator continues the step it was in.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from infergate.api.enums import ConditionStatus, VerdictOutcome
from infergate.api.traffic import TrafficMode, TrafficStep
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.desired import recheck_name
from infergate.plan.deployment.judge import (
    bound_verdict,
    fail_or_wait,
    request_check,
    traffic_held,
)
from infergate.plan.deployment.state import Context, Rollout, StepState, clock

_NOT_PASSED = {
    VerdictOutcome.FAILED: reasons.PARITY_CHECK_FAILED,
    VerdictOutcome.INCONCLUSIVE: reasons.PARITY_CHECK_INCONCLUSIVE,
    VerdictOutcome.ERROR: reasons.PARITY_CHECK_ERROR,
}


def _steps(ctx: Context) -> list[TrafficStep]:
    gateway = ctx.spec.rollout.traffic.gateway
    return list(gateway.steps) if gateway is not None else []


def stepping(ctx: Context, canary: str) -> StepState | None:
    """The canary's step as status says it; None unless its check passed under gateway mode."""
    traffic = ctx.spec.rollout.traffic
    seen = ctx.state.status.traffic
    steps = _steps(ctx)
    if (
        traffic.mode is not TrafficMode.GATEWAY
        or not steps
        or seen is None
        or seen.revision != canary
        or seen.step is None
        or seen.step_started_at is None
    ):
        return None
    # The steps may have been edited meanwhile: stay within them.
    step = min(seen.step, len(steps) - 1)
    return StepState(canary, step, seen.step_started_at, seen.recheck)


def _holding(ctx: Context, rollout: Rollout, state: StepState, message: str) -> Rollout:
    """The canary holds `state`'s weight; decided again when its pause ends."""
    return replace(rollout, step=state, progress=ctx.stepping_progress(state, message)).due_at(
        ctx.step_ends(state)
    )


def step_failed(ctx: Context, rollout: Rollout, canary: str, state: StepState, why: str) -> Rollout:
    """A step failed: the canary's weight goes back to 0 and it is rolled back (autoRollback)."""
    message = (
        f"gateway step {state.step + 1} ({ctx.step_weight(state)}% of requests) failed: {why}; "
        "its weight went back to 0"
    )
    return fail_or_wait(
        ctx, replace(rollout, step=None), canary, reasons.ROLLBACK_STEP_FAILED, message
    )


def _recheck(
    ctx: Context, rollout: Rollout, canary: str, state: StepState
) -> tuple[Rollout, VerdictOutcome, str]:
    """Ask for the step's re-check, and what it says so far."""
    name = recheck_name(ctx.state.owner.name, canary, state.step)
    rollout, check = request_check(ctx, rollout, canary, name=name)
    if check is None:
        return rollout, VerdictOutcome.PENDING, f"re-check {name} asked for"
    rollout = replace(rollout, check=check)
    made_with = rollout.record(ctx, canary).parity_check_digest
    outcome, unbound = bound_verdict(
        check, stable=rollout.stable, canary=canary, made_with=made_with
    )
    if outcome is VerdictOutcome.PENDING:
        phase = check.phase.value if check.phase else "Pending"
        return rollout, outcome, f"re-check {name} is {phase}"
    if outcome is not rollout.record(ctx, canary).verdict:
        rollout = rollout.counting("verdict", outcome.value)
    rollout = rollout.with_record(ctx, canary, verdict=outcome, metrics=dict(check.metrics) or None)
    summary = unbound or check.summary or f"phase {outcome.value}"
    return rollout, outcome, f"re-check {name} {outcome.value}: {summary}"


def advance_steps(ctx: Context, rollout: Rollout, canary: str, state: StepState) -> Rollout:
    """Hold the step's weight for its pause, re-check if asked, then the next step or promote."""
    steps = _steps(ctx)
    step = steps[state.step]
    taken = ctx.serving_taken()
    if taken is not None:
        done = f"step {state.step + 1} of its gateway steps"
        return replace(rollout, step=state, progress=traffic_held(canary, done, taken))
    held = ctx.now - state.started_at
    pause = timedelta(seconds=step.pause_seconds)
    if held < pause:
        return _holding(ctx, rollout, state, f"holding until {clock(state.started_at + pause)}")
    # A step counts once the route carries it: the weight is read back, not assumed.
    carried, weight = ctx.route_weight(canary), ctx.step_weight(state)
    if carried != weight:
        seen = "no weight" if carried is None else f"{carried}%"
        return _holding(
            ctx,
            rollout,
            state,
            f"waiting for HTTPRoute {ctx.state.owner.name} to give it {weight}% (it gives {seen})",
        )
    if step.recheck:
        rollout, outcome, said = _recheck(ctx, rollout, canary, state)
        state = replace(state, recheck=recheck_name(ctx.state.owner.name, canary, state.step))
        if outcome is VerdictOutcome.PENDING:
            return _holding(ctx, rollout, state, said)
        if outcome is not VerdictOutcome.PASSED:
            reason = _NOT_PASSED.get(outcome, reasons.PARITY_CHECK_FAILED)
            rollout = replace(
                rollout,
                parity=ConditionUpdate(reasons.PARITY_PASSED, ConditionStatus.FALSE, reason, said),
            )
            return step_failed(ctx, rollout, canary, state, said)
    if state.step + 1 < len(steps):
        following = StepState(canary, state.step + 1, ctx.now)
        return _holding(ctx, rollout, following, f"step {state.step + 1} done; the next begins")
    return rollout.promote(
        ctx,
        canary,
        reasons.PROMOTION_AUTOMATIC,
        f"its check passed and it served every gateway step (last {step.weight}%)",
    )
