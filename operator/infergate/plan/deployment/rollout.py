"""The rollout decision: which revisions run, at what size, and what happens to the canary.

Pure: the deployment's spec and status, its observed children and the time in; a
`RolloutDecision` out. Nothing is remembered between calls: the stable revision and
history come from status, revision identities from the children's annotations,
readiness from the Deployments, verdicts from the ParityChecks; so a restarted
operator decides exactly what the stopped one would have.

`decide` runs small steps, each `(context, rollout so far) -> rollout`, with no state
shared but what one hands the next (`plan.deployment.state.Rollout`, immutable):

    choose_canary       the desired revision is the canary when a stable one differs
    manual_rollback     infergate.io/rollback-to        (plan.deployment.manual)
    manual_abort        infergate.io/abort
    manual_promote      infergate.io/promote
    drift_rollback      onDrift rollback after a drift  (plan.deployment.drift)
    advance_canary      wait for it, then judge it      (plan.deployment.canary, judge)
    advance_initial     the first revision becomes stable once rolled out
    advance_promotion   a new stable grows, takes the traffic, then the previous one goes
                                                        (plan.deployment.promotion)
    history, sizes      what stays, at which size       (plan.deployment.history)
    watch_drift         the drift watch's runs on the stable revision
    prune_checks        checks of revisions out of history
    settle              the Progressing condition
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from infergate.api.deployment_status import RevisionRecord
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.jsontypes import JSON
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.canary import advance_canary, advance_initial, choose_canary
from infergate.plan.deployment.drift import drift_rollback, watch_drift
from infergate.plan.deployment.history import history, prune_checks, settle, sizes
from infergate.plan.deployment.manual import manual_abort, manual_promote, manual_rollback
from infergate.plan.deployment.promotion import advance_promotion
from infergate.plan.deployment.state import (
    Context,
    DeploymentState,
    KeptRevision,
    Promotion,
    Rollout,
    StepState,
)
from infergate.plan.drift.state import DriftPlan
from infergate.plan.notices import Notice, Outcome

__all__ = [
    "DeploymentState",
    "KeptRevision",
    "Notice",
    "Outcome",
    "Promotion",
    "RolloutDecision",
    "StepState",
    "decide",
    "revision_specs",
]


@dataclass(frozen=True)
class RolloutDecision:
    """What the reconcile should make true."""

    stable: str | None
    canary: str | None
    desired: str
    records: list[RevisionRecord]
    kept: list[KeptRevision]
    progressing: ConditionUpdate
    parity: ConditionUpdate | None
    check: ObservedCheck | None
    create_checks: list[JSON] = field(default_factory=list)
    delete_checks: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    unschedulable: str | None = None
    step: StepState | None = None
    """The canary's gateway step (gateway mode, once its check passed)."""
    drift: DriftPlan | None = None
    """The drift watch's status, condition and next look."""
    promotion: Promotion | None = None
    """The change of stable revision in progress: which step, which revision serves."""
    due: datetime | None = None
    """When this decision changes by time alone (a deadline, the end of a pause): the
    deployment is reconciled again then; None: only a change, or the safety resync."""

    @property
    def serving(self) -> str:
        """The revision the stable Service and the HTTPRoute send requests to: the stable
        one, but the previous stable while a promotion scales the new one up (the first
        revision before it is stable)."""
        if self.promotion is not None:
            return self.promotion.serving
        return self.stable or self.desired


def decide(state: DeploymentState) -> RolloutDecision:
    """The whole rollout decision for one reconcile."""
    ctx = Context.of(state)
    rollout = Rollout.start(ctx)
    for step in (
        choose_canary,
        manual_rollback,
        manual_abort,
        manual_promote,
        drift_rollback,
        advance_canary,
        advance_initial,
        advance_promotion,
    ):
        rollout = step(ctx, rollout)
    records = history(ctx, rollout)
    rollout, kept = sizes(ctx, rollout, records)
    rollout = watch_drift(ctx, rollout)
    rollout = prune_checks(ctx, rollout, records)
    return RolloutDecision(
        stable=rollout.stable,
        canary=rollout.canary,
        desired=ctx.desired,
        records=records,
        kept=kept,
        progressing=settle(ctx, rollout),
        parity=rollout.parity,
        check=rollout.check,
        create_checks=list(rollout.create_checks),
        delete_checks=list(rollout.delete_checks),
        outcomes=list(rollout.outcomes),
        notices=list(rollout.notices),
        unschedulable=rollout.unschedulable,
        step=rollout.step,
        drift=rollout.drift,
        promotion=rollout.promotion,
        due=rollout.due,
    )


def revision_specs(decision: RolloutDecision) -> Mapping[str, InferenceDeploymentSpec]:
    """The spec each kept revision renders from."""
    return {kept.revision: kept.spec for kept in decision.kept}
