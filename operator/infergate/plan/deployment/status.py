"""The status a reconcile writes: conditions, phase, revisions, endpoints, sizes.

Pure. Built from the rollout decision, the drift found, the observed children
and the previous status (for transition times and for how long a drift stays
reported); compared with the previous status by the caller, which writes only
when they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from infergate.api.common import Condition
from infergate.api.deployment_status import (
    Endpoints,
    InferenceDeploymentStatus,
    LastParityCheck,
    PromotionStatus,
    ServiceEndpoint,
    TrafficStatus,
)
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.api.traffic import TrafficMode
from infergate.plan import reasons
from infergate.plan.conditions import (
    ConditionUpdate,
    find_condition,
    set_condition,
)
from infergate.plan.deployment.field_drift import FieldDrift
from infergate.plan.deployment.observed import Observed
from infergate.plan.deployment.rollout import RolloutDecision
from infergate.plan.deployment.sync import ObjectRef
from infergate.plan.phases import deployment_phase
from infergate.plan.readiness import deployment_readiness
from infergate.render.labels import (
    LABEL_CHECK_PURPOSE,
    engine_pod_selector,
    revision_object_name,
)
from infergate.render.launch import HTTP_PORT
from infergate.render.mirror import mirror_name
from infergate.render.traffic import MECHANISM

TRAFFIC_REPLICA_RATIO = MECHANISM[TrafficMode.REPLICAS]
# A reverted drift stays reported this long, so people (and tests) can see it happened.
DRIFT_REPORTED_FOR = timedelta(minutes=5)
_FAILED_PROGRESS = (
    reasons.PROGRESS_DEADLINE_EXCEEDED,
    reasons.UNSCHEDULABLE,
    reasons.INVALID_SPEC,
    reasons.REVISION_LOST,
)


@dataclass(frozen=True)
class StatusInput:
    """What the status is made of."""

    name: str
    generation: int
    spec: InferenceDeploymentSpec
    previous: InferenceDeploymentStatus
    decision: RolloutDecision
    drift: Sequence[tuple[ObjectRef, Sequence[FieldDrift]]]
    observed: Observed
    now: datetime
    taken: str | None = None
    """What the condition says of children whose names someone else's objects hold."""


def drift_condition(
    previous: Sequence[Condition],
    drift: Sequence[tuple[ObjectRef, Sequence[FieldDrift]]],
    now: datetime,
) -> ConditionUpdate:
    """True (DriftReverted) when drift was reverted now or recently; False otherwise."""
    if drift:
        parts = [f"{ref}: {'; '.join(d.describe() for d in fields)}" for ref, fields in drift]
        return ConditionUpdate(
            reasons.CONFIG_DRIFTED,
            ConditionStatus.TRUE,
            reasons.DRIFT_REVERTED,
            "edited outside infergate and reverted: " + " | ".join(parts),
        )
    old = find_condition(previous, reasons.CONFIG_DRIFTED)
    if (
        old is not None
        and old.status is ConditionStatus.TRUE
        and now - old.last_transition_time < DRIFT_REPORTED_FOR
    ):
        return ConditionUpdate(old.type, old.status, old.reason, old.message)
    return ConditionUpdate(
        reasons.CONFIG_DRIFTED,
        ConditionStatus.FALSE,
        reasons.NO_DRIFT,
        "every owned Deployment, Service and ConfigMap matches its revision",
    )


