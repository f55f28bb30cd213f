"""The one client of the API server: JSON in, JSON out, our own errors.

Built on the `kubernetes` package for what it does well (kubeconfig and
in-cluster credentials, token refresh, TLS) and used through its generic
request path, so every kind goes through one function that maps failures:
409/429/5xx and transport errors are retriable, other 4xx permanent.

The operator's client sends its writes (POST, PUT, PATCH, DELETE) through a
`kube.fence.WriteFence` and under a write timeout of their own, short enough that no
write outlives the leader's Lease (`plan.leadership.LeaderTiming`); reads keep the
longer timeout, since a late answer to a read changes nothing on the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from infergate import metrics
from infergate.api.base import (
    GROUP,
    INFERENCE_DEPLOYMENT_KIND,
    INFERENCE_DEPLOYMENTS_PLURAL,
    PARITY_CHECK_KIND,
    PARITY_CHECKS_PLURAL,
    VERSION,
)
from infergate.errors import (
    KubeError,
    RetriableKubeError,
    error_for_status,
    parse_retry_after,
)
from infergate.jsontypes import JSON
from infergate.kube.fence import WriteFence

# The package's config loaders carry no annotations.
k8s_config: Any = _k8s_config
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT = 30.0
"""Seconds a request may take in all, unless the client was given other timeouts."""
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A float: the whole request; a pair: (connect, read), as the `kubernetes` package takes them.
Timeout = float | tuple[float, float]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: group, version, plural."""

    group: str
    version: str
    plural: str
    kind: str

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        path = f"{base}/namespaces/{quote(namespace)}/{self.plural}"
        if name is not None:
            path += f"/{quote(name)}"
        if subresource is not None:
            path += f"/{subresource}"
        return path

    def every_namespace(self) -> str:
        """The path listing this kind across all namespaces."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/{self.plural}"


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
SERVICES = Resource("", "v1", "services", "Service")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
PODS = Resource("", "v1", "pods", "Pod")
JOBS = Resource("batch", "v1", "jobs", "Job")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
HTTP_ROUTES = Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
INFERENCE_DEPLOYMENTS = Resource(
    GROUP, VERSION, INFERENCE_DEPLOYMENTS_PLURAL, INFERENCE_DEPLOYMENT_KIND
)
PARITY_CHECKS = Resource(GROUP, VERSION, PARITY_CHECKS_PLURAL, PARITY_CHECK_KIND)
STATEFUL_SETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
LEADER_WORKER_SETS = Resource(
    "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"
)
BY_KIND: Mapping[str, Resource] = {
    r.kind: r
    for r in (
        DEPLOYMENTS,
        LEADER_WORKER_SETS,
        STATEFUL_SETS,
        SERVICES,
        CONFIG_MAPS,
        PODS,
        JOBS,
        SERVICE_ACCOUNTS,
        ROLES,
        ROLE_BINDINGS,
        HTTP_ROUTES,
        NETWORK_POLICIES,
        POD_DISRUPTION_BUDGETS,
        INFERENCE_DEPLOYMENTS,
        PARITY_CHECKS,
    )
}


_POOL_SIZE = 128
# urllib3's default would retry a 429 or 503 carrying Retry-After three times inside one
# call, sleeping in the worker thread, unseen by `infergate.retry`: answers reach the one
# retry policy instead. Only a connection that could not be opened is tried once more.
_TRANSPORT_RETRIES = urllib3.Retry(
    total=1, connect=1, read=0, status=0, redirect=0, other=0, respect_retry_after_header=False
)


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """Credentials from the pod's ServiceAccount when in a cluster, else from kubeconfig."""
    configuration = k8s_client.Configuration()
    # One connection per thread that calls the API (reconciles, their writes, Events), not
    # the default 5 per CPU: a connection beyond the pool is opened and thrown away.
    configuration.connection_pool_maxsize = _POOL_SIZE
    configuration.retries = _TRANSPORT_RETRIES
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
            return k8s_client.ApiClient(configuration)
        except ConfigException:
            pass
    k8s_config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return k8s_client.ApiClient(configuration)


@dataclass(frozen=True)
class Credentials:
    """How to reach and authenticate to the API server, as a kubeconfig resolves them
    (tokens from exec plugins and token files included): what kopf's own client needs."""

    server: str
    ca_path: str | None
    insecure: bool
    scheme: str | None
    token: str | None
    certificate_path: str | None
    private_key_path: str | None


