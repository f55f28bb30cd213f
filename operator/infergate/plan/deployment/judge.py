"""Rollout steps that judge an available canary: its ParityCheck, the verdict, the deadline.

Pure. Three separate questions, each its own function:

- `request_check`: which check judges this canary attempt. The operator records the
  digest of the spec it is about to create in status, creates the check, and records its
  uid. A check of that name that the deployment does not own is never adopted (nor
  deleted). One it owns whose uid the attempt did not record is bound to the attempt when
  its spec is exactly the one the attempt recorded (the uid write after the create failed:
  a lost status write must not throw a running check away), and otherwise deleted and
  made anew (an earlier attempt's check: a new attempt and a new check clear the digest).
- `bound_verdict`: what the check says, failing closed. Passed counts only when the
  phase, `verdict.passed` and `verdict.outcome` all say Passed, the check compares
  exactly the stable and the canary (in its spec and in what it resolved), its spec is
  the one the operator created it with (the digest status records, which no tenant
  writes, and the one it stamped), and the verdict was given for that spec, generation
  and suite content.
  Anything else is Failed, Inconclusive or Error, which never promote.
- `judge`: the conditions and the rollout's next step from that verdict, with the
  deadline: from the canary's start, `progressDeadlineSeconds` to become available plus
  the check's own `deadlineSeconds` (a check that cannot even be created counts too).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.api.traffic import TrafficMode
from infergate.plan import reasons
from infergate.plan.check.owned import ANNOTATION_SPEC_DIGEST, ObservedCheck
from infergate.plan.check.stamp import stamp_check
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.desired import desired_parity_check, parity_check_name
from infergate.plan.deployment.state import Context, Rollout, StepState

_FAILURES = {
    VerdictOutcome.FAILED: (reasons.PARITY_CHECK_FAILED, reasons.ROLLBACK_PARITY_FAILED, "failed"),
    VerdictOutcome.INCONCLUSIVE: (
        reasons.PARITY_CHECK_INCONCLUSIVE,
        reasons.ROLLBACK_PARITY_INCONCLUSIVE,
        "had too little evidence to decide",
    ),
    VerdictOutcome.ERROR: (
        reasons.PARITY_CHECK_ERROR,
        reasons.ROLLBACK_PARITY_ERROR,
        "could not judge",
    ),
}


def bound_verdict(
    check: ObservedCheck, *, stable: str | None, canary: str, made_with: str | None
) -> tuple[VerdictOutcome, str | None]:
    """(outcome, why a Passed does not count): the verdict the canary gets from `check`,
    which the operator created with the spec digest `made_with` (as status records it)."""
    phase = check.phase
    if phase is None or not check.terminal:
        return VerdictOutcome.PENDING, None
    if phase is not CheckPhase.PASSED:
        return VerdictOutcome(phase.value), None
    problems = []
    if check.passed is not True:
        problems.append("verdict.passed is not true")
    if check.outcome is not VerdictOutcome.PASSED:
        problems.append(f"verdict.outcome is {check.outcome.value if check.outcome else 'unset'}")
    if (check.spec_baseline, check.spec_candidate) != (stable, canary):
        problems.append(
            f"its spec compares {check.spec_baseline} with {check.spec_candidate}, not stable "
            f"{stable} with canary {canary}"
        )
    if (check.status_baseline, check.status_candidate) != (stable, canary):
        problems.append(
            f"it resolved {check.status_baseline} and {check.status_candidate}, not stable "
            f"{stable} and canary {canary}"
        )
    # None only for a check created before status recorded digests: its uid and the CRD's
    # immutable spec bind it as they did then.
    if made_with is not None and check.digest != made_with:
        problems.append("its spec is not the one status records the operator created it with")
    problems.extend(check.binding_problems())
    if problems:
        return VerdictOutcome.ERROR, "; ".join(problems)
    return VerdictOutcome.PASSED, None


def fail_or_wait(ctx: Context, rollout: Rollout, canary: str, reason: str, message: str) -> Rollout:
    """Roll the canary back (autoRollback), or leave it for a person saying why."""
    if ctx.spec.rollout.auto_rollback:
        return rollout.reject(ctx, canary, reason, message)
    rollout = rollout.with_record(ctx, canary, message=message)
    if reason == reasons.ROLLBACK_DEADLINE:
        progress = ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.FALSE,
            reasons.PROGRESS_DEADLINE_EXCEEDED,
            f"canary {canary}: {message}; autoRollback is off: infergate abort or promote",
        )
    else:
        progress = ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.AWAITING_PROMOTION,
            f"canary {canary}: {message}; autoRollback is off, so it waits for a person: "
            "infergate abort or infergate promote",
        )
    return replace(rollout, progress=progress)


def _pending(rollout: Rollout, canary: str, parity: str, progress: str) -> Rollout:
    return replace(
        rollout,
        parity=ConditionUpdate(
            reasons.PARITY_PASSED, ConditionStatus.UNKNOWN, reasons.PARITY_CHECK_PENDING, parity
        ),
        progress=ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.AWAITING_PARITY,
            f"canary {canary} is available; {progress}",
        ),
    )


def made_for_attempt(found: ObservedCheck, recorded_digest: str | None) -> bool:
    """Whether `found`, owned by the deployment but with no uid recorded, is the check the
    attempt asked for: its spec (as it is, immutable) has the digest the attempt recorded in
    status before creating it. A look-alike of exactly that spec judges exactly what the
    operator's check would (its runner is the operator's, its status no tenant writes), so
    nothing but the digest, which no tenant writes, decides."""
    return recorded_digest is not None and found.digest == recorded_digest


def request_check(
    ctx: Context, rollout: Rollout, canary: str, *, name: str | None = None
) -> tuple[Rollout, ObservedCheck | None]:
    """The rollout with the canary's check (or the check `name`: a gateway step's re-check)
    asked for, and the check once it is bound."""
    owner = ctx.state.owner
    stable = rollout.stable or ""  # a canary always has a stable to compare with
    name = name or parity_check_name(owner.name, canary)
    record = rollout.record(ctx, canary)
    rollout = rollout.with_record(ctx, canary, parity_check=name)
    found = ctx.observed.checks.get(name)
    if found is None:
        manifest = stamp_check(
            desired_parity_check(owner, ctx.spec, stable=stable, canary=canary, name=name),
            ctx.state.suites,
        )
        rollout = replace(rollout, create_checks=(*rollout.create_checks, manifest))
        made_with = manifest["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST]
        rollout = rollout.with_record(
            ctx,
            canary,
            verdict=VerdictOutcome.PENDING,
            parity_check_digest=made_with,
            parity_check_uid=None,  # recorded once it is created (`with_check_uids`)
        )
        return (
            _pending(
                rollout,
                canary,
                f"ParityCheck {name} created: baseline {stable}, candidate {canary}",
                f"waiting for ParityCheck {name}",
            ),
            None,
        )
    if found.owner_uid != owner.uid:
        message = (
            f"ParityCheck {name} exists but was not created by this InferenceDeployment (its "
            "controller owner is another object or none); it is not adopted: delete it, or the "
            "canary is rolled back at its deadline"
        )
        rollout = replace(
            rollout,
            parity=ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.PARITY_CHECK_UNBOUND,
                message,
            ),
            progress=ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.AWAITING_PARITY,
                f"canary {canary} is available; {message}",
            ),
        )
        return rollout, None
    if record.parity_check_uid is None and made_for_attempt(found, record.parity_check_digest):
        # Made for this attempt, its uid lost with the status write after the create.
        rollout = rollout.with_record(ctx, canary, parity_check_uid=found.uid)
        return rollout.noting(
            reasons.PARITY_CHECK_CREATED,
            f"ParityCheck {name} bound to canary {canary}: its spec is the one this attempt "
            "recorded, and the record of its uid was lost after it was created",
        ), found
    if record.parity_check_uid != found.uid:
        # Ours, but not made for this attempt: an earlier attempt's, or one whose spec is
        # not the one this attempt recorded. Make it anew.
        rollout = replace(rollout, delete_checks=(*rollout.delete_checks, name))
        return (
            _pending(
                rollout,
                canary,
                f"ParityCheck {name} is left from an earlier attempt; it is replaced",
                f"ParityCheck {name} is replaced for this attempt",
            ),
            None,
        )
    return rollout, found


def judge(ctx: Context, rollout: Rollout, canary: str) -> Rollout:
    """The canary is available: ask for its check, read the verdict, act on it."""
    started = rollout.record(ctx, canary).created_at or ctx.now
    rollout, check = request_check(ctx, rollout, canary)
    overdue = ctx.now - started > ctx.verdict_deadline
    # Without a verdict by then, the canary is overdue (more than the deadline, to the second).
    due = started + ctx.verdict_deadline + timedelta(seconds=1)
    if check is None:
        if overdue:
            return fail_or_wait(
                ctx, rollout, canary, reasons.ROLLBACK_DEADLINE, _overdue(ctx, canary)
            )
        return rollout.due_at(due)
    rollout = replace(rollout, check=check)
    record = rollout.record(ctx, canary)
    outcome, unbound = bound_verdict(
        check, stable=rollout.stable, canary=canary, made_with=record.parity_check_digest
    )
    if outcome is not record.verdict and outcome is not VerdictOutcome.PENDING:
        rollout = rollout.counting("verdict", outcome.value)
    rollout = rollout.with_record(ctx, canary, verdict=outcome, metrics=dict(check.metrics) or None)
    summary = check.summary or f"phase {check.phase.value if check.phase else 'unknown'}"
    if unbound is not None:
        rollout = rollout.noting(
            reasons.PARITY_CHECK_UNBOUND,
            f"ParityCheck {check.name} says Passed, but it does not count: {unbound}",
            warning=True,
        )
        summary = f"its Passed does not count: {unbound}"
    if outcome is VerdictOutcome.PASSED:
        return _passed(ctx, rollout, canary, check.name, summary)
    if outcome in _FAILURES:
        condition_reason, rollback_reason, said = _FAILURES[outcome]
        if unbound is not None:
            condition_reason = reasons.PARITY_CHECK_UNBOUND
        rollout = replace(
            rollout,
            parity=ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.FALSE,
                condition_reason,
                f"ParityCheck {check.name} {said}: {summary}",
            ),
        )
        return fail_or_wait(
            ctx,
            rollout,
            canary,
            rollback_reason,
            f"ParityCheck {check.name} {outcome.value}: {summary}",
        )
    if overdue:
        return fail_or_wait(ctx, rollout, canary, reasons.ROLLBACK_DEADLINE, _overdue(ctx, canary))
    phase = check.phase.value if check.phase else "Pending"
    return _pending(
        rollout,
        canary,
        f"ParityCheck {check.name} is {phase}",
        f"ParityCheck {check.name} is {phase}",
    ).due_at(due)


def _passed(ctx: Context, rollout: Rollout, canary: str, name: str, summary: str) -> Rollout:
    rollout = replace(
        rollout,
        parity=ConditionUpdate(
            reasons.PARITY_PASSED,
            ConditionStatus.TRUE,
            reasons.PARITY_CHECK_PASSED,
            f"ParityCheck {name} passed: {summary}",
        ),
    )
    held = ctx.serving_taken()
    if ctx.spec.rollout.auto_promote and held is not None:
        return replace(rollout, progress=traffic_held(canary, f"ParityCheck {name} passed", held))
    if ctx.spec.rollout.auto_promote and ctx.spec.rollout.traffic.mode is TrafficMode.GATEWAY:
        # Traffic moves in steps from here (plan.deployment.traffic); the first begins now.
        state = StepState(canary, 0, ctx.now)
        return replace(
            rollout,
            step=state,
            progress=ctx.stepping_progress(
                state, f"ParityCheck {name} passed; the first step begins"
            ),
        ).due_at(ctx.step_ends(state))
    if ctx.spec.rollout.auto_promote:
        return rollout.promote(
            ctx, canary, reasons.PROMOTION_AUTOMATIC, f"ParityCheck {name} passed"
        )
    return replace(
        rollout,
        progress=ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.AWAITING_PROMOTION,
            f"ParityCheck {name} passed; autoPromote is off, so canary {canary} waits for a "
            "person: infergate promote or infergate abort",
        ),
    )


def traffic_held(canary: str, done: str, held: str) -> ConditionUpdate:
    """Progressing while a canary that may move on cannot: `held` says what blocks it."""
    return ConditionUpdate(
        reasons.PROGRESSING,
        ConditionStatus.TRUE,
        reasons.TRAFFIC_HELD,
        f"{done}; canary {canary} takes no more traffic until this is resolved: {held}",
    )


def _overdue(ctx: Context, canary: str) -> str:
    parity = ctx.spec.rollout.parity
    check = parity.deadline_seconds if parity is not None else 0
    return (
        f"no verdict for canary {canary} within progressDeadlineSeconds "
        f"({ctx.spec.rollout.progress_deadline_seconds}s) plus the check's deadlineSeconds "
        f"({check}s) of its start"
    )