def available_condition(
    spec: InferenceDeploymentSpec,
    stable: str | None,
    observed: Observed,
    serving: str | None = None,
) -> ConditionUpdate:
    """Available: at least one pod of the stable revision serves (of `serving`, the previous
    stable, while a promotion scales the new one up)."""
    if stable is None:
        return ConditionUpdate(
            reasons.AVAILABLE,
            ConditionStatus.FALSE,
            reasons.NO_STABLE_REVISION,
            "no revision has become available yet",
        )
    if spec.replicas == 0:
        return ConditionUpdate(
            reasons.AVAILABLE,
            ConditionStatus.FALSE,
            reasons.SCALED_TO_ZERO,
            f"spec.replicas is 0: stable revision {stable} runs no pods",
        )
    serving = serving or stable
    deployment = observed.deployments.get(serving)
    available = deployment.available_replicas if deployment is not None else 0
    message = f"{available}/{spec.replicas} pods of stable revision {stable} available"
    if serving != stable:
        wanted = deployment.spec_replicas if deployment is not None else 0
        message = (
            f"{available}/{wanted} pods of revision {serving} available: it serves until "
            f"stable revision {stable} takes over"
        )
    if available >= 1:
        return ConditionUpdate(
            reasons.AVAILABLE, ConditionStatus.TRUE, reasons.MINIMUM_REPLICAS_AVAILABLE, message
        )
    return ConditionUpdate(
        reasons.AVAILABLE, ConditionStatus.FALSE, reasons.REPLICAS_UNAVAILABLE, message
    )


def degraded_condition(
    progressing: ConditionUpdate,
    available: ConditionUpdate,
    spec: InferenceDeploymentSpec,
    taken: str | None = None,
) -> ConditionUpdate:
    """Degraded: something needs a person (a failed rollout, a child's name held by someone
    else's object, or nothing of stable serving)."""
    if progressing.status is ConditionStatus.FALSE and progressing.reason in _FAILED_PROGRESS:
        return ConditionUpdate(
            reasons.DEGRADED, ConditionStatus.TRUE, progressing.reason, progressing.message
        )
    if taken is not None:
        return ConditionUpdate(reasons.DEGRADED, ConditionStatus.TRUE, reasons.NAME_TAKEN, taken)
    if (
        spec.replicas > 0
        and available.status is ConditionStatus.FALSE
        and available.reason == reasons.REPLICAS_UNAVAILABLE
    ):
        return ConditionUpdate(
            reasons.DEGRADED, ConditionStatus.TRUE, available.reason, available.message
        )
    return ConditionUpdate(
        reasons.DEGRADED, ConditionStatus.FALSE, reasons.HEALTHY, "nothing needs attention"
    )


def _last_check(inputs: StatusInput) -> LastParityCheck | None:
    check = inputs.decision.check
    canary_checks = [
        c
        for c in inputs.decision.create_checks
        if c["metadata"].get("labels", {}).get(LABEL_CHECK_PURPOSE) is None
    ]
    if check is None and canary_checks:
        created = canary_checks[0]
        return LastParityCheck(
            name=created["metadata"]["name"],
            revision=created["spec"]["candidate"]["revision"],
            phase=CheckPhase.PENDING,
            verdict=VerdictOutcome.PENDING,
        )
    if check is None:
        return inputs.previous.last_parity_check
    verdict = next(
        (r.verdict for r in inputs.decision.records if r.hash == check.candidate_revision), None
    )
    return LastParityCheck(
        name=check.name,
        revision=check.candidate_revision,
        phase=check.phase,
        verdict=verdict,
        completion_time=check.completion_time,
    )


