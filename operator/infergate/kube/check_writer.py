"""Writes a ParityCheck plan: status (guarded by the resourceVersion it was decided from),
children, the terminal status (only if the check has not ended meanwhile), deletions.

A create that finds the name taken reads the object once: if the check does not own
it, it is someone else's, and `ForeignChildError` says so (the check then ends in
Error; the object is neither used nor deleted). A deletion names the uid it decided
on, so an object that took the name since is never removed. Children are written in
their own namespace: the check's, or the runner namespace for the runner's Job,
ServiceAccount and NetworkPolicy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.errors import (
    AlreadyExistsError,
    ConflictError,
    InfergateError,
    NotFoundError,
)
from infergate.jsontypes import JSON
from infergate.kube.client import BY_KIND, PARITY_CHECKS, KubeClient
from infergate.plan.check.observed import CheckChild, ObservedParityCheck, observe_child


class ForeignChildError(InfergateError):
    """A child's name is taken by an object the check does not own."""


@dataclass(frozen=True)
class CheckWriteResult:
    """What was actually done."""

    created: tuple[str, ...] = ()
    ended: bool = False
    """The terminal status was written (False: the check had ended meanwhile)."""


class CheckWriter:
    """Applies plans for one ParityCheck."""

    def __init__(
        self, client: KubeClient, check: ObservedParityCheck, *, runner_namespace: str
    ) -> None:
        self.client = client
        self.check = check
        self.runner_namespace = runner_namespace

    def patch_status(self, fields: Mapping[str, Any], *, guarded: bool = True) -> None:
        """Merge `fields` into status; `guarded`: only if the check is still at the version
        decided from (409 otherwise)."""
        patch: JSON = {"status": dict(fields)}
        if guarded:
            patch["metadata"] = {"resourceVersion": self.check.resource_version}
        self.client.merge_patch(
            PARITY_CHECKS, self.check.namespace, self.check.name, patch, subresource="status"
        )

    def record_runner_account(self, account: Mapping[str, Any]) -> None:
        """Name the runner's ServiceAccount (and uid) in status: the admission policy lets it,
        and nothing else but the operator, write this check's status."""
        metadata = account["metadata"]
        self.patch_status(
            {"runnerServiceAccount": {"name": metadata["name"], "uid": metadata["uid"]}},
            guarded=False,
        )

    def end(self, fields: Mapping[str, Any]) -> bool:
        """Write a terminal status unless the check changed since (False: it did)."""
        try:
            self.patch_status(fields)
        except ConflictError:
            return False
        return True

    def create(self, manifest: JSON) -> JSON | None:
        """Create a child; the object made, or None when the check already owns one."""
        resource = BY_KIND[manifest["kind"]]
        name = str(manifest["metadata"]["name"])
        namespace = str(manifest["metadata"].get("namespace") or self.check.namespace)
        try:
            return self.client.create(resource, namespace, manifest)
        except AlreadyExistsError:
            existing = observe_child(
                self.client.get(resource, namespace, name), self.runner_namespace
            )
            if existing.owner_uid != self.check.uid:
                raise ForeignChildError(
                    f"{existing.kind} {name} exists and is not owned by ParityCheck "
                    f"{self.check.name} (uid {self.check.uid}); it is neither used nor deleted: "
                    "remove it, or the check cannot run"
                ) from None
            return None

    def delete(self, children: Sequence[CheckChild]) -> None:
        delete_children(self.client, children, default_namespace=self.check.namespace)


def delete_children(
    client: KubeClient, children: Sequence[CheckChild], *, default_namespace: str = ""
) -> None:
    """Delete each child in its namespace, only while its uid is the one seen (also those
    whose check is gone: the runner's objects in the runner namespace)."""
    for child in children:
        namespace = child.namespace or default_namespace
        try:
            client.delete(BY_KIND[child.kind], namespace, child.name, uid=child.uid)
        except (NotFoundError, ConflictError):
            continue  # gone, or the name belongs to another object now
