"""API access of ParityChecks: the runner's reads and status writes (over `KubeClient`).

Objects are plain JSON dicts (camelCase, as the API server stores them), so what the
runner and the controller see is what `kubectl get -o json` shows; failures are the
errors of `infergate.errors` (retriable: 409/429/5xx/no answer; permanent: other 4xx).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from infergate.errors import NotFoundError
from infergate.jsontypes import JSON
from infergate.kube.client import (
    CONFIG_MAPS,
    ENDPOINT_SLICES,
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    PODS,
    REPLICA_SETS,
    SERVICES,
    STATEFUL_SETS,
    KubeClient,
    Resource,
)
from infergate.plan.phases import is_check_terminal
from infergate.retry import retry_call

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
REPORT_KEYS = ("report.html", "report.html.gz", "result.json", "result.json.gz")


class CheckClient:
    """What one check's runner may do, in the check's namespace (see its Role)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    # -- the check itself ---------------------------------------------------------------

    def get_check(self, name: str) -> JSON:
        return self.kube.get(PARITY_CHECKS, self.namespace, name)

    def patch_check_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> JSON:
        """Merge `status` into the check's status (fields not given are kept). With
        `resource_version`, only if the check is still at that version (409 otherwise), so
        a write based on what was read never lands on a verdict written meanwhile."""
        patch: JSON = {"status": dict(status)}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        return self.kube.merge_patch(
            PARITY_CHECKS, self.namespace, name, patch, subresource="status"
        )

    def replace_check_status(self, check: Mapping[str, Any]) -> JSON:
        """Write the whole status of `check`, only if its resourceVersion is still current
        (409 otherwise): the way a terminal phase is written at most once."""
        return self.kube.replace_status(
            PARITY_CHECKS, self.namespace, check["metadata"]["name"], dict(check)
        )

    # -- reads of side resolution (ClusterReads) ----------------------------------------

    def inference_deployment(self, name: str) -> JSON | None:
        return self._optional(INFERENCE_DEPLOYMENTS, name)

    def inference_deployments(self) -> list[JSON]:
        """Every InferenceDeployment of the namespace: golden-record retention tells the
        deleted ones from those that are still there (the Role grants `list` only under
        `retention.whenDeleted: Delete`)."""
        return self.kube.list(INFERENCE_DEPLOYMENTS, self.namespace)

    def config_map(self, name: str) -> JSON | None:
        return self._optional(CONFIG_MAPS, name)

    def service(self, name: str) -> JSON | None:
        return self._optional(SERVICES, name)

    def endpoint_slices(self, service: str) -> list[JSON]:
        return self.kube.list(
            ENDPOINT_SLICES, self.namespace, selector=f"{SERVICE_NAME_LABEL}={service}"
        )

    def pod(self, name: str) -> JSON | None:
        return self._optional(PODS, name)

    def replica_set(self, name: str) -> JSON | None:
        return self._optional(REPLICA_SETS, name)

    def stateful_set(self, name: str) -> JSON | None:
        return self._optional(STATEFUL_SETS, name)

    # -- the report ---------------------------------------------------------------------

    def write_report(
        self,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, str],
        labels: Mapping[str, str],
        owner: Mapping[str, Any] | None,
    ) -> None:
        """Set the report ConfigMap's content (the controller made it empty; the runner may
        only patch it), or create it (a runner started by hand). Keys not written now are
        removed, so a report stored compressed never keeps a stale plain copy."""
        stale = dict.fromkeys(REPORT_KEYS)
        patch: JSON = {
            "data": {**{k: None for k in stale if k not in data}, **data},
            "binaryData": {**{k: None for k in stale if k not in binary_data}, **binary_data},
        }
        try:
            self.kube.merge_patch(CONFIG_MAPS, self.namespace, name, patch)
        except NotFoundError:
            body: JSON = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels)},
                "data": dict(data),
                "binaryData": dict(binary_data),
            }
            if owner is not None:
                body["metadata"]["ownerReferences"] = [dict(owner)]
            self.kube.create(CONFIG_MAPS, self.namespace, body)

    def _optional(self, resource: Resource, name: str) -> JSON | None:
        try:
            return self.kube.get(resource, self.namespace, name)
        except NotFoundError:
            return None


class StatusApi(Protocol):
    def get_check(self, name: str) -> JSON: ...

    def replace_check_status(self, check: Mapping[str, Any]) -> JSON: ...


def write_terminal_status(api: StatusApi, name: str, fields: Mapping[str, Any]) -> bool:
    """Write a terminal status unless the check already has one; False if it had.

    The write is a status update carrying the resourceVersion just read, so of the
    runner and the controller racing to end a check, exactly one wins and the other
    sees the phase it wrote. A conflict reads again, under the one retry policy.
    """

    def attempt() -> bool:
        current = api.get_check(name)
        status = current.get("status") or {}
        if is_check_terminal(status.get("phase")):
            return False
        api.replace_check_status({**current, "status": {**status, **fields}})
        return True

    return retry_call(attempt)