def build_status(inputs: StatusInput) -> InferenceDeploymentStatus:
    """The whole status object this reconcile stands for."""
    decision = inputs.decision
    previous = inputs.previous
    conditions: list[Condition] = list(previous.conditions)
    serving = decision.serving if decision.stable is not None else None
    available = available_condition(inputs.spec, decision.stable, inputs.observed, serving)
    parity = decision.parity or _kept_parity(previous.conditions)
    degraded = degraded_condition(decision.progressing, available, inputs.spec, inputs.taken)
    stable = inputs.observed.deployments.get(decision.stable or "")
    readiness = deployment_readiness(
        available,
        decision.progressing,
        degraded,
        available_replicas=stable.available_replicas if stable is not None else 0,
        replicas=inputs.spec.replicas,
    )
    updates = [
        available,
        decision.progressing,
        parity,
        drift_condition(previous.conditions, inputs.drift, inputs.now),
        degraded,
        *readiness.updates(),
    ]
    drift = decision.drift
    if drift is not None and drift.condition is not None:
        updates.append(drift.condition)
    else:
        conditions = [c for c in conditions if c.type != reasons.DRIFTED]
    for update in updates:
        conditions = set_condition(conditions, update, generation=inputs.generation, now=inputs.now)
    deployments = inputs.observed.deployments.values()
    endpoints = Endpoints(stable=ServiceEndpoint(service=inputs.name, port=HTTP_PORT))
    rollout = inputs.spec.rollout
    if rollout.mirror is not None:
        endpoints.mirror = ServiceEndpoint(service=mirror_name(inputs.name), port=HTTP_PORT)
    if rollout.traffic.mode is TrafficMode.GATEWAY:
        endpoints.route = inputs.name
    if decision.canary is not None:
        endpoints.canary = ServiceEndpoint(
            service=revision_object_name(inputs.name, decision.canary),
            port=HTTP_PORT,
            revision=decision.canary,
        )
    selector = ",".join(f"{k}={v}" for k, v in engine_pod_selector(inputs.name).items())
    return InferenceDeploymentStatus(
        observed_generation=inputs.generation,
        phase=deployment_phase(conditions),
        stable_revision=decision.stable,
        canary_revision=decision.canary,
        revisions=decision.records,
        conditions=conditions,
        last_parity_check=_last_check(inputs),
        drift=drift.status if drift is not None else None,
        traffic_mechanism=MECHANISM[rollout.traffic.mode],
        traffic=traffic_status(inputs.spec, decision),
        promotion=promotion_status(decision),
        endpoints=endpoints,
        replicas=sum(d.replicas for d in deployments),
        ready_replicas=sum(d.ready_replicas for d in deployments),
        selector=selector,
    )


def traffic_status(spec: InferenceDeploymentSpec, decision: RolloutDecision) -> TrafficStatus:
    """Where live requests go now, and the canary's gateway step (read back next reconcile)."""
    rollout = spec.rollout
    mode = rollout.traffic.mode
    step = decision.step if decision.canary is not None else None
    weight = 0
    if decision.canary is not None and mode is TrafficMode.REPLICAS and spec.replicas:
        weight = round(100 * rollout.canary_replicas / (spec.replicas + rollout.canary_replicas))
    gateway = rollout.traffic.gateway
    if step is not None and gateway is not None and gateway.steps:
        weight = gateway.steps[min(step.step, len(gateway.steps) - 1)].weight
    return TrafficStatus(
        mode=mode,
        canary_weight=weight,
        revision=step.revision if step is not None else None,
        step=step.step if step is not None else None,
        step_started_at=step.started_at if step is not None else None,
        recheck=step.recheck if step is not None else None,
    )


def promotion_status(decision: RolloutDecision) -> PromotionStatus | None:
    """The promotion's step, and what is read back next reconcile (which revision served
    before, when the move was first seen)."""
    promotion = decision.promotion
    if promotion is None:
        return None
    return PromotionStatus(
        revision=promotion.revision,
        previous=promotion.previous,
        step=promotion.step,
        switched_at=promotion.switched_at,
        scale_down_at=promotion.scale_down_at,
    )


def _kept_parity(previous: Sequence[Condition]) -> ConditionUpdate:
    old = find_condition(previous, reasons.PARITY_PASSED)
    if old is not None:
        return ConditionUpdate(old.type, old.status, old.reason, old.message)
    return ConditionUpdate(
        reasons.PARITY_PASSED,
        ConditionStatus.UNKNOWN,
        reasons.NO_PARITY_CHECK,
        "no revision has been checked yet",
    )


def latest_parity_figures(status: InferenceDeploymentStatus) -> dict[str, float]:
    """Headline figures of the latest finished check (empty while none has figures).

    The latest check is `status.lastParityCheck`; its figures are kept on the revision
    it measured, so they survive the check being deleted and the operator restarting.
    """
    last = status.last_parity_check
    if last is None or last.revision is None:
        return {}
    record = next((r for r in status.revisions if r.hash == last.revision), None)
    if record is None or record.verdict in (None, VerdictOutcome.PENDING):
        return {}
    return dict(record.metrics or {})
