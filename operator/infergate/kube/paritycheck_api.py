"""The API access of ParityChecks: the runner's reads and status writes, and errors.

Errors (one small tree; `ApiException` and transport errors never leave this package):

    CheckApiError                 an API call failed; the message names verb and object
    ├── CheckApiRetriableError    409, 429, 5xx, or the API server unreachable: try again
    └── CheckApiPermanentError    any other 4xx: the request itself is wrong (or forbidden)
        └── CheckApiNotFoundError 404

Objects are read and returned as plain JSON dicts (camelCase, as the API server stores
them), never as generated client models, so what the runner and the controller see is
what `kubectl get -o json` shows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from infergate.api.base import GROUP, VERSION

JSON = dict[str, Any]
PLURAL = "paritychecks"
IDEP_PLURAL = "inferencedeployments"
MERGE_PATCH = "application/merge-patch+json"
_SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
_T = TypeVar("_T")


class CheckApiError(RuntimeError):
    """An API call failed; the message names the verb, the object and the server's answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class CheckApiRetriableError(CheckApiError):
    """Conflict, throttling, a server error or no answer: the same call may succeed later."""


class CheckApiPermanentError(CheckApiError):
    """The request was refused as it stands (invalid, forbidden, ...): retrying will not help."""


class CheckApiNotFoundError(CheckApiPermanentError):
    """The object does not exist."""


def translate(err: Exception, what: str) -> CheckApiError:
    """Our error for an exception of the Kubernetes client; `what` names verb and object."""
    if isinstance(err, ApiException):
        status = int(err.status or 0)
        detail = _message(err)
        message = f"{what}: HTTP {status}: {detail}"
        if status == 404:
            return CheckApiNotFoundError(message, status)
        if status in (409, 429) or status >= 500 or status == 0:
            return CheckApiRetriableError(message, status)
        return CheckApiPermanentError(message, status)
    return CheckApiRetriableError(f"{what}: API server unreachable: {err}")


def _message(err: ApiException) -> str:
    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        return str(err.body or err.reason)[:500]
    return str(body.get("message") or err.reason)[:2000]


def as_body(manifest: Mapping[str, Any]) -> Any:
    """A manifest as a request body: the client takes plain dicts where it types models."""
    return dict(manifest)


def call(what: str, fn: Callable[[], _T]) -> _T:
    """Run one client call, turning its failures into our errors."""
    try:
        return fn()
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
        raise translate(err, what) from err


def read_json(what: str, fn: Callable[[], Any]) -> JSON:
    """A call made with `_preload_content=False`, its body decoded as JSON."""
    response = call(what, fn)
    data: JSON = json.loads(response.data)
    return data


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """In a pod: its ServiceAccount; elsewhere: `kubeconfig`, $KUBECONFIG or ~/.kube/config."""
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ and _SA_TOKEN.exists():
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or os.environ.get("KUBECONFIG")
        )
    return client.ApiClient()


class CheckClient:
    """What one check's runner may do, in the check's namespace (see its Role)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self._core = client.CoreV1Api(api)
        self._discovery = client.DiscoveryV1Api(api)
        self._custom = client.CustomObjectsApi(api)

    # -- the check itself ---------------------------------------------------------------

    def get_check(self, name: str) -> JSON:
        return read_json(
            f"get ParityCheck {self.namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, _preload_content=False
            ),
        )

    def patch_check_status(self, name: str, status: Mapping[str, Any]) -> JSON:
        """Merge `status` into the check's status (fields not given are kept)."""
        return read_json(
            f"patch ParityCheck {self.namespace}/{name} status",
            lambda: self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, name, {"status": dict(status)},
                _content_type=MERGE_PATCH, _preload_content=False,
            ),
        )  # fmt: skip

    def replace_check_status(self, check: Mapping[str, Any]) -> JSON:
        """Write the whole status of `check`, only if its resourceVersion is still current
        (409 otherwise): the way a terminal phase is written at most once."""
        name = check["metadata"]["name"]
        return read_json(
            f"update ParityCheck {self.namespace}/{name} status",
            lambda: self._custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, name, dict(check), _preload_content=False
            ),
        )

    # -- reads of side resolution (ClusterReads) ----------------------------------------

    def inference_deployment(self, name: str) -> JSON | None:
        return self._optional(
            f"get InferenceDeployment {self.namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, IDEP_PLURAL, name, _preload_content=False
            ),
        )

    def config_map(self, name: str) -> JSON | None:
        return self._optional(
            f"get ConfigMap {self.namespace}/{name}",
            lambda: self._core.read_namespaced_config_map(
                name, self.namespace, _preload_content=False
            ),
        )

    def service(self, name: str) -> JSON | None:
        return self._optional(
            f"get Service {self.namespace}/{name}",
            lambda: self._core.read_namespaced_service(
                name, self.namespace, _preload_content=False
            ),
        )

    def endpoint_slices(self, service: str) -> list[JSON]:
        listed = read_json(
            f"list EndpointSlices of Service {self.namespace}/{service}",
            lambda: self._discovery.list_namespaced_endpoint_slice(
                self.namespace,
                label_selector=f"kubernetes.io/service-name={service}",
                _preload_content=False,
            ),
        )
        items: list[JSON] = listed.get("items") or []
        return items

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
        """Replace the report ConfigMap's content (it exists when the controller made it),
        or create it (a runner started by hand)."""
        body: JSON = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels)},
            "data": dict(data),
            "binaryData": dict(binary_data),
        }
        if owner is not None:
            body["metadata"]["ownerReferences"] = [dict(owner)]
        try:
            call(
                f"update ConfigMap {self.namespace}/{name}",
                lambda: self._core.replace_namespaced_config_map(
                    name, self.namespace, as_body(body), _preload_content=False
                ),
            )
        except CheckApiNotFoundError:
            call(
                f"create ConfigMap {self.namespace}/{name}",
                lambda: self._core.create_namespaced_config_map(
                    self.namespace, as_body(body), _preload_content=False
                ),
            )

    def _optional(self, what: str, fn: Callable[[], Any]) -> JSON | None:
        try:
            return read_json(what, fn)
        except CheckApiNotFoundError:
            return None
