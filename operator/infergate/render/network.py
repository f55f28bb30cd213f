"""Where a pod may connect, as NetworkPolicy peers (pure): pods by labels, or address
blocks; and the API server's addresses as the operator is given them."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    """Where the runner may connect: pods of its namespace by labels, or an address block."""

    port: int
    pods: Mapping[str, str] | None = None
    cidr: str | None = None
    """An IP block such as 10.96.0.1/32 (the API server), when `pods` is None."""


def api_server_peers(
    service_host: str | None, service_port: str | None, extra: Sequence[str] = ()
) -> tuple[Peer, ...]:
    """The API server as the runner reaches it: the in-cluster `kubernetes` Service
    ($KUBERNETES_SERVICE_HOST/PORT, as the runner's client dials it), and `extra` blocks
    given as CIDR:PORT (the control plane's own addresses, for network plugins that match
    policies after the Service address is translated, as Calico and Cilium do)."""
    peers: list[Peer] = []
    try:
        ip = ipaddress.ip_address(service_host or "")
        peers.append(Peer(port=int(service_port or ""), cidr=f"{ip}/{ip.max_prefixlen}"))
    except ValueError:
        pass  # not in a pod (or not an address): only what `extra` gives
    for item in extra:
        cidr, separator, port = item.rpartition(":")
        try:
            network = ipaddress.ip_network(cidr, strict=False) if separator else None
            number = int(port)
        except ValueError:
            network, number = None, 0
        if network is None or not 0 < number < 65536:
            raise ValueError(
                f"{item!r} is not an API server address; give CIDR:PORT, e.g. 10.0.0.10/32:6443"
            )
        peers.append(Peer(port=number, cidr=str(network)))
    return tuple(peers)
