"""Endpoint resolution from EndpointSlices: every address type, readiness, ports."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.runner.endpoints import (
    EndpointResolutionError,
    first_ready_url,
    ready_endpoints,
    service_port_name,
)


def service(name: str = "qwen-abc", ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "llm"},
        "spec": {"ports": ports or [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def endpoint_slice(
    address_type: str,
    endpoints: list[dict[str, Any]],
    *,
    service_name: str = "qwen-abc",
    ports: list[dict[str, Any]] | None = None,
    name: str = "s",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports if ports is not None else [{"name": "http", "port": 8000}],
    }


def ep(
    address: str, *, ready: bool | None = True, terminating: bool | None = None, pod: str = "p"
) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if ready is not None:
        conditions["ready"] = ready
    if terminating is not None:
        conditions["terminating"] = terminating
    return {
        "addresses": [address],
        "conditions": conditions,
        "targetRef": {"kind": "Pod", "name": pod},
    }


def test_fqdn_slice_of_the_local_executor_resolves_to_its_loopback_ip() -> None:
    slices = [endpoint_slice("FQDN", [ep("127.64.0.12", pod="engine-0")], name="qwen-abc-local")]
    [found] = ready_endpoints(service(), slices)
    assert found.url == "http://127.64.0.12:8000"
    assert found.pod == "engine-0"
    assert found.address_type == "FQDN"


def test_ipv4_and_ipv6_slices_resolve_with_ipv6_bracketed() -> None:
    slices = [
        endpoint_slice("IPv4", [ep("192.0.2.3")], name="a"),
        endpoint_slice("IPv6", [ep("fd00::7")], name="b"),
    ]
    urls = sorted(e.url for e in ready_endpoints(service(), slices))
    assert urls == ["http://192.0.2.3:8000", "http://[fd00::7]:8000"]


def test_not_ready_and_terminating_endpoints_are_skipped_unknown_readiness_counts() -> None:
    slices = [
        endpoint_slice(
            "FQDN",
            [
                ep("127.64.0.1", ready=False),
                ep("127.64.0.2", ready=True, terminating=True),
                ep("127.64.0.3", ready=None),
            ],
        )
    ]
    assert [e.address for e in ready_endpoints(service(), slices)] == ["127.64.0.3"]


def test_target_port_comes_from_the_slice_not_the_service_port() -> None:
    svc = service(ports=[{"name": "http", "port": 80, "targetPort": "http"}])
    slices = [endpoint_slice("FQDN", [ep("127.64.0.5")], ports=[{"name": "http", "port": 8000}])]
    assert first_ready_url(svc, slices, port="http") == "http://127.64.0.5:8000"
    assert first_ready_url(svc, slices, port=80) == "http://127.64.0.5:8000"


def test_slices_of_another_service_or_unknown_address_types_are_ignored() -> None:
    slices = [
        endpoint_slice("FQDN", [ep("127.64.0.9")], service_name="other"),
        endpoint_slice("Unknown", [ep("127.64.0.8")]),
    ]
    assert ready_endpoints(service(), slices) == []


def test_unnamed_single_port_matches_the_unnamed_slice_port() -> None:
    svc = service(ports=[{"port": 8000}])
    slices = [endpoint_slice("IPv4", [ep("192.0.2.1")], ports=[{"name": "", "port": 8000}])]
    assert service_port_name(svc, 8000) == ""
    assert first_ready_url(svc, slices, port=8000) == "http://192.0.2.1:8000"


def test_first_ready_url_is_stable_across_slice_order() -> None:
    a = endpoint_slice("FQDN", [ep("127.64.0.20")], name="a")
    b = endpoint_slice("FQDN", [ep("127.64.0.3")], name="b")
    assert first_ready_url(service(), [a, b]) == first_ready_url(service(), [b, a])


def test_no_slices_names_the_service_and_why() -> None:
    with pytest.raises(
        EndpointResolutionError, match=r"llm/qwen-abc has no ready endpoint: no EndpointSlices"
    ):
        first_ready_url(service(), [])


def test_only_unready_endpoints_says_how_many_were_seen() -> None:
    slices = [
        endpoint_slice("FQDN", [ep("127.64.0.1", ready=False), ep("127.64.0.2", ready=False)])
    ]
    with pytest.raises(
        EndpointResolutionError, match="2 endpoints in 1 EndpointSlices, none ready"
    ):
        first_ready_url(service(), slices)


def test_unknown_port_lists_the_declared_ones() -> None:
    with pytest.raises(EndpointResolutionError, match=r"no port 'grpc'; it declares http=8000"):
        first_ready_url(service(), [], port="grpc")
