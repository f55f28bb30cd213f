"""API access of the ParityCheck controller: the objects a check starts, and their reads.

Create is idempotent (an object that already exists is left as it is: children are
named after their check, so an existing one is ours), delete tolerates absence, and
every failure leaves as one of the errors of `paritycheck_api`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from infergate.api.base import GROUP, VERSION
from infergate.kube.paritycheck_api import (
    PLURAL,
    CheckApiError,
    CheckApiNotFoundError,
    CheckClient,
    as_body,
    call,
    read_json,
)

JSON = dict[str, Any]


class CheckChildren(CheckClient):
    """The controller's view of one namespace: everything the runner reads, plus children."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self._apps = client.AppsV1Api(api)
        self._batch = client.BatchV1Api(api)
        self._rbac = client.RbacAuthorizationV1Api(api)
        self._pods = client.CoreV1Api(api)

    # -- reads ----------------------------------------------------------------------------

    def deployment(self, name: str) -> JSON | None:
        return self._maybe(
            f"get Deployment {self.namespace}/{name}",
            lambda: self._apps.read_namespaced_deployment(
                name, self.namespace, _preload_content=False
            ),
        )

    def job(self, name: str) -> JSON | None:
        return self._maybe(
            f"get Job {self.namespace}/{name}",
            lambda: self._batch.read_namespaced_job(name, self.namespace, _preload_content=False),
        )

    def pod(self, name: str) -> JSON | None:
        return self._maybe(
            f"get Pod {self.namespace}/{name}",
            lambda: self._pods.read_namespaced_pod(name, self.namespace, _preload_content=False),
        )

    def pods(self, selector: str) -> list[JSON]:
        listed = read_json(
            f"list Pods {self.namespace} ({selector})",
            lambda: self._pods.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            ),
        )
        return list(listed.get("items") or [])

    def checks(self) -> list[JSON]:
        listed = read_json(
            f"list ParityChecks {self.namespace}",
            lambda: self._custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, _preload_content=False
            ),
        )
        return list(listed.get("items") or [])

    def children_exist(self, selector: str) -> bool:
        """Whether any Pod, Service, Job, ServiceAccount, Role or RoleBinding of a check is left."""
        listers = (
            lambda: self._pods.list_namespaced_pod(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
            lambda: self._pods.list_namespaced_service(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
            lambda: self._batch.list_namespaced_job(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
            lambda: self._pods.list_namespaced_service_account(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
            lambda: self._rbac.list_namespaced_role(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
            lambda: self._rbac.list_namespaced_role_binding(
                self.namespace, label_selector=selector, limit=1, _preload_content=False
            ),
        )
        return any(
            read_json(f"list children {self.namespace} ({selector})", lister).get("items")
            for lister in listers
        )

    # -- writes ---------------------------------------------------------------------------

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create `manifest` unless an object of its kind and name exists; True if created."""
        kind = manifest["kind"]
        name = manifest["metadata"]["name"]
        creators: dict[str, Callable[..., Any]] = {
            "Pod": self._pods.create_namespaced_pod,
            "Service": self._pods.create_namespaced_service,
            "ConfigMap": self._pods.create_namespaced_config_map,
            "ServiceAccount": self._pods.create_namespaced_service_account,
            "Role": self._rbac.create_namespaced_role,
            "RoleBinding": self._rbac.create_namespaced_role_binding,
            "Job": self._batch.create_namespaced_job,
        }
        create = creators[kind]
        try:
            call(
                f"create {kind} {self.namespace}/{name}",
                lambda: create(self.namespace, as_body(manifest), _preload_content=False),
            )
        except CheckApiError as err:
            if err.status == 409:
                return False
            raise
        return True

    def delete(self, kind: str, name: str) -> bool:
        """Delete one child (its dependents in the background); True if it existed."""
        body = as_body({"propagationPolicy": "Background"})
        deleters: dict[str, Callable[..., Any]] = {
            "Pod": self._pods.delete_namespaced_pod,
            "Service": self._pods.delete_namespaced_service,
            "ServiceAccount": self._pods.delete_namespaced_service_account,
            "Role": self._rbac.delete_namespaced_role,
            "RoleBinding": self._rbac.delete_namespaced_role_binding,
            "Job": self._batch.delete_namespaced_job,
        }
        delete = deleters[kind]
        try:
            call(
                f"delete {kind} {self.namespace}/{name}",
                lambda: delete(name, self.namespace, body=body, _preload_content=False),
            )
        except CheckApiNotFoundError:
            return False
        return True

    def _maybe(self, what: str, fn: Callable[[], Any]) -> JSON | None:
        try:
            return read_json(what, fn)
        except CheckApiNotFoundError:
            return None
