"""API access of the ParityCheck controller: the objects a check starts, and their reads.

Create is idempotent (an object that already exists is left as it is: children are
named after their check, so an existing one is ours), delete tolerates absence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infergate.errors import ConflictError, NotFoundError
from infergate.kube.client import (
    CONFIG_MAPS,
    DEPLOYMENTS,
    PARITY_CHECKS,
    PODS,
    SERVICES,
    Resource,
)
from infergate.kube.paritycheck_api import CheckClient
from infergate.runner.naming import LABEL_ROLE, ROLE_PROBE

JSON = dict[str, Any]
JOBS = Resource("batch", "v1", "jobs", "Job")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CHILD_KINDS: Mapping[str, Resource] = {
    r.kind: r for r in (PODS, SERVICES, CONFIG_MAPS, JOBS, SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS)
}


class CheckChildren(CheckClient):
    """The controller's view of one namespace: what the runner reads, plus the children."""

    def deployment(self, name: str) -> JSON | None:
        return self._optional(DEPLOYMENTS, name)

    def job(self, name: str) -> JSON | None:
        return self._optional(JOBS, name)

    def pod(self, name: str) -> JSON | None:
        return self._optional(PODS, name)

    def pods(self, selector: str) -> list[JSON]:
        return self.kube.list(PODS, self.namespace, selector=selector)

    def list_checks(self) -> list[JSON]:
        return self.kube.list(PARITY_CHECKS, self.namespace)

    def children_exist(self, selector: str) -> bool:
        """Whether a probe (Pod, Service) or runner RBAC of a check is left; a finished
        runner Job (and its pod) stays for its log and does not count."""
        for resource in (PODS, SERVICES, SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS):
            if resource is PODS:
                selector_here = f"{selector},{LABEL_ROLE}={ROLE_PROBE}"
            else:
                selector_here = selector
            answer = self.kube.request(
                "GET",
                resource.path(self.namespace),
                what=f"{resource.plural} in {self.namespace}",
                resource=resource.plural,
                query=[("labelSelector", selector_here), ("limit", "1")],
            )
            if answer.get("items"):
                return True
        return False

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create `manifest` unless an object of its kind and name exists; True if created."""
        try:
            self.kube.create(CHILD_KINDS[manifest["kind"]], self.namespace, dict(manifest))
        except ConflictError:
            return False
        return True

    def delete(self, kind: str, name: str) -> bool:
        """Delete one child (its dependents in the background); True if it existed."""
        try:
            self.kube.delete(CHILD_KINDS[kind], self.namespace, name)
        except NotFoundError:
            return False
        return True
