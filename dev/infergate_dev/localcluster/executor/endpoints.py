"""EndpointSlices for Services whose pods run on the executor.

The API server refuses loopback addresses in IPv4/IPv6 EndpointSlices
("may not be in the loopback range"), so the cluster's own EndpointSlice
controller cannot publish the executor's 127.x pod IPs. The executor publishes
them instead, as `addressType: FQDN` slices whose addresses are the dotted
pod IPs: valid DNS names that every resolver reads as the IP itself. Clients
that read EndpointSlices (as the runner does) then reach the real processes,
exactly as they would through IPv4 slices on a real cluster.
"""

from __future__ import annotations

from infergate.jsontypes import JSON
from infergate.runner.endpoints import LOCAL_EXECUTOR

# The label value of the executor's slices: the product's runner decides whom it trusts
# and names the value; the executor only wears it.
MANAGED_BY = LOCAL_EXECUTOR


def _selected(service: JSON, pod: JSON) -> bool:
    selector = service["spec"].get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _target_port(port: JSON, pods: list[JSON]) -> int | None:
    target = port.get("targetPort", port["port"])
    if isinstance(target, int) or str(target).isdigit():
        return int(str(target))
    for pod in pods:
        for container in pod["spec"]["containers"]:
            for declared in container.get("ports") or []:
                if declared.get("name") == target:
                    return int(declared["containerPort"])
    return None


def desired_slice(service: JSON, pods: list[JSON]) -> JSON | None:
    """The slice for `service` over the executor's pods; None when it selects none."""
    meta = service["metadata"]
    selected = [
        p
        for p in pods
        if p["metadata"]["namespace"] == meta["namespace"]
        and _selected(service, p)
        and (p.get("status") or {}).get("podIP")
    ]
    if not selected:
        return None
    ports = []
    for port in service["spec"].get("ports") or []:
        number = _target_port(port, selected)
        if number is not None:
            ports.append(
                {
                    "name": port.get("name", ""),
                    "port": number,
                    "protocol": port.get("protocol", "TCP"),
                }
            )
    endpoints = []
    for pod in sorted(selected, key=lambda p: p["status"]["podIP"]):
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        ready = _ready(pod) and not terminating
        endpoints.append(
            {
                "addresses": [pod["status"]["podIP"]],
                "conditions": {"ready": ready, "serving": _ready(pod), "terminating": terminating},
                "nodeName": pod["spec"].get("nodeName"),
                "targetRef": {
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "namespace": pod["metadata"]["namespace"],
                    "uid": pod["metadata"]["uid"],
                },
            }
        )
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{meta['name']}-local",
            "namespace": meta["namespace"],
            "labels": {
                "kubernetes.io/service-name": meta["name"],
                "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": "FQDN",
        "endpoints": endpoints,
        "ports": ports,
    }


def same_content(current: JSON, desired: JSON) -> bool:
    return all(current.get(k) == desired.get(k) for k in ("addressType", "endpoints", "ports"))
