"""Indexes of every InferenceDeployment's children, and wake-ups when they change.

Each index maps `OwnerKey(namespace, deployment name)` to small records of the
children (see `plan.observed`), kept current by kopf from the watch streams, so
a reconcile reads its children from memory instead of listing them. A change
of a child wakes its deployment's resync loop: a canary becoming available, a
verdict, or a drifting edit is acted on at once rather than at the next resync.

Indexes and event handlers add no finalizer: deleting anything never waits for
the operator.
"""

from __future__ import annotations

from typing import Any

import kopf

from infergate.controllers._context import wake
from infergate.plan.observed import (
    ObservedCheck,
    ObservedDeployment,
    ObservedObject,
    ObservedPod,
    OwnerKey,
    observe_check,
    observe_deployment,
    observe_object,
    observe_pod,
    owner_key,
)
from infergate.render.labels import LABEL_MANAGED_BY, MANAGED_BY

MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
PARITY_CHECKS = ("infergate.io", "v1alpha1", "paritychecks")


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def owned_deployments(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedDeployment] | None:
    """Revision Deployments by owning deployment."""
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


@kopf.index(*PARITY_CHECKS, labels=MANAGED)
async def owned_checks(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedCheck] | None:
    """ParityChecks of canaries by owning deployment."""
    key, record = owner_key(body), observe_check(body)
    return {key: record} if key is not None and record is not None else None


@kopf.index("", "v1", "pods", labels=MANAGED)
async def owned_pods(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedPod] | None:
    """Engine pods (whether the scheduler placed them) by owning deployment."""
    key, record = owner_key(body), observe_pod(body)
    return {key: record} if key is not None and record is not None else None


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("", "v1", "configmaps", labels=MANAGED)
@kopf.on.event("", "v1", "services", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels=MANAGED)
@kopf.on.event(*PARITY_CHECKS, labels=MANAGED)
async def wake_owner(body: kopf.Body, **_: Any) -> None:
    """Wake the owning deployment's resync loop."""
    key = owner_key(body)
    if key is not None:
        wake(key)
