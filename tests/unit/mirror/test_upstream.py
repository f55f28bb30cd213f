"""Where the mirror forwards live traffic: only to pods the cluster published for the
stable Service, never to one a forged EndpointSlice names."""

from __future__ import annotations

from infergate.jsontypes import JSON
from infergate.mirror.upstream import Endpoints
from infergate.runner.endpoints import ENDPOINTSLICE_CONTROLLER
from tests.unit.runner.fakes import controller_ref, uid_of


def _slice(address: str, manager: str) -> JSON:
    return {
        "metadata": {
            "name": f"qwen-{address}",
            "labels": {
                "kubernetes.io/service-name": "qwen",
                "endpointslice.kubernetes.io/managed-by": manager,
            },
            "ownerReferences": [controller_ref("Service", "qwen")],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


class _Reads:
    def __init__(self, *slices: JSON) -> None:
        self.slices = list(slices)

    def service(self, name: str) -> JSON | None:
        return {
            "metadata": {"name": name, "uid": uid_of(name)},
            "spec": {"ports": [{"name": "http", "port": 8000}]},
        }

    def endpoint_slices(self, service: str) -> list[JSON]:
        return self.slices if service == "qwen" else []


def test_live_traffic_goes_only_to_the_pods_the_cluster_published() -> None:
    forged = _slice("127.0.0.1", "tenant")  # sorts first: it would be picked first
    endpoints = Endpoints(_Reads(forged, _slice("127.0.0.9", ENDPOINTSLICE_CONTROLLER)), "qwen")
    endpoints.read()
    assert endpoints.urls == ["http://127.0.0.9:8000"]
    assert {endpoints.pick() for _ in range(4)} == {"http://127.0.0.9:8000"}


def test_only_forged_slices_leave_no_upstream_and_say_why() -> None:
    endpoints = Endpoints(_Reads(_slice("127.0.0.1", "tenant")), "qwen")
    endpoints.read()
    assert endpoints.urls == []
    assert endpoints.problem is not None
    assert "Service qwen has no ready endpoint; 1 untrusted EndpointSlices ignored" in (
        endpoints.problem
    )
