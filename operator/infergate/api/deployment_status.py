"""Status of an InferenceDeployment: revisions, conditions, parity and endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from infergate.api.base import SHORT_TEXT_MAX, KubeModel
from infergate.api.common import Condition, ObjectName
from infergate.api.drift import DriftStatus
from infergate.api.enums import (
    AcceleratorKind,
    CheckPhase,
    DeploymentPhase,
    DType,
    EngineKind,
    PromotionStep,
    VerdictOutcome,
)
from infergate.api.traffic import TrafficMode


class RevisionRecord(KubeModel):
    """A revision this deployment has run or tried."""

    hash: str = Field(max_length=64)
    """Revision hash (10 hex digits), the infergate.io/revision label of its objects."""
    engine: EngineKind
    """Engine kind of the revision."""
    dtype: DType
    """Compute dtype of the revision."""
    accelerator: AcceleratorKind | None = None
    """Accelerator kind of the revision."""
    image: str | None = Field(default=None, max_length=512)
    """Engine image of the revision."""
    verdict: VerdictOutcome | None = None
    """Outcome of its parity check: Passed, Failed, Error, Inconclusive or Pending."""
    metrics: dict[str, float] | None = Field(default=None, max_length=512)
    """Suite-level metrics of its parity check."""
    parity_check: ObjectName | None = None
    """Name of its ParityCheck."""
    parity_check_uid: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """uid of the ParityCheck the operator created for this attempt: only that object's verdict
    counts, so a check of the same name made by anyone else is never taken for it.
    """
    deployment_uid: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """uid of the revision's Deployment (a multi-node revision's: its LeaderWorkerSet),
    recorded by the operator: the parity runner calls only pods a ReplicaSet of that very
    Deployment (a leader StatefulSet of that LeaderWorkerSet) made, never a pod that merely
    wears the revision's labels.
    """
    parity_check_digest: str | None = Field(default=None, max_length=64)
    """sha256 of the spec the operator created that ParityCheck with: a verdict of any other
    spec never counts, whatever the check's annotations say."""
    rejected: bool = False
    """True when its check failed or erred: not retried until the spec changes."""
    message: str | None = Field(default=None, max_length=4096)
    """Why it was rejected or rolled back, for people."""
    created_at: datetime | None = None
    """When the revision was first rendered."""
    promoted_at: datetime | None = None
    """When it became stable."""


class LastParityCheck(KubeModel):
    """The most recent parity check of this deployment."""

    name: ObjectName
    """Name of the ParityCheck."""
    revision: str | None = Field(default=None, max_length=64)
    """Candidate revision it checked."""
    phase: CheckPhase | None = None
    """Pending, Running, Passed, Failed or Error."""
    verdict: VerdictOutcome | None = None
    """Passed, Failed, Error, Inconclusive, or Pending while it runs."""
    completion_time: datetime | None = None
    """When it finished."""


class ServiceEndpoint(KubeModel):
    """A Service clients or the runner can call."""

    service: ObjectName
    """Service name, in the deployment's namespace."""
    port: int = Field(ge=1, le=65535)
    """Service port of the OpenAI-compatible API."""
    revision: str | None = Field(default=None, max_length=64)
    """Revision behind it; unset for the stable Service (which revisions it selects:
    trafficMechanism)."""


class Endpoints(KubeModel):
    """Where the deployment answers."""

    stable: ServiceEndpoint | None = None
    """The stable Service (clients call this one)."""
    canary: ServiceEndpoint | None = None
    """The canary revision's own Service (the runner calls this one)."""
    mirror: ServiceEndpoint | None = None
    """The mirroring proxy in front of the stable Service (rollout.mirror): clients that call it
    are answered by stable, and a sampled share of their requests is scored on a dark canary."""
    route: ObjectName | None = None
    """The HTTPRoute clients reach through a Gateway (rollout.traffic.mode gateway)."""


class TrafficStatus(KubeModel):
    """Where live requests go now, and how far a gateway rollout has stepped."""

    mode: TrafficMode
    """dark, replicas or gateway (spec.rollout.traffic.mode)."""
    canary_weight: int = Field(default=0, ge=0, le=100)
    """Percent of live requests the canary gets now: 0 while dark or before its check passed; the
    route weight of the current step (gateway); its replica share (replicas)."""
    revision: str | None = Field(default=None, max_length=64)
    """Canary revision the steps below belong to."""
    step: int | None = Field(default=None, ge=0, le=64)
    """Index of the current gateway step (0..64; 0 = the first), once the canary's check
    passed."""
    step_started_at: datetime | None = None
    """When the current step took its weight: its pause counts from here."""
    recheck: ObjectName | None = None
    """The ParityCheck re-checking the canary at the end of this step, once asked for."""


class PromotionStatus(KubeModel):
    """A change of the stable revision in progress: the new stable grows to full size, then
    traffic moves to it, then (once the move was seen, after scaleDownDelaySeconds) the
    previous stable is scaled down. Never both at once."""

    revision: str = Field(max_length=64)
    """The new stable revision (stableRevision)."""
    previous: str = Field(max_length=64)
    """The revision that served before; it keeps its pods until the promotion ends."""
    step: PromotionStep
    """ScalingUp, Switching or ScaleDownDelay."""
    switched_at: datetime | None = None
    """When the stable Service (and the HTTPRoute, in gateway mode) was first seen sending
    requests to the new stable: the scale-down delay counts from here."""
    scale_down_at: datetime | None = None
    """When the previous revision is scaled down (switchedAt + scaleDownDelaySeconds)."""


class InferenceDeploymentStatus(KubeModel):
    """Observed state of an InferenceDeployment, written by the operator."""

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation last acted on."""
    phase: DeploymentPhase | None = None
    """Stable, Progressing, Verifying, Promoting, RolledBack or Failed (derived from conditions)."""
    stable_revision: str | None = Field(default=None, max_length=64)
    """The stable revision, the one promoted last. Until its promotion has seen traffic move to it
    (promotion.switchedAt), promotion.previous still serves the clients."""
    canary_revision: str | None = Field(default=None, max_length=64)
    """Revision being rolled out, if any."""
    revisions: list[RevisionRecord] = Field(default_factory=list, max_length=64)
    """Revisions run or tried, newest last."""
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Available, Progressing, ParityPassed, ConfigDrifted, Degraded, and Drifted while a drift
    watch is set; Ready (rollout complete at full size), Reconciling and Stalled read off them
    for tools such as `kubectl wait`, kstatus and Argo CD."""
    last_parity_check: LastParityCheck | None = None
    """The most recent parity check of a canary."""
    drift: DriftStatus | None = None
    """The drift watch of the stable revision (rollout.parity.watch): its latest run, the next."""
    traffic_mechanism: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """How traffic is split between stable and canary: Dark (the stable Service selects the stable
    revision only), ReplicaRatio (it selects every revision's pods) or GatewayWeights (an
    HTTPRoute's backend weights).
    """
    traffic: TrafficStatus | None = None
    """Where live requests go now, and the gateway rollout's current step."""
    promotion: PromotionStatus | None = None
    """The change of stable revision in progress, step by step; unset when none is."""
    endpoints: Endpoints | None = None
    """Services of the stable and canary revisions."""
    replicas: int | None = Field(default=None, ge=0)
    """Engine pods of all revisions."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Ready engine pods of all revisions."""
    selector: str | None = Field(default=None, max_length=1024)
    """Label selector of the pods, for the scale subresource."""