def kubeconfig_credentials(kubeconfig: str, context: str | None = None) -> Credentials:
    """The credentials of one kubeconfig file, resolved by the `kubernetes` package."""
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    header = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
    # "<scheme> <token>", or a bare token (RFC 7235).
    scheme, _, token = str(header or "").rpartition(" ")
    return Credentials(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def kubeconfig_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig context (the current one by default), else "default"."""
    try:
        contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
    return str((chosen or {}).get("context", {}).get("namespace") or "default")


def _server_status(error: ApiException) -> tuple[str, str]:
    """The Status object's message and reason (e.g. AlreadyExists) of an error answer."""
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        return str(error.body or error.reason or ""), ""
    if not isinstance(body, dict):
        return str(error.body or error.reason or ""), ""
    return str(body.get("message") or error.reason or ""), str(body.get("reason") or "")


def convert_error(error: ApiException, verb: str, what: str) -> KubeError:
    """The error of ours an API answer stands for; the message names verb, object and cause."""
    status = int(error.status or 0)
    headers = error.headers or {}
    message, reason = _server_status(error)
    return error_for_status(
        status,
        f"{verb} {what}: {status} {message}",
        reason=reason,
        retry_after=parse_retry_after(headers.get("Retry-After")),
    )


def _successful(response: Any) -> bytes:
    """The body of a 2xx answer; an ApiException for anything else."""
    data: bytes = response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return data


class KubeClient:
    """JSON requests to the API server; every failure is one of `infergate.errors`."""

    def __init__(
        self,
        api_client: Any,
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        write_timeout: Timeout | None = None,
        fence: WriteFence | None = None,
    ) -> None:
        self._api = api_client
        self._timeout = timeout
        self._write_timeout = timeout if write_timeout is None else write_timeout
        # None: never fenced (a single operator replica, the runner, the command line).
        self._fence = fence

    @classmethod
    def from_environment(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        write_timeout: Timeout | None = None,
        fence: WriteFence | None = None,
    ) -> KubeClient:
        """A client with in-cluster credentials, or those of the kubeconfig."""
        return cls(load_api_client(kubeconfig, context), write_timeout=write_timeout, fence=fence)

    def sharing(self, *, timeout: Timeout) -> KubeClient:
        """A client over the same connections with `timeout` for every request and no fence
        (the election's own: its renewals are what keeps the fence open)."""
        return KubeClient(self._api, timeout=timeout)

    def close(self) -> None:
        self._api.close()

    def request(
        self,
        verb: str,
        path: str,
        *,
        what: str,
        resource: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One request; the decoded JSON answer (empty for an empty answer). A write is
        refused (`NotLeaderError`, nothing sent) when the client's fence is shut."""
        fence = self._fence if verb in WRITE_VERBS else None
        with fence.write(f"{verb} {what}") if fence is not None else nullcontext():
            return self._send(
                verb, path, what=what, resource=resource, body=body, query=query,
                content_type=content_type,
            )  # fmt: skip

    def _send(
        self,
        verb: str,
        path: str,
        *,
        what: str,
        resource: str,
        body: Any,
        query: list[tuple[str, str]] | None,
        content_type: str,
    ) -> JSON:
        """`request`, past the fence: a write under the write timeout, a read under the other."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        timeout = self._write_timeout if verb in WRITE_VERBS else self._timeout
        metrics.API_REQUESTS.labels(verb, resource).inc()
        started = time.monotonic()
        try:
            serialized = self._api.param_serialize(
                method=verb,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*serialized, _request_timeout=timeout)
            data = _successful(response)
        except ApiException as error:
            metrics.API_ERRORS.labels(verb, resource, str(error.status or 0)).inc()
            raise convert_error(error, verb, what) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            metrics.API_ERRORS.labels(verb, resource, "0").inc()
            raise RetriableKubeError(f"{verb} {what}: no answer: {error}") from error
        finally:
            metrics.API_REQUEST_DURATION.labels(verb, resource).observe(time.monotonic() - started)
        if not data:
            return {}
        decoded: JSON = json.loads(data)
        return decoded

    # -- verbs ---------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> JSON:
        return self.request(
            "GET",
            resource.path(namespace, name),
            what=f"{resource.kind} {namespace}/{name}",
            resource=resource.plural,
        )

    def list(
        self, resource: Resource, namespace: str | None, *, selector: str | None = None
    ) -> list[JSON]:
        """Every object of `resource` in `namespace` (None: in every namespace), in one
        answer: no `limit` is sent, so the API server never returns a partial page."""
        query = [("labelSelector", selector)] if selector else []
        answer = self.request(
            "GET",
            resource.path(namespace) if namespace is not None else resource.every_namespace(),
            what=f"{resource.plural} in {namespace or 'every namespace'}",
            resource=resource.plural,
            query=query,
        )
        items: list[JSON] = answer.get("items") or []
        return items

    def whoami(self) -> str:
        """The user name the API server authenticated this client as (SelfSubjectReview,
        which every authenticated user may create)."""
        review = self.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            what="SelfSubjectReview",
            resource="selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        return str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "")

    def create(self, resource: Resource, namespace: str, body: JSON) -> JSON:
        return self.request(
            "POST",
            resource.path(namespace),
            what=f"{resource.kind} {namespace}/"
            + str(body["metadata"].get("name") or body["metadata"].get("generateName", "")),
            resource=resource.plural,
            body=body,
        )

    def merge_patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: JSON,
        *,
        subresource: str | None = None,
    ) -> JSON:
        return self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            what=f"{resource.kind} {namespace}/{name}" + (f" {subresource}" if subresource else ""),
            resource=resource.plural,
            body=patch,
            content_type=MERGE_PATCH,
        )

    def strategic_patch(
        self, resource: Resource, namespace: str, name: str, patch: JSON, *, subresource: str
    ) -> JSON:
        """A strategic merge patch of a built-in object's subresource: lists with a merge key
        (a pod's status.conditions, by type) merge item by item instead of being replaced."""
        return self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            what=f"{resource.kind} {namespace}/{name} {subresource}",
            resource=resource.plural,
            body=patch,
            content_type=STRATEGIC_MERGE_PATCH,
        )

    def replace(self, resource: Resource, namespace: str, name: str, body: JSON) -> JSON:
        """PUT the object; body carries metadata.resourceVersion (409 if stale)."""
        return self.request(
            "PUT",
            resource.path(namespace, name),
            what=f"{resource.kind} {namespace}/{name}",
            resource=resource.plural,
            body=body,
        )

    def replace_status(self, resource: Resource, namespace: str, name: str, body: JSON) -> JSON:
        """PUT the status subresource; body carries metadata.resourceVersion (409 if stale)."""
        return self.request(
            "PUT",
            resource.path(namespace, name, "status"),
            what=f"{resource.kind} {namespace}/{name} status",
            resource=resource.plural,
            body=body,
        )

    def delete(
        self, resource: Resource, namespace: str, name: str, *, uid: str | None = None
    ) -> None:
        """Delete in the background (dependents go through garbage collection); with `uid`,
        only that object (409 if the name now belongs to another)."""
        body: JSON = {"propagationPolicy": "Background"}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        self.request(
            "DELETE",
            resource.path(namespace, name),
            what=f"{resource.kind} {namespace}/{name}",
            resource=resource.plural,
            body=body,
        )

    def watch(
        self, resource: Resource, namespace: str, *, timeout_seconds: int = 60
    ) -> Iterator[JSON]:
        """Watch events ({type, object}) of a kind in a namespace until the server ends it."""
        query = [("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        what = f"watch of {resource.plural} in {namespace}"
        try:
            serialized = self._api.param_serialize(
                method="GET",
                resource_path=resource.path(namespace),
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*serialized, _request_timeout=(10, timeout_seconds + 30))
            if not 200 <= response.status < 300:
                _successful(response)
            pending = b""
            for chunk in response.response.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        event: JSON = json.loads(line)
                        yield event
        except ApiException as error:
            metrics.API_ERRORS.labels("WATCH", resource.plural, str(error.status or 0)).inc()
            raise convert_error(error, "WATCH", what) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            metrics.API_ERRORS.labels("WATCH", resource.plural, "0").inc()
            raise RetriableKubeError(f"{what}: broken: {error}") from error
