"""Where live requests go: the stable Service's selector and the gateway's HTTPRoute (pure).

- `dark` and `gateway`: the stable Service `<name>` selects the stable revision's pods
  only, so a canary serves nobody until it is promoted (gateway: until the route gives
  it weight);
- `replicas`: it selects every revision's pods (the canary's replica share);
- `gateway`: the HTTPRoute `<name>` (gateway.networking.k8s.io/v1) splits requests
  between the revision Services of stable and canary by weight.
"""

from __future__ import annotations

from typing import Any

from infergate.api.traffic import GatewayTraffic, TrafficMode
from infergate.render.labels import engine_pod_selector, revision_object_name, stable_labels
from infergate.render.launch import HTTP_PORT

GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = f"{GATEWAY_API_GROUP}/v1"
MECHANISM = {
    TrafficMode.DARK: "Dark",
    TrafficMode.REPLICAS: "ReplicaRatio",
    TrafficMode.GATEWAY: "GatewayWeights",
}


def stable_selector(name: str, mode: TrafficMode, serving: str | None) -> dict[str, str]:
    """The stable Service's selector: every revision's pods (replicas), else `serving`'s only."""
    if mode is TrafficMode.REPLICAS or serving is None:
        return engine_pod_selector(name)
    return engine_pod_selector(name, serving)


def stable_service(
    name: str, namespace: str, mode: TrafficMode, serving: str | None
) -> dict[str, Any]:
    """The Service clients call, `<name>`: which pods answer follows the traffic mode."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": stable_labels(name)},
        "spec": {
            "type": "ClusterIP",
            "selector": stable_selector(name, mode, serving),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _backend(name: str, revision: str, weight: int) -> dict[str, Any]:
    return {
        "group": "",
        "kind": "Service",
        "name": revision_object_name(name, revision),
        "port": HTTP_PORT,
        "weight": weight,
    }


def http_route(
    name: str,
    namespace: str,
    gateway: GatewayTraffic,
    *,
    stable: str,
    canary: str | None,
    canary_weight: int,
) -> dict[str, Any]:
    """The HTTPRoute `<name>`: stable's revision Service, and the canary's at its weight (0 until
    its check passed), as weighted backends of one rule matching every path."""
    if not 0 <= canary_weight <= 100:
        raise ValueError(f"canary weight {canary_weight} is not a percentage")
    backends = [_backend(name, stable, 100 - (canary_weight if canary else 0))]
    if canary is not None:
        backends.append(_backend(name, canary, canary_weight))
    parents = []
    for parent in gateway.parent_refs:
        ref: dict[str, Any] = {"group": GATEWAY_API_GROUP, "kind": "Gateway", "name": parent.name}
        if parent.namespace is not None:
            ref["namespace"] = parent.namespace
        if parent.section_name is not None:
            ref["sectionName"] = parent.section_name
        parents.append(ref)
    spec: dict[str, Any] = {
        "parentRefs": parents,
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": backends,
            }
        ],
    }
    if gateway.hostnames:
        spec["hostnames"] = list(gateway.hostnames)
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "labels": stable_labels(name)},
        "spec": spec,
    }
