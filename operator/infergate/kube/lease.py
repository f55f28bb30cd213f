"""The operator's Lease: read it, create it, write it back guarded by its resourceVersion."""

from __future__ import annotations

from typing import Any

from infergate.errors import NotFoundError
from infergate.jsontypes import JSON
from infergate.kube.client import LEASES, KubeClient


class LeaseClient:
    """One Lease (coordination.k8s.io/v1) in the operator's namespace."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    def read(self) -> JSON | None:
        try:
            return self.client.get(LEASES, self.namespace, self.name)
        except NotFoundError:
            return None

    def create(self, spec: dict[str, Any]) -> JSON:
        """Create the Lease (409 AlreadyExists when another candidate was first)."""
        body: JSON = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        return self.client.create(LEASES, self.namespace, body)

    def write(self, current: JSON, spec: dict[str, Any]) -> JSON:
        """Replace the Lease's spec if it is still at `current`'s version (409 otherwise)."""
        body: JSON = {
            **current,
            "spec": {**(current.get("spec") or {}), **spec},
        }
        return self.client.replace(LEASES, self.namespace, self.name, body)
