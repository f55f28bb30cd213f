"""What the controller sees of an InferenceDeployment's children, as small immutable records.

Pure: a child's body (a dict from the watch stream) in, a record out. The kopf
indexes keep these records by owning deployment, so a reconcile reads its
children from memory instead of listing them, and the records hold only what
the plan looks at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from infergate.api.enums import CheckPhase, VerdictOutcome
from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, LABEL_REVISION, MANAGED_BY

JSON = Mapping[str, Any]

# Annotations the controller writes on its children.
ANNOTATION_DESIRED_HASH = "infergate.io/desired-hash"
ANNOTATION_REVISION_SPEC = "infergate.io/revision-spec"
ANNOTATION_ROLE = "infergate.io/role"
# Stamped on a ParityCheck: which canary attempt it judges, so a check left from an earlier
# attempt at the same revision is never read as this attempt's verdict.
ANNOTATION_CANARY_STARTED = "infergate.io/canary-started"


@dataclass(frozen=True)
class OwnerKey:
    """Namespace and name of the InferenceDeployment a child belongs to."""

    namespace: str
    name: str


@dataclass(frozen=True)
class ObservedDeployment:
    """A revision's Deployment: its size, progress and what it was rendered from."""

    name: str
    revision: str
    owner_uid: str | None
    resource_version: str
    created: datetime | None
    generation: int
    observed_generation: int
    spec_replicas: int
    replicas: int
    updated_replicas: int
    ready_replicas: int
    available_replicas: int
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    spec: JSON

    @property
    def rolled_out(self) -> bool:
        """Every wanted pod runs the current template and is available (0 of 0 counts)."""
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas >= self.spec_replicas
            and self.available_replicas >= self.spec_replicas
            and self.replicas <= self.spec_replicas
        )

    @property
    def revision_spec(self) -> str | None:
        """The revision's model/engine/accelerator as JSON, as the controller wrote it."""
        return self.annotations.get(ANNOTATION_REVISION_SPEC)


@dataclass(frozen=True)
class ObservedObject:
    """A revision's ConfigMap or Service (or the stable Service): enough to detect drift."""

    kind: str
    name: str
    revision: str | None
    owner_uid: str | None
    resource_version: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    content: JSON
    """`data` of a ConfigMap, `spec` of a Service."""


@dataclass(frozen=True)
class ObservedCheck:
    """A ParityCheck the controller created, and how far it got."""

    name: str
    candidate_revision: str | None
    baseline_revision: str | None
    owner_uid: str | None
    created: datetime | None
    phase: CheckPhase | None
    outcome: VerdictOutcome | None
    passed: bool | None
    summary: str | None
    metrics: Mapping[str, float] = field(default_factory=dict)
    completion_time: datetime | None = None
    attempt: str | None = None
    """When the canary attempt it judges started (its infergate.io/canary-started)."""

    @property
    def terminal(self) -> bool:
        """Passed, Failed or Error: the check will not change any more."""
        return self.phase in (CheckPhase.PASSED, CheckPhase.FAILED, CheckPhase.ERROR)


@dataclass(frozen=True)
class ObservedPod:
    """An engine pod, reduced to whether (and why not) it is scheduled."""

    name: str
    revision: str | None
    unschedulable_message: str | None


@dataclass(frozen=True)
class Observed:
    """Every child of one InferenceDeployment, owned by it (other uids already dropped)."""

    deployments: Mapping[str, ObservedDeployment] = field(default_factory=dict)
    """By revision."""
    config_maps: Mapping[str, ObservedObject] = field(default_factory=dict)
    """By object name."""
    services: Mapping[str, ObservedObject] = field(default_factory=dict)
    """By object name."""
    checks: Mapping[str, ObservedCheck] = field(default_factory=dict)
    """By object name."""
    pods: tuple[ObservedPod, ...] = ()


