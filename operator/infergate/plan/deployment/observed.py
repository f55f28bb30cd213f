"""What the controller sees of an InferenceDeployment's children, as small immutable records.

Pure: a child's body (a dict from the watch stream) in, a record out. The kopf
indexes keep these records by owning deployment, so a reconcile reads its
children from memory instead of listing them, and the records hold only what
the plan looks at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from infergate.jsontypes import JSONMap
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.deployment.groups import (
    LWS_GROUP_INDEX,
    GroupPod,
    GroupVerdict,
    group_verdicts,
    observe_group_pod,
    whole_group_digests,
)
from infergate.plan.metadata import OwnerKey, parse_time
from infergate.plan.ownership import controller_reference, controller_uid, describe_controller
from infergate.render.group import LWS_KIND
from infergate.render.labels import (
    ANNOTATION_REVISION_HASH,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    MANAGED_BY,
    workload_name,
)

# Annotations the controller writes on its children.
ANNOTATION_DESIRED_HASH = "infergate.io/desired-hash"
ANNOTATION_REVISION_SPEC = "infergate.io/revision-spec"
ANNOTATION_ROLE = "infergate.io/role"


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
    spec: JSONMap
    uid: str = ""
    kind: str = "Deployment"
    """Deployment, or LeaderWorkerSet for a multi-node revision (whose ready and available
    replicas are its whole groups, counted from its pods: see `collect`)."""

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
        """The revision's model/engine/accelerator as JSONMap, as the controller wrote it."""
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
    content: JSONMap
    """`data` of a ConfigMap, `spec` of a Service."""


@dataclass(frozen=True)
class ObservedPod:
    """An engine pod, reduced to whether (and why not) it is scheduled."""

    name: str
    revision: str | None
    unschedulable_message: str | None
    group: GroupPod | None = None
    """What a group's wholeness reads of the pod, when the LWS controller labelled it one
    of a group."""


@dataclass(frozen=True)
class Observed:
    """Every child of one InferenceDeployment, owned by it (other uids already dropped)."""

    deployments: Mapping[str, ObservedDeployment] = field(default_factory=dict)
    """By revision: the Deployment of the name the operator gives it (`<deployment>-<revision>`;
    a LeaderWorkerSet: `<deployment>-<revision>-group`), controlled by the deployment's uid.
    A look-alike under another name, however its labels, annotations and owner references
    read, is none of them."""
    config_maps: Mapping[str, ObservedObject] = field(default_factory=dict)
    """By object name."""
    services: Mapping[str, ObservedObject] = field(default_factory=dict)
    """By object name."""
    checks: Mapping[str, ObservedCheck] = field(default_factory=dict)
    """By object name: every check named `<deployment>-<revision>`, whoever made it."""
    pods: tuple[ObservedPod, ...] = ()
    extras: Mapping[tuple[str, str], ObservedObject] = field(default_factory=dict)
    """By (kind, name): the HTTPRoute and the mirror's Deployment, ServiceAccount, Role,
    RoleBinding and NetworkPolicy (its Service is among `services`)."""


def owner_key(body: JSONMap) -> OwnerKey | None:
    """The owning deployment of a child managed by infergate; None for anything else."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owner = labels.get(LABEL_DEPLOYMENT)
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or not owner:
        return None
    return OwnerKey(namespace=str(metadata.get("namespace") or ""), name=str(owner))


def holder_of(existing: JSONMap, wanted: JSONMap) -> str | None:
    """Who holds a name a create found taken: None when `existing` is the object `wanted`
    would be (same controlling owner: an earlier write of ours), else who made it, in
    words for a condition ("its controller is Deployment web", "it has no controller")."""
    owner = controller_uid(wanted)
    if owner is not None and controller_uid(existing) == owner:
        return None
    return describe_controller(controller_reference(existing))


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def observe_deployment(body: JSONMap) -> ObservedDeployment | None:
    """A revision's workload (a Deployment, or the LeaderWorkerSet of a multi-node revision);
    None for objects that are not one."""
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
        uid=str(metadata.get("uid") or ""),
        kind=str(body.get("kind") or "Deployment"),
    )


# What of an object its drift is judged on, by kind (the rest: its spec).
_CONTENT_KEYS = {"Role": ("rules",), "RoleBinding": ("roleRef", "subjects"), "ServiceAccount": ()}


def object_content(body: JSONMap) -> JSONMap:
    """The part of an object its drift is judged on: a ConfigMap's data, a Role's rules, a
    RoleBinding's roleRef and subjects, nothing of a ServiceAccount, else its spec."""
    kind = str(body.get("kind") or "")
    if kind == "ConfigMap":
        return body.get("data") or {}
    if kind in _CONTENT_KEYS:
        return {key: body[key] for key in _CONTENT_KEYS[kind] if key in body}
    return body.get("spec") or {}


def observe_object(body: JSONMap) -> ObservedObject | None:
    """A child of a deployment other than a revision Deployment or a pod; None for objects
    infergate does not manage."""
    if owner_key(body) is None:
        return None
    metadata = body.get("metadata") or {}
    kind = str(body.get("kind") or "")
    content = object_content(body)
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


