"""One reconcile, decided: rollout, child writes, status and Events, from observed state.

Pure. `plan_reconcile` is the whole "decide" step of gather-decide-write; the
controller gathers a `DeploymentState` and hands the plan to `kube/` to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from infergate.api.common import Condition
from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.enums import ConditionStatus, PromotionStep
from infergate.plan import reasons
from infergate.plan.conditions import (
    ConditionUpdate,
    changed_conditions,
    set_condition,
)
from infergate.plan.deployment.desired import (
    desired_extras,
    desired_revision,
    desired_stable_service,
)
from infergate.plan.deployment.gates import GateWrite, leader_gates
from infergate.plan.deployment.observed import Observed
from infergate.plan.deployment.rollout import (
    DeploymentState,
    Notice,
    Outcome,
    RolloutDecision,
    decide,
)
from infergate.plan.deployment.state import Context, taken_message
from infergate.plan.deployment.status import StatusInput, build_status
from infergate.plan.deployment.sync import Create, SyncPlan, sync_children
from infergate.plan.drift.state import DriftPlan
from infergate.plan.phases import deployment_phase

FALSE = ConditionStatus.FALSE
# How soon a create whose name someone else's object held is tried again.
NAME_RETRY = timedelta(seconds=30)
_BAD_WHEN_TRUE = (reasons.DEGRADED, reasons.CONFIG_DRIFTED)
_BAD_PROGRESS = (
    reasons.ROLLED_BACK,
    reasons.PROGRESS_DEADLINE_EXCEEDED,
    reasons.UNSCHEDULABLE,
    reasons.INVALID_SPEC,
    reasons.REVISION_LOST,
)


@dataclass(frozen=True)
class ReconcilePlan:
    """Everything one reconcile writes, in the order it is written."""

    sync: SyncPlan
    create_checks: list[dict[str, Any]]
    delete_checks: list[str]
    status: InferenceDeploymentStatus
    status_changed: bool
    remove_annotations: tuple[str, ...]
    events: list[Notice] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    due: datetime | None = None
    """When to reconcile again though nothing changes (a deadline, the end of a pause)."""
    gates: list[GateWrite] = field(default_factory=list)
    """The readiness gate of group leaders to set (`plan.deployment.gates`)."""

    @property
    def quiet(self) -> bool:
        """Nothing to write: the children and the status already agree with the decision."""
        return not (
            self.status_changed
            or self.sync.writes
            or self.create_checks
            or self.delete_checks
            or self.remove_annotations
            or self.gates
        )


def condition_events(before: Sequence[Condition], after: Sequence[Condition]) -> list[Notice]:
    """The Events of the conditions whose status or reason changed: one for the rollout's
    transition (Progressing), which also tells the other conditions that changed with it
    and are not bad news, and one per condition that turned bad (a Warning of its own)."""
    warnings: list[Notice] = []
    normal: list[Notice] = []
    progressing: Notice | None = None
    known = {c.type for c in before}
    for condition in changed_conditions(before, after):
        if condition.type == reasons.DRIFTED:
            continue  # the drift watch posts its own, as onDrift.action asks
        if condition.type in reasons.READINESS_CONDITION_TYPES:
            continue  # read off the others, whose own Events already tell the change
        true = condition.status is ConditionStatus.TRUE
        warning = (
            (condition.type in _BAD_WHEN_TRUE and true)
            or (condition.type == reasons.PARITY_PASSED and condition.status is FALSE)
            or (condition.type == reasons.PROGRESSING and condition.reason in _BAD_PROGRESS)
            or (condition.type == reasons.AVAILABLE and not true and condition.reason
                == reasons.REPLICAS_UNAVAILABLE)
        )  # fmt: skip
        # A condition's first appearance is news only when it is bad, or says what started.
        if condition.type not in known and not warning and condition.type != reasons.PROGRESSING:
            continue
        notice = Notice(warning, condition.reason, f"{condition.type}: {condition.message}")
        if condition.type == reasons.PROGRESSING:
            progressing = notice
        elif warning:
            warnings.append(notice)
        else:
            normal.append(notice)
    if progressing is None:
        return [*normal, *warnings]
    # One transition, one Event: what changed with it rides along in its message.
    message = "; ".join(n.message for n in (progressing, *normal))
    return [Notice(progressing.warning, progressing.reason, message), *warnings]


def plan_reconcile(state: DeploymentState) -> ReconcilePlan:
    """Decide the rollout, the child writes, the status and the Events of one reconcile."""
    decision = decide(state)
    revisions = [
        desired_revision(state.owner, kept.spec, replicas=kept.replicas, role=kept.role)
        for kept in decision.kept
    ]
    route_stable, route_canary, weight = _route(state, decision)
    sync = sync_children(
        revisions,
        state.observed,
        stable_service=desired_stable_service(state.owner, state.spec, decision.serving),
        extras=desired_extras(
            state.owner,
            state.spec,
            stable=route_stable,
            canary=route_canary,
            canary_weight=weight,
            mirror_image=state.mirror_image,
            runner_namespace=state.runner_namespace,
            pull_secrets=state.pull_secrets,
            # The revision whose pods carry the traffic (the previous stable while a
            # promotion scales the new one up); none before a first revision is stable.
            serving=decision.serving if decision.stable is not None else None,
        ),
    )
    previous = state.status
    # Only names this reconcile still tries to create count: one freed, or no longer
    # wanted (a mode without a route), stops being reported.
    creating = {str(w.ref) for w in sync.writes if isinstance(w, Create)}
    taken = {ref: holder for ref, holder in state.taken.items() if ref in creating}
    status = build_status(
        StatusInput(
            name=state.owner.name,
            generation=state.generation,
            spec=state.spec,
            previous=previous,
            decision=decision,
            drift=sync.drift,
            observed=state.observed,
            now=state.now,
            taken=taken_message(taken),
        )
    )
    status = with_deployment_uids(status, state.observed)
    events = [*decision.notices, *condition_events(previous.conditions, status.conditions)]
    events += [
        Notice(
            True,
            reasons.DRIFT_REVERTED,
            f"{ref} was edited outside infergate: {'; '.join(d.describe() for d in fields)}",
        )
        for ref, fields in sync.drift
    ]
    return ReconcilePlan(
        sync=sync,
        create_checks=decision.create_checks,
        delete_checks=decision.delete_checks,
        status=status,
        status_changed=status.to_kube() != previous.to_kube(),
        remove_annotations=state.manual.present,
        events=events,
        outcomes=decision.outcomes,
        gates=leader_gates(
            state.observed.deployments, state.observed.pods, status.drift, state.now
        ),
        due=_earliest(
            # Nothing wakes the deployment when someone else's object is deleted (only its
            # own children are watched), so a taken name is tried again after a while.
            decision.due if not taken else _sooner(decision.due, state.now + NAME_RETRY),
            decision.drift,
            state.now,
        ),
    )


def _route(state: DeploymentState, decision: RolloutDecision) -> tuple[str | None, str | None, int]:
    """(stable, canary, canary weight) of the HTTPRoute: while a promotion scales the new
    stable up, the route stays as it is seen (the new stable at the weight it carries);
    it moves with the Service, at the switch."""
    promotion = decision.promotion
    if promotion is not None and promotion.step is PromotionStep.SCALING_UP:
        return promotion.previous, promotion.revision, promotion.carried
    weight = Context.of(state).step_weight(decision.step) if decision.canary is not None else 0
    return decision.stable, decision.canary, weight


def _sooner(due: datetime | None, at: datetime) -> datetime:
    return at if due is None else min(due, at)


def _earliest(due: datetime | None, drift: DriftPlan | None, now: datetime) -> datetime | None:
    """The sooner of the rollout's own due time and the drift watch's next look."""
    times = [t for t in (due,) if t is not None]
    if drift is not None and drift.wake_in is not None:
        times.append(now + timedelta(seconds=drift.wake_in))
    return min(times, default=None)


def with_check_uids(
    status: InferenceDeploymentStatus, created: Mapping[str, str]
) -> InferenceDeploymentStatus:
    """The status with the uid of each ParityCheck just created (name -> uid) recorded on the
    revision it judges, or on the drift run status.drift names: from then on only that
    object's verdict counts."""
    revisions = [
        r.model_copy(update={"parity_check_uid": created[r.parity_check]})
        if r.parity_check is not None and r.parity_check in created
        else r
        for r in status.revisions
    ]
    drift = status.drift
    if drift is not None and drift.check is not None and drift.check in created:
        drift = drift.model_copy(update={"check_uid": created[drift.check]})
    return status.model_copy(update={"revisions": revisions, "drift": drift})


