"""Where a Service answers: ready endpoints read from its EndpointSlices (pure).

ClusterIPs are never dialled (there may be no kube-proxy, and a runner outside the
cluster network could not reach them anyway): the runner reads the Service's
EndpointSlices and calls a ready endpoint directly. Slices of every address type
count: IPv4 and IPv6 as published by the EndpointSlice controller, and FQDN, as
published for the local executor, whose loopback pod IPs the API server refuses in
IPv4 slices (there the FQDN is the dotted IP itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infergate.jsontypes import JSONMap

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
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


def ready_endpoints(
    service: JSONMap, slices: Iterable[JSONMap], port: str | int = "http"
) -> list[ResolvedEndpoint]:
    """Every ready, non-terminating endpoint of `service` on `port`, sorted by address.

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
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            addresses = endpoint.get("addresses") or []
            if not addresses:
                continue
            target = endpoint.get("targetRef") or {}
            pod = target.get("name") if target.get("kind") == "Pod" else None
            address = str(addresses[0])
            found[(address, number)] = ResolvedEndpoint(address, number, address_type, pod)
    return [found[key] for key in sorted(found)]


def first_ready_url(service: JSONMap, slices: Iterable[JSONMap], port: str | int = "http") -> str:
    """The URL of the first ready endpoint (stable order), or an error saying what is missing."""
    materialised = list(slices)
    endpoints = ready_endpoints(service, materialised, port)
    if endpoints:
        return endpoints[0].url
    if not materialised:
        why = "no EndpointSlices (no pod selected yet, or none has an IP)"
    else:
        total = sum(len(s.get("endpoints") or []) for s in materialised)
        why = f"{total} endpoints in {len(materialised)} EndpointSlices, none ready"
    raise EndpointResolutionError(f"Service {_name(service)} has no ready endpoint: {why}")


def _slice_port(endpoint_slice: JSONMap, wanted: str) -> int | None:
    for declared in endpoint_slice.get("ports") or []:
        if str(declared.get("name") or "") == wanted and declared.get("port") is not None:
            return int(declared["port"])
    return None


def _name(obj: JSONMap) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
