"""From desired and observed children to the writes that make them agree.

Pure. Each desired object carries `infergate.io/desired-hash`, a hash of the
object as last rendered. When the observed copy has the same hash, the
controller wrote it and any difference is somebody's edit: drift, reverted and
reported. When the hash differs, the controller's own intent moved (a new size,
a placement change, a new role) and the write is routine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from infergate.plan.deployment.field_drift import (
    FieldDrift,
    config_map_drift,
    deployment_drift,
    field_drift,
    service_drift,
)
from infergate.plan.deployment.observed import (
    ANNOTATION_DESIRED_HASH,
    Observed,
    ObservedObject,
    object_content,
)
from infergate.render.objects import RevisionObjects


@dataclass(frozen=True)
class ObjectRef:
    """Kind and name of a child, in the deployment's namespace."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Create:
    """Create the object (an AlreadyExists answer counts as done)."""

    manifest: dict[str, Any]

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.manifest["kind"], self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class Update:
    """Merge-patch metadata and spec back to the desired object, guarded by resourceVersion."""

    manifest: dict[str, Any]
    resource_version: str
    drift: tuple[FieldDrift, ...] = ()

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.manifest["kind"], self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class Recreate:
    """Delete and create again (an immutable ConfigMap whose data was replaced)."""

    manifest: dict[str, Any]
    drift: tuple[FieldDrift, ...] = ()

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.manifest["kind"], self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class Delete:
    """Delete the object (NotFound counts as done)."""

    ref: ObjectRef


Write = Create | Update | Recreate | Delete


@dataclass(frozen=True)
class SyncPlan:
    """Writes in order (ConfigMaps first, deletions last) and the drift they revert."""

    writes: list[Write] = field(default_factory=list)

    @property
    def drift(self) -> list[tuple[ObjectRef, tuple[FieldDrift, ...]]]:
        """Each object edited by someone else, with the fields reverted."""
        return [
            (w.ref, w.drift) for w in self.writes if isinstance(w, Update | Recreate) and w.drift
        ]


def _hash(annotations: Mapping[str, str]) -> str | None:
    return annotations.get(ANNOTATION_DESIRED_HASH)


def _sync_config_map(desired: dict[str, Any], observed: ObservedObject | None) -> Write | None:
    if observed is None:
        return Create(desired)
    drift = config_map_drift(desired, observed.content)
    if drift:
        return Recreate(desired, tuple(drift))
    if _hash(observed.annotations) != _hash(desired["metadata"]["annotations"]):
        return Update(_metadata_only(desired), observed.resource_version)
    return None


def _metadata_only(manifest: dict[str, Any]) -> dict[str, Any]:
    # An immutable ConfigMap takes metadata changes only.
    return {key: manifest[key] for key in ("apiVersion", "kind", "metadata")}


def _sync_spec(
    desired: dict[str, Any],
    observed_hash: str | None,
    resource_version: str,
    drift: list[FieldDrift],
) -> Write | None:
    ours = observed_hash == _hash(desired["metadata"]["annotations"])
    if ours and not drift:
        return None
    return Update(desired, resource_version, tuple(drift) if ours else ())


def sync_children(
    revisions: list[RevisionObjects],
    observed: Observed,
    *,
    stable_service: dict[str, Any] | None,
    extras: Sequence[dict[str, Any]] = (),
) -> SyncPlan:
    """Writes that bring every kept revision's objects (the stable Service, the HTTPRoute and
    the mirror) to what they should be, and remove every other revision's objects and
    every extra no longer wanted."""
    writes: list[Write] = []
    kept_names: set[str] = set()
    for objects in revisions:
        name = objects.config_map["metadata"]["name"]
        kept_names.add(name)
        write = _sync_config_map(objects.config_map, observed.config_maps.get(name))
        if write is not None:
            writes.append(write)
    for objects in revisions:
        deployment = observed.deployments.get(objects.revision)
        if deployment is None:
            writes.append(Create(objects.deployment))
        else:
            write = _sync_spec(
                objects.deployment,
                _hash(deployment.annotations),
                deployment.resource_version,
                deployment_drift(objects.deployment, deployment.spec),
            )
            if write is not None:
                writes.append(write)
        writes += _sync_service(objects.service, observed)
    if stable_service is not None:
        kept_names.add(stable_service["metadata"]["name"])
        writes += _sync_service(stable_service, observed)
    wanted: set[tuple[str, str]] = set()
    for manifest in extras:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind == "Service":
            kept_names.add(name)
            writes += _sync_service(manifest, observed)
            continue
        wanted.add((kind, name))
        writes += _sync_extra(manifest, observed.extras.get((kind, name)))
    for kind, name in observed.extras:
        if (kind, name) not in wanted:
            writes.append(Delete(ObjectRef(kind, name)))
    kept_revisions = {objects.revision for objects in revisions}
    for deployment in observed.deployments.values():
        if deployment.revision not in kept_revisions:
            writes.append(Delete(ObjectRef(deployment.kind, deployment.name)))
    for kind, objects_by_name in (
        ("Service", observed.services),
        ("ConfigMap", observed.config_maps),
    ):
        for name in objects_by_name:
            if name not in kept_names:
                writes.append(Delete(ObjectRef(kind, name)))
    return SyncPlan(writes)


def _sync_service(desired: dict[str, Any], observed: Observed) -> list[Write]:
    name = desired["metadata"]["name"]
    current = observed.services.get(name)
    if current is None:
        return [Create(desired)]
    write = _sync_spec(
        desired,
        _hash(current.annotations),
        current.resource_version,
        service_drift(desired, current.content),
    )
    if isinstance(write, Update):
        # A merge patch keeps selector keys it does not name: drop the ones no longer wanted
        # (the stable Service's revision key when traffic moves from dark to replicas).
        selector = desired["spec"].get("selector") or {}
        stale = {k: None for k in current.content.get("selector") or {} if k not in selector}
        if stale:
            manifest = copy.deepcopy(desired)
            manifest["spec"]["selector"] = {**selector, **stale}
            write = replace(write, manifest=manifest)
    return [write] if write is not None else []


def _sync_extra(desired: dict[str, Any], current: ObservedObject | None) -> list[Write]:
    """The HTTPRoute or a mirror object: created, or patched back to what it should be."""
    if current is None:
        return [Create(desired)]
    drift = field_drift(dict(object_content(desired)), current.content, desired["kind"])
    write = _sync_spec(desired, _hash(current.annotations), current.resource_version, drift)
    return [write] if write is not None else []
