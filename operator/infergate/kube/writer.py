"""Writes a reconcile plan: status first (the decision), then children, then annotations.

The status carries the rollout's truth (stable revision, rejected revisions),
so it is committed first, guarded by the resourceVersion the plan was made
from: if the object changed meanwhile, nothing else is written and the
reconcile runs again on fresh state. Child writes are idempotent (AlreadyExists
and NotFound count as done), so a write repeated after a restart is harmless.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.errors import AlreadyExistsError, NotFoundError
from infergate.jsontypes import JSON
from infergate.kube.client import (
    BY_KIND,
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    KubeClient,
)
from infergate.plan.reconcile import ReconcilePlan, with_check_uids
from infergate.plan.sync import Create, Delete, Recreate, Update, Write

log = logging.getLogger(__name__)


@dataclass
class WriteResult:
    """What was actually done (for Events: only what happened is reported)."""

    status_written: bool = False
    created: list[str] = field(default_factory=list)
    created_checks: dict[str, str] = field(default_factory=dict)
    """Name -> uid of each ParityCheck created."""
    reverted: list[str] = field(default_factory=list)


def _patch_body(manifest: JSON, resource_version: str) -> JSON:
    metadata = manifest["metadata"]
    body: JSON = {
        "metadata": {
            "labels": metadata.get("labels", {}),
            "annotations": metadata.get("annotations", {}),
            "ownerReferences": metadata.get("ownerReferences", []),
            "resourceVersion": resource_version,
        }
    }
    # A Role's rules and a RoleBinding's subjects live beside metadata, not under spec.
    for key in ("spec", "rules", "subjects"):
        if key in manifest:
            body[key] = manifest[key]
    return body


class PlanWriter:
    """Applies `ReconcilePlan`s for one InferenceDeployment."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    def write(self, plan: ReconcilePlan, body: JSON) -> WriteResult:
        """Status, children, checks (and their uids, into status), then the consumed control
        annotations."""
        result = WriteResult()
        current = body
        if plan.status_changed:
            current = self.write_status(plan.status, body)
            result.status_written = True
        for write in plan.sync.writes:
            self._write_child(write, result)
        for name in plan.delete_checks:
            self._delete(PARITY_CHECKS.kind, name)
        for manifest in plan.create_checks:
            created = self._create(PARITY_CHECKS.kind, manifest)
            if created is not None:
                result.created_checks[manifest["metadata"]["name"]] = created["metadata"]["uid"]
        if result.created_checks:
            # Bind the attempt to the objects just made; a crash before this write leaves
            # them unbound, and the next reconcile replaces them.
            self.write_status(with_check_uids(plan.status, result.created_checks), current)
        if plan.remove_annotations:
            self.client.merge_patch(
                INFERENCE_DEPLOYMENTS,
                self.namespace,
                self.name,
                {"metadata": {"annotations": dict.fromkeys(plan.remove_annotations)}},
            )
        return result

    def write_status(self, status: InferenceDeploymentStatus, body: JSON) -> JSON:
        """Replace the status, guarded by the resourceVersion of `body` (409 when stale);
        the object as written."""
        replacement: dict[str, Any] = {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": body["metadata"]["resourceVersion"],
            },
            "spec": body.get("spec", {}),
            "status": status.to_kube(),
        }
        return self.client.replace_status(
            INFERENCE_DEPLOYMENTS, self.namespace, self.name, replacement
        )

    def _write_child(self, write: Write, result: WriteResult) -> None:
        if isinstance(write, Create):
            if self._create(write.ref.kind, write.manifest) is not None:
                result.created.append(str(write.ref))
        elif isinstance(write, Update):
            self.client.merge_patch(
                BY_KIND[write.ref.kind],
                self.namespace,
                write.ref.name,
                _patch_body(write.manifest, write.resource_version),
            )
            if write.drift:
                result.reverted.append(str(write.ref))
        elif isinstance(write, Recreate):
            self._delete(write.ref.kind, write.ref.name)
            self._create(write.ref.kind, write.manifest)
            result.reverted.append(str(write.ref))
        elif isinstance(write, Delete):
            self._delete(write.ref.kind, write.ref.name)

    def _create(self, kind: str, manifest: JSON) -> JSON | None:
        """Create; None when the name is taken (a repeated write after a stale read, or
        someone else's object: the next reconcile sees which from the indexes)."""
        try:
            return self.client.create(BY_KIND[kind], self.namespace, manifest)
        except AlreadyExistsError:
            log.debug("%s %s already exists", kind, manifest["metadata"]["name"])
            return None

    def _delete(self, kind: str, name: str) -> None:
        try:
            self.client.delete(BY_KIND[kind], self.namespace, name)
        except NotFoundError:
            log.debug("%s %s already gone", kind, name)
