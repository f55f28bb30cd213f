"""Rollout steps of the drift watch: what `plan.drift.watch` decided, applied to the rollout
(pure).

    drift_rollback   a drift run Failed and onDrift.action is rollback: roll back now
    watch_drift      start, follow and tidy the runs on the (final) stable revision

The decision is made from plain data (`DriftInput`); these steps only gather it from the
context and carry the plan out: the run's ParityCheck, the checks to delete, the
status and the condition, Events and counts.
"""

from __future__ import annotations

from dataclasses import replace

from infergate.api.drift import DriftStatus, OnDrift
from infergate.golden.settings import HiddenStatesPolicy
from infergate.jsontypes import JSON
from infergate.plan import reasons
from infergate.plan.check.owned import ANNOTATION_SPEC_DIGEST
from infergate.plan.check.stamp import stamp_check
from infergate.plan.conditions import find_condition
from infergate.plan.deployment.desired import desired_drift_check
from infergate.plan.deployment.manual import retained_revisions, roll_back
from infergate.plan.deployment.observed import stable_group_digests
from infergate.plan.deployment.state import Context, Rollout
from infergate.plan.drift.state import DriftInput, DriftPlan
from infergate.plan.drift.watch import decide_drift

_NO_ACTION = OnDrift()


def drift_input(ctx: Context, rollout: Rollout) -> DriftInput:
    """What the watch decides from, as the rollout stands."""
    spec = ctx.spec
    parity = spec.rollout.parity
    stable = rollout.stable
    record = rollout.records.get(stable) if stable is not None else None
    status = ctx.state.status
    workload = ctx.observed.deployments.get(stable) if stable is not None else None
    return DriftInput(
        deployment=ctx.state.owner.name,
        owner_uid=ctx.state.owner.uid,
        watch=parity.watch if parity is not None else None,
        on_drift=parity.on_drift if parity is not None else _NO_ACTION,
        check_deadline_seconds=parity.deadline_seconds if parity is not None else 0,
        stable=stable,
        stable_since=record.promoted_at if record is not None else None,
        canary=rollout.canary,
        golden_store=ctx.state.golden is not None,
        checks=list(ctx.observed.checks.values()),
        previous=status.drift,
        previous_condition=find_condition(status.conditions, reasons.DRIFTED),
        retained=retained_revisions(ctx, rollout),
        history_limit=spec.revision_history_limit,
        now=ctx.now,
        groups=stable_group_digests(workload, ctx.observed.pods),
        group_replicas=workload.spec_replicas if workload is not None else 0,
    )


def drift_rollback(ctx: Context, rollout: Rollout) -> Rollout:
    """Roll back to onDrift.rollbackTo when the stable revision's latest drift run Failed."""
    plan = decide_drift(drift_input(ctx, rollout))
    target = plan.rollback_to
    if target is None:
        return rollout
    drifted = rollout.stable
    rollout = roll_back(
        ctx,
        rollout,
        target,
        reason=reasons.ROLLBACK_DRIFT,
        why=f"after drift run {plan.status.check if plan.status else ''} found it drifted",
    )
    rollout = replace(
        rollout,
        notices=(*rollout.notices, *plan.notices),
        outcomes=(*rollout.outcomes, *plan.outcomes),
    )
    return rollout.noting(
        reasons.ROLLBACK_DRIFT,
        f"stable revision {drifted} drifted from its golden record: rolled back to revision "
        f"{target} (onDrift.action rollback)",
        warning=True,
    )


def watch_drift(ctx: Context, rollout: Rollout) -> Rollout:
    """Start, follow and tidy the drift runs of the stable revision."""
    plan = decide_drift(drift_input(ctx, rollout))
    create = rollout.create_checks
    if plan.create_run is not None and rollout.stable is not None:
        manifest = _run_manifest(ctx, rollout.stable, plan.create_run)
        if manifest is None:
            plan = _lost(plan, rollout.stable)
        else:
            create = (*create, manifest)
            plan = _recorded(plan, manifest)
    delete = (*rollout.delete_checks, *(n for n in plan.delete if n not in rollout.delete_checks))
    return replace(
        rollout,
        drift=plan,
        create_checks=create,
        delete_checks=delete,
        notices=(*rollout.notices, *plan.notices),
        outcomes=(*rollout.outcomes, *plan.outcomes),
    )


def _run_manifest(ctx: Context, stable: str, run: int) -> JSON | None:
    spec = ctx.revision_spec(stable)
    parity = ctx.spec.rollout.parity
    if spec is None or parity is None:
        return None
    golden = ctx.state.golden
    full = golden is not None and golden.hidden_states is HiddenStatesPolicy.FULL
    manifest = desired_drift_check(
        ctx.state.owner,
        spec,
        stable=stable,
        run=run,
        hidden_states=parity.hidden_states.enabled and full,
    )
    return stamp_check(manifest, ctx.state.suites)


def _recorded(plan: DriftPlan, manifest: JSON) -> DriftPlan:
    """The plan with the spec the run is made with recorded in status.drift (its uid follows
    once it is created: `plan.deployment.reconcile.with_check_uids`)."""
    if plan.status is None:
        return plan
    digest = manifest["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST]
    return replace(plan, status=plan.status.model_copy(update={"spec_digest": digest}))


def _lost(plan: DriftPlan, stable: str) -> DriftPlan:
    """The plan when the stable revision's configuration is lost: no run can be made."""
    status = DriftStatus(
        revision=stable,
        message=f"stable revision {stable}: its configuration is lost, so no run is made",
    )
    return replace(plan, status=status, create_run=None, wake_in=None)
