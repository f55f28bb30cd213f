"""Where a Service answers: ready endpoints read from its EndpointSlices (pure).

ClusterIPs are never dialled (there may be no kube-proxy, and a runner outside the
cluster network could not reach them anyway): the runner reads the Service's
EndpointSlices and calls a ready endpoint directly. Slices of every address type
count: IPv4 and IPv6 as published by the EndpointSlice controller, and FQDN, as
published for the local executor, whose loopback pod IPs the API server refuses in
IPv4 slices (there the FQDN is the dotted IP itself).

Only slices made by whoever publishes endpoints for the cluster are read
(`trusted_slices`): managed by the EndpointSlice controller or by the local executor
(label `endpointslice.kubernetes.io/managed-by`) and controlled by the Service itself
(its uid). Anyone who may create EndpointSlices in the namespace could otherwise add one
to a revision's Service that points at any pod, say one serving the stable model under
the canary's name. Each of those two publishers rewrites or deletes every slice that
carries its label and that it did not want, so a forgery that copies the label lives
until its next sync at most (and admission refuses it outright:
manifests/admission/managed-objects.yaml).

A trusted slice still lists every pod the Service selects, and labels are anyone's to
set: which of its endpoints the runner may call is decided from the pod each one names
(`targetRef`, whose address it must be: `not_the_pods_address`) in `runner.side_pods`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infergate.jsontypes import JSONMap
from infergate.plan.ownership import Controller, describe_object, not_controlled_by

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
ENDPOINTSLICE_CONTROLLER = "endpointslice-controller.k8s.io"
LOCAL_EXECUTOR = "local-executor.infergate.io"
"""The managed-by value of the slices the local executor publishes for its loopback pods.
The product decides whom it trusts, so the value lives here; the development cluster's
executor (`infergate_dev.localcluster.executor`) labels its slices with it."""
TRUSTED_MANAGERS = (ENDPOINTSLICE_CONTROLLER, LOCAL_EXECUTOR)
"""Who may publish the endpoints the runner calls: Kubernetes' EndpointSlice controller,
and the local executor for its loopback pods."""
ADDRESS_TYPES = ("IPv4", "IPv6", "FQDN")


class EndpointResolutionError(RuntimeError):
    """A Service has no usable endpoint; the message names the Service and what is missing."""


@dataclass(frozen=True)
class ResolvedEndpoint:
    """One ready endpoint of a Service, on the requested port."""

    address: str
    port: int
    address_type: str
    pod: str | None
    pod_uid: str | None = None
    """The uid its slice's targetRef names (None: it names no pod)."""

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if self.address_type == "IPv6" else self.address
        return f"http://{host}:{self.port}"


def service_port_name(service: JSONMap, port: str | int) -> str:
    """The name of the Service port given by name or number ("" for an unnamed single port)."""
    ports = (service.get("spec") or {}).get("ports") or []
    for declared in ports:
        name = str(declared.get("name") or "")
        if (isinstance(port, str) and not port.isdigit() and name == port) or (
            str(declared.get("port")) == str(port)
        ):
            return name
    listed = ", ".join(f"{p.get('name') or '(unnamed)'}={p.get('port')}" for p in ports)
    raise EndpointResolutionError(
        f"Service {_name(service)}: no port {port!r}; it declares {listed or 'no ports'}"
    )


def untrusted_slice(service: JSONMap, endpoint_slice: JSONMap) -> str | None:
    """None for a slice the Service's endpoint publisher made; else why it is not trusted."""
    meta = service.get("metadata") or {}
    labels = (endpoint_slice.get("metadata") or {}).get("labels") or {}
    manager = labels.get(MANAGED_BY_LABEL)
    if manager not in TRUSTED_MANAGERS:
        return (
            f"{describe_object(endpoint_slice, 'EndpointSlice')} is managed by "
            f"{manager!r} ({MANAGED_BY_LABEL}); only {' and '.join(TRUSTED_MANAGERS)} are trusted"
        )
    owner = Controller("Service", str(meta.get("name")), str(meta.get("uid")))
    return not_controlled_by(endpoint_slice, owner, kind="EndpointSlice")


def trusted_slices(service: JSONMap, slices: Iterable[JSONMap]) -> tuple[list[JSONMap], list[str]]:
    """The slices of `service` to read, and why each other one is ignored."""
    trusted: list[JSONMap] = []
    ignored: list[str] = []
    for endpoint_slice in slices:
        why = untrusted_slice(service, endpoint_slice)
        if why is None:
            trusted.append(endpoint_slice)
        else:
            ignored.append(why)
    return trusted, ignored