def check_family(name: str) -> str:
    """The InferenceDeployment a check of this name would belong to: `<deployment>-<revision>`
    is indexed under `<deployment>`, whoever made it, so a check made under a canary
    check's name by someone else is seen (and never adopted). A gateway step's re-check,
    `<deployment>-<revision>-step<N>`, and a drift run, `<deployment>-<revision>-drift<N>`,
    belong to the same deployment."""
    return re.sub(r"-(step|drift)\d+$", "", name).rsplit("-", 1)[0]


def observe_pod(body: JSONMap) -> ObservedPod | None:
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
    grouped = LWS_GROUP_INDEX in (metadata.get("labels") or {})
    return ObservedPod(
        name=str(metadata.get("name")),
        revision=(metadata.get("labels") or {}).get(LABEL_REVISION),
        unschedulable_message=message,
        group=observe_group_pod(body) if grouped else None,
    )


def group_size(workload: ObservedDeployment) -> int:
    """Pods per group of a LeaderWorkerSet (1 for a Deployment)."""
    template = workload.spec.get("leaderWorkerTemplate") or {}
    size = template.get("size", 1)
    return size if isinstance(size, int) and size > 0 else 1


def with_whole_groups(
    workload: ObservedDeployment, pods: Sequence[ObservedPod]
) -> ObservedDeployment:
    """A LeaderWorkerSet whose ready and available replicas are its whole groups (pure).

    The LWS controller's own count trusts each group's StatefulSet; a group is ready here
    only when whole: `size` pods, each ready, none terminating, each of the workload's
    revision and full hash (`groups.group_verdicts`). A worker missing, restarting or of
    another revision makes its group not ready, so it is never judged nor served from; so
    does a leader held by its readiness gate (`gates.leader_gates`: a restarted group
    awaiting its drift run), which is no ready endpoint. A Deployment is returned as it is.
    """
    if workload.kind != LWS_KIND:
        return workload
    serving = sum(1 for verdict in workload_group_verdicts(workload, pods) if verdict.serving)
    return replace(
        workload,
        ready_replicas=serving,
        available_replicas=serving,
        updated_replicas=min(workload.updated_replicas, serving),
    )


def broken_groups(workload: ObservedDeployment, pods: Sequence[ObservedPod]) -> list[str]:
    """Why each group of a LeaderWorkerSet is not whole, in words (empty: all whole)."""
    if workload.kind != LWS_KIND:
        return []
    return [
        f"group {v.group}: {v.reason}"
        for v in workload_group_verdicts(workload, pods)
        if not v.whole
    ]


def stable_group_digests(
    workload: ObservedDeployment | None, pods: Sequence[ObservedPod]
) -> dict[str, str] | None:
    """The whole groups of a LeaderWorkerSet by index, each to a digest of its pods' names,
    uids and restart counts (`groups.whole_group_digests`); None for a Deployment or no
    workload (a one-node revision has no groups to restart)."""
    if workload is None or workload.kind != LWS_KIND:
        return None
    return whole_group_digests(_group_pods(workload, pods), **_group_shape(workload))


def workload_group_verdicts(
    workload: ObservedDeployment, pods: Sequence[ObservedPod]
) -> list[GroupVerdict]:
    """Each group of a LeaderWorkerSet's revision, whole or why not (`groups.group_verdicts`)."""
    return group_verdicts(_group_pods(workload, pods), **_group_shape(workload))


def _group_pods(workload: ObservedDeployment, pods: Sequence[ObservedPod]) -> list[GroupPod]:
    """The pods of the workload's revision that belong to a group."""
    return [p.group for p in pods if p.group is not None and p.revision == workload.revision]


def _group_shape(workload: ObservedDeployment) -> dict[str, Any]:
    """What a group of the workload must be: its size, revision and full template hash."""
    full = workload.annotations.get(ANNOTATION_REVISION_HASH, "")
    return {
        "size": group_size(workload),
        "revision": workload.revision,
        "revision_hash": full.removeprefix("sha256:"),
    }


def collect(
    owner_uid: str,
    deployments: list[ObservedDeployment],
    objects: list[ObservedObject],
    checks: list[ObservedCheck],
    pods: list[ObservedPod],
    *,
    owner_name: str,
    extras: list[ObservedObject] | None = None,
) -> Observed:
    """Children owned by `owner_uid` (a same-named predecessor's leftovers are ignored).

    A revision's Deployment (or LeaderWorkerSet) is keyed by its revision label only when it
    also has the name the operator gives that revision's workload of its kind
    (`labels.workload_name`): labels, annotations and owner
    references are anyone's to copy, a name is one object's in its namespace (and who may
    create one under it, admission says: manifests/admission/managed-objects.yaml).
    """

    def mine(uid: str | None) -> bool:
        return uid == owner_uid

    return Observed(
        deployments={
            d.revision: with_whole_groups(d, pods)
            for d in deployments
            if mine(d.owner_uid)
            and d.name == workload_name(owner_name, d.revision, group=d.kind == LWS_KIND)
        },
        config_maps={o.name: o for o in objects if o.kind == "ConfigMap" and mine(o.owner_uid)},
        services={o.name: o for o in objects if o.kind == "Service" and mine(o.owner_uid)},
        # Every check under a canary check's name, the deployment's own or not: whose it
        # is, the rollout decides (and adopts none it did not make).
        checks={c.name: c for c in checks},
        pods=tuple(pods),
        extras={(o.kind, o.name): o for o in extras or [] if mine(o.owner_uid)},
    )