def with_deployment_uids(
    status: InferenceDeploymentStatus, observed: Observed
) -> InferenceDeploymentStatus:
    """The status with the uid of each revision's Deployment recorded on its revision: the
    parity runner reads it there (a status only the operator writes) and calls only pods
    that Deployment's ReplicaSets made. The Deployment is the one under the revision's own
    name that the deployment controls (`observed.collect`); one made again under the name
    replaces the record, one not seen (yet) leaves it as it was."""
    revisions = [
        r.model_copy(update={"deployment_uid": seen.uid})
        if (seen := observed.deployments.get(r.hash)) is not None
        and seen.uid
        and seen.uid != r.deployment_uid
        else r
        for r in status.revisions
    ]
    return status.model_copy(update={"revisions": revisions})


def invalid_spec_status(
    previous: InferenceDeploymentStatus, generation: int, message: str, now: datetime
) -> InferenceDeploymentStatus:
    """The status of a deployment whose spec cannot be acted on: nothing else changes."""
    conditions = list(previous.conditions)
    for update in (
        ConditionUpdate(reasons.PROGRESSING, ConditionStatus.FALSE, reasons.INVALID_SPEC, message),
        ConditionUpdate(reasons.DEGRADED, ConditionStatus.TRUE, reasons.INVALID_SPEC, message),
    ):
        conditions = set_condition(conditions, update, generation=generation, now=now)
    return previous.model_copy(
        update={
            "observed_generation": generation,
            "conditions": conditions,
            "phase": deployment_phase(conditions),
        }
    )
