"""Indexes of every InferenceDeployment's children, and wake-ups when they change.

Each index maps `OwnerKey(namespace, deployment name)` to small records of the
children (see `plan.deployment.observed`), kept current by kopf from the watch streams, so
a reconcile reads its children from memory instead of listing them. A change
of a child wakes its deployment's resync loop (`plan.deployment.wake.child_wake` decides): a canary
becoming available, a verdict, or a drifting edit is acted on within the debounce rather
than at the next resync.

Indexes and event handlers add no finalizer: deleting anything never waits for
the operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from infergate.api.base import GROUP, PARITY_CHECK_KIND, PARITY_CHECKS_PLURAL, VERSION
from infergate.controllers._context import wake
from infergate.controllers._watched import WATCH_LABELS
from infergate.plan.check.owned import ObservedCheck, observe_check
from infergate.plan.deployment.observed import (
    ObservedDeployment,
    ObservedObject,
    ObservedPod,
    check_family,
    observe_deployment,
    observe_object,
    observe_pod,
    owner_key,
)
from infergate.plan.deployment.wake import child_wake, delay_seconds, essence
from infergate.plan.metadata import OwnerKey
from infergate.render.labels import LABEL_COMPONENT
from infergate.render.mirror import COMPONENT_MIRROR

MANAGED = dict(WATCH_LABELS)
# The mirror's objects: kinds the deployment has no other child of.
MIRROR = {**WATCH_LABELS, LABEL_COMPONENT: COMPONENT_MIRROR}
PARITY_CHECKS = (GROUP, VERSION, PARITY_CHECKS_PLURAL)


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def owned_deployments(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedDeployment] | None:
    """Revision Deployments by owning deployment."""
    key, record = owner_key(body), observe_deployment(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
async def owned_leader_worker_sets(
    body: kopf.Body, **_: Any
) -> dict[OwnerKey, ObservedDeployment] | None:
    """Multi-node revisions' LeaderWorkerSets by owning deployment (unserved without the
    LeaderWorkerSet CRD): read with the Deployments, their groups judged from the pods."""
    key, record = owner_key(body), observe_deployment(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("", "v1", "configmaps", labels=MANAGED)
async def owned_config_maps(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedObject] | None:
    """Pinned engine ConfigMaps by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("", "v1", "services", labels=MANAGED)
async def owned_services(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedObject] | None:
    """Stable and revision Services by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index(*PARITY_CHECKS)
async def owned_checks(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedCheck]:
    """Every ParityCheck under the deployment its name would belong to (`<deployment>-<rev>`),
    whoever made it: the rollout adopts only the one it created, and says so of any other."""
    record = observe_check(body)
    namespace = str(body.get("metadata", {}).get("namespace") or "")
    return {OwnerKey(namespace, check_family(record.name)): record}


@kopf.index("gateway.networking.k8s.io", "v1", "httproutes", labels=MANAGED)
async def owned_routes(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedObject] | None:
    """The gateway mode's HTTPRoute by owning deployment (unserved without the Gateway API CRDs)."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("apps", "v1", "deployments", labels=MIRROR)
async def owned_mirror_deployments(
    body: kopf.Body, **_: Any
) -> dict[OwnerKey, ObservedObject] | None:
    """The mirror's Deployment by owning deployment (not a revision: no revision label)."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("", "v1", "serviceaccounts", labels=MIRROR)
async def owned_service_accounts(
    body: kopf.Body, **_: Any
) -> dict[OwnerKey, ObservedObject] | None:
    """The mirror's ServiceAccount by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("rbac.authorization.k8s.io", "v1", "roles", labels=MIRROR)
async def owned_roles(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedObject] | None:
    """The mirror's Role by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("rbac.authorization.k8s.io", "v1", "rolebindings", labels=MIRROR)
async def owned_role_bindings(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedObject] | None:
    """The mirror's RoleBinding by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels=MIRROR)
async def owned_network_policies(
    body: kopf.Body, **_: Any
) -> dict[OwnerKey, ObservedObject] | None:
    """The mirror's NetworkPolicy by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def owned_disruption_budgets(
    body: kopf.Body, **_: Any
) -> dict[OwnerKey, ObservedObject] | None:
    """The stable revision's PodDisruptionBudget by owning deployment."""
    key, record = owner_key(body), observe_object(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("", "v1", "pods", labels=MANAGED)
async def owned_pods(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedPod] | None:
    """Engine pods (whether the scheduler placed them) by owning deployment."""
    key, record = owner_key(body), observe_pod(body)
    return {key: record} if key is not None and record is not None else None


_OBSERVERS: dict[str, Callable[[kopf.Body], object | None]] = {
    "Deployment": observe_deployment,
    "LeaderWorkerSet": observe_deployment,
    "ConfigMap": observe_object,
    "Service": observe_object,
    "HTTPRoute": observe_object,
    "ServiceAccount": observe_object,
    "Role": observe_object,
    "RoleBinding": observe_object,
    "NetworkPolicy": observe_object,
    "PodDisruptionBudget": observe_object,
    "Pod": observe_pod,
    "ParityCheck": observe_check,
}
# What each child last looked like to the planner, so an event that changes nothing the
# planner reads (a pod's IP, our own annotation write) wakes nobody.
_LAST_SEEN: dict[tuple[str, str, str], object] = {}


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
@kopf.on.event("", "v1", "configmaps", labels=MANAGED)
@kopf.on.event("", "v1", "services", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels=MANAGED)
@kopf.on.event("gateway.networking.k8s.io", "v1", "httproutes", labels=MANAGED)
# The mirror's NetworkPolicy: one edited or deleted by hand is put back within the
# debounce, not at the next resync (until then `control` may be open to every pod).
@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=MIRROR)
# The stable revision's budget: one deleted or loosened by hand is put back within the
# debounce.
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
@kopf.on.event(*PARITY_CHECKS)
async def wake_owner(body: kopf.Body, type: str | None, **_: Any) -> None:  # noqa: A002 - kopf's name
    """Wake the owning deployment's resync loop when the child changed in a way that counts."""
    key = owner_key(body)
    if body.get("kind") == PARITY_CHECK_KIND:
        metadata = body.get("metadata") or {}
        key = OwnerKey(
            str(metadata.get("namespace") or ""), check_family(str(metadata.get("name")))
        )
    if key is None:
        return
    kind = str(body.get("kind") or "")
    ref = (kind, key.namespace, str(body.get("metadata", {}).get("name")))
    deleted = type == "DELETED"
    observer = _OBSERVERS.get(kind)
    record = essence(observer(body)) if observer is not None and not deleted else None
    decision = child_wake(_LAST_SEEN.get(ref), record, deleted=deleted)
    if deleted or record is None:
        _LAST_SEEN.pop(ref, None)
    else:
        _LAST_SEEN[ref] = record
    delay = delay_seconds(decision)
    if delay is not None:
        wake(key, delay=delay)