def owner_key(body: JSON) -> OwnerKey | None:
    """The owning deployment of a child managed by infergate; None for anything else."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owner = labels.get(LABEL_DEPLOYMENT)
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or not owner:
        return None
    return OwnerKey(namespace=str(metadata.get("namespace") or ""), name=str(owner))


def controller_uid(body: JSON) -> str | None:
    """uid of the controlling owner reference."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def observe_deployment(body: JSON) -> ObservedDeployment | None:
    """A revision Deployment; None for Deployments that are not one."""
    metadata = body.get("metadata") or {}
    labels = dict(metadata.get("labels") or {})
    revision = labels.get(LABEL_REVISION)
    if owner_key(body) is None or not revision:
        return None
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    return ObservedDeployment(
        name=str(metadata.get("name")),
        revision=str(revision),
        owner_uid=controller_uid(body),
        resource_version=str(metadata.get("resourceVersion") or ""),
        created=parse_time(metadata.get("creationTimestamp")),
        generation=_int(metadata.get("generation")),
        observed_generation=_int(status.get("observedGeneration")),
        spec_replicas=_int(spec.get("replicas", 1)),
        replicas=_int(status.get("replicas")),
        updated_replicas=_int(status.get("updatedReplicas")),
        ready_replicas=_int(status.get("readyReplicas")),
        available_replicas=_int(status.get("availableReplicas")),
        annotations=dict(metadata.get("annotations") or {}),
        labels=labels,
        spec=json.loads(json.dumps(spec)),
    )


def observe_object(body: JSON) -> ObservedObject | None:
    """A ConfigMap or Service of a deployment; None for objects infergate does not manage."""
    if owner_key(body) is None:
        return None
    metadata = body.get("metadata") or {}
    kind = str(body.get("kind") or "")
    content = body.get("data") if kind == "ConfigMap" else body.get("spec")
    labels = dict(metadata.get("labels") or {})
    return ObservedObject(
        kind=kind,
        name=str(metadata.get("name")),
        revision=labels.get(LABEL_REVISION),
        owner_uid=controller_uid(body),
        resource_version=str(metadata.get("resourceVersion") or ""),
        annotations=dict(metadata.get("annotations") or {}),
        labels=labels,
        content=json.loads(json.dumps(content or {})),
    )


def observe_check(body: JSON) -> ObservedCheck | None:
    """A ParityCheck created for a deployment's canary; None for checks made by people."""
    if owner_key(body) is None:
        return None
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    verdict = status.get("verdict") or {}
    phase = str(status.get("phase") or "")
    outcome = str(verdict.get("outcome") or "")
    metrics = status.get("metrics") or {}
    return ObservedCheck(
        name=str(metadata.get("name")),
        candidate_revision=(spec.get("candidate") or {}).get("revision"),
        baseline_revision=(spec.get("baseline") or {}).get("revision"),
        owner_uid=controller_uid(body),
        created=parse_time(metadata.get("creationTimestamp")),
        phase=CheckPhase(phase) if phase in CheckPhase.__members__.values() else None,
        outcome=(
            VerdictOutcome(outcome) if outcome in VerdictOutcome.__members__.values() else None
        ),
        passed=verdict.get("passed") if isinstance(verdict.get("passed"), bool) else None,
        summary=verdict.get("summary"),
        metrics={str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        completion_time=parse_time(status.get("completionTime")),
        attempt=(metadata.get("annotations") or {}).get(ANNOTATION_CANARY_STARTED),
    )


def observe_pod(body: JSON) -> ObservedPod | None:
    """An engine pod; its scheduler message when the scheduler could not place it."""
    if owner_key(body) is None:
        return None
    metadata = body.get("metadata") or {}
    message = None
    for condition in (body.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = str(condition.get("message") or "no node fits the pod")
    return ObservedPod(
        name=str(metadata.get("name")),
        revision=(metadata.get("labels") or {}).get(LABEL_REVISION),
        unschedulable_message=message,
    )


def collect(
    owner_uid: str,
    deployments: list[ObservedDeployment],
    objects: list[ObservedObject],
    checks: list[ObservedCheck],
    pods: list[ObservedPod],
) -> Observed:
    """Children owned by `owner_uid` (a same-named predecessor's leftovers are ignored)."""

    def mine(uid: str | None) -> bool:
        return uid == owner_uid

    return Observed(
        deployments={d.revision: d for d in deployments if mine(d.owner_uid)},
        config_maps={o.name: o for o in objects if o.kind == "ConfigMap" and mine(o.owner_uid)},
        services={o.name: o for o in objects if o.kind == "Service" and mine(o.owner_uid)},
        checks={c.name: c for c in checks if mine(c.owner_uid)},
        pods=tuple(pods),
    )
