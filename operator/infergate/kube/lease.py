"""The operator's Lease: read it, create it, write it back guarded by its resourceVersion.

Its requests go through a client of their own over the process's connections: never
fenced (a renewal is what keeps the write fence open) and under the election's short
timeouts (`LeaderTiming.lease_request`), so a renewal stuck behind a partition is given
up well before the renewal deadline and tried again.
"""

from __future__ import annotations

from typing import Any

from infergate.errors import NotFoundError
from infergate.jsontypes import JSON
from infergate.kube.client import LEASES, KubeClient
from infergate.plan.leadership import DEFAULT_TIMING, RequestTimeout


class LeaseClient:
    """One Lease (coordination.k8s.io/v1) in the operator's namespace."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        timeout: RequestTimeout = DEFAULT_TIMING.lease_request,
    ) -> None:
        self.client = client.sharing(timeout=timeout.pair)
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