def ready_endpoints(
    service: JSONMap, slices: Iterable[JSONMap], port: str | int = "http", *, ready: bool = True
) -> list[ResolvedEndpoint]:
    """Every ready, non-terminating endpoint of `service` on `port`, sorted by address
    (`ready` False: every not-ready, non-terminating one instead).

    An endpoint whose `ready` condition is absent counts as ready, as the API
    documents ("unknown state as ready"); `terminating` ones never do.
    """
    wanted = service_port_name(service, port)
    service_name = (service.get("metadata") or {}).get("name")
    found: dict[tuple[str, int], ResolvedEndpoint] = {}
    for endpoint_slice in slices:
        labels = (endpoint_slice.get("metadata") or {}).get("labels") or {}
        if labels.get(SERVICE_NAME_LABEL) != service_name:
            continue
        address_type = str(endpoint_slice.get("addressType") or "")
        if address_type not in ADDRESS_TYPES:
            continue
        number = _slice_port(endpoint_slice, wanted)
        if number is None:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            if (conditions.get("ready") is not False) != ready:
                continue
            if conditions.get("terminating") is True:
                continue
            addresses = endpoint.get("addresses") or []
            if not addresses:
                continue
            target = endpoint.get("targetRef") or {}
            is_pod = target.get("kind") == "Pod"
            pod = target.get("name") if is_pod else None
            pod_uid = str(target.get("uid") or "") if is_pod else ""
            address = str(addresses[0])
            found[(address, number)] = ResolvedEndpoint(
                address, number, address_type, pod, pod_uid or None
            )
    return [found[key] for key in sorted(found)]


def not_the_pods_address(endpoint: ResolvedEndpoint, pod: JSONMap) -> str | None:
    """None when `endpoint` is an address of `pod`, the very pod its targetRef names (name
    and uid); otherwise why not. A trusted publisher writes only such endpoints, so an
    address that is not its pod's says the slice was forged."""
    meta = pod.get("metadata") or {}
    if (meta.get("name"), str(meta.get("uid") or "")) != (endpoint.pod, endpoint.pod_uid or ""):
        return (
            f"endpoint {endpoint.address} names Pod {endpoint.pod} (uid {endpoint.pod_uid}), "
            f"not Pod {meta.get('name')} (uid {meta.get('uid')})"
        )
    status = pod.get("status") or {}
    ips = {str(ip.get("ip")) for ip in status.get("podIPs") or []}
    if status.get("podIP"):
        ips.add(str(status["podIP"]))
    if endpoint.address not in ips:
        shown = ", ".join(sorted(ips)) or "none yet"
        return (
            f"endpoint {endpoint.address} is not an address of {describe_object(pod, 'Pod')} "
            f"that its slice names (its IPs: {shown})"
        )
    return None


def ignored_note(ignored: list[str]) -> str:
    """What an error adds when untrusted slices were left out ("" when none was)."""
    return f"; {len(ignored)} untrusted EndpointSlices ignored ({ignored[0]})" if ignored else ""


def first_ready_url(service: JSONMap, slices: Iterable[JSONMap], port: str | int = "http") -> str:
    """The URL of the first ready endpoint of a trusted slice (stable order), or an error
    saying what is missing; untrusted slices are never read, only counted in the error."""
    materialised, ignored = trusted_slices(service, slices)
    endpoints = ready_endpoints(service, materialised, port)
    if endpoints:
        return endpoints[0].url
    raise EndpointResolutionError(none_ready(service, materialised, ignored))


def none_ready(service: JSONMap, trusted: list[JSONMap], ignored: list[str]) -> str:
    """Why a Service's `trusted` slices hold no ready endpoint, naming the Service."""
    if ignored and not trusted:
        why = (
            f"{len(ignored)} EndpointSlices, none trusted, all ignored ({ignored[0]}); "
            "waiting for the cluster to publish the Service's own"
        )
    elif not trusted:
        why = "no EndpointSlices (no pod selected yet, or none has an IP)"
    else:
        total = sum(len(s.get("endpoints") or []) for s in trusted)
        why = f"{total} endpoints in {len(trusted)} EndpointSlices, none ready"
        why += ignored_note(ignored)
    return f"Service {_name(service)} has no ready endpoint: {why}"


def _slice_port(endpoint_slice: JSONMap, wanted: str) -> int | None:
    for declared in endpoint_slice.get("ports") or []:
        if str(declared.get("name") or "") == wanted and declared.get("port") is not None:
            return int(declared["port"])
    return None


def _name(obj: JSONMap) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
