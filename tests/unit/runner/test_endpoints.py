"""Endpoint resolution from EndpointSlices: every address type, readiness, ports, and
which slices are trusted at all."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.runner.endpoints import (
    ENDPOINTSLICE_CONTROLLER,
    LOCAL_EXECUTOR,
    EndpointResolutionError,
    first_ready_url,
    not_the_pods_address,
    ready_endpoints,
    service_port_name,
    trusted_slices,
)


def service(name: str = "qwen-abc", ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "llm", "uid": f"uid-{name}"},
        "spec": {"ports": ports or [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def endpoint_slice(
    address_type: str,
    endpoints: list[dict[str, Any]],
    *,
    service_name: str = "qwen-abc",
    ports: list[dict[str, Any]] | None = None,
    name: str = "s",
    manager: str | None = LOCAL_EXECUTOR,
    owner: tuple[str, str, str] | None = None,
) -> dict[str, Any]:
    """A slice of `service_name`; by default as the local executor publishes it (its
    manager label, controlled by the Service: `owner` is (kind, name, uid) otherwise)."""
    kind, owner_name, uid = owner or ("Service", service_name, f"uid-{service_name}")
    labels = {"kubernetes.io/service-name": service_name}
    if manager is not None:
        labels["endpointslice.kubernetes.io/managed-by"] = manager
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": kind,
                    "name": owner_name,
                    "uid": uid,
                    "controller": True,
                },
            ],
        },
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


# -- trust: only the cluster's own publishers, for this very Service ----------------------


@pytest.mark.parametrize("manager", [ENDPOINTSLICE_CONTROLLER, LOCAL_EXECUTOR])
def test_slices_of_the_clusters_publishers_are_trusted(manager: str) -> None:
    slices = [endpoint_slice("IPv4", [ep("127.0.0.3")], manager=manager)]
    assert trusted_slices(service(), slices) == (slices, [])
    assert first_ready_url(service(), slices) == "http://127.0.0.3:8000"


FORGED = {
    "no manager label": {"manager": None},
    "another manager": {"manager": "tenant.example.com/endpoints"},
    "the Service of an old uid": {"owner": ("Service", "qwen-abc", "uid-old")},
    "another Service": {"owner": ("Service", "qwen-stable", "uid-qwen-stable")},
    "not a Service": {"owner": ("Deployment", "qwen-abc", "uid-qwen-abc")},
}


@pytest.mark.parametrize("forged", FORGED.values(), ids=FORGED.keys())
def test_a_forged_slice_is_never_read_and_the_service_own_is(forged: dict[str, Any]) -> None:
    """A tenant's slice pointing the canary's Service at a pod serving the stable model
    is ignored, whatever it says; the Service's own endpoints are used."""
    own = endpoint_slice("FQDN", [ep("127.64.0.20")], name="qwen-abc-local")
    fake = endpoint_slice("FQDN", [ep("127.64.0.3")], name="aaa-forged", **forged)
    trusted, ignored = trusted_slices(service(), [fake, own])
    assert trusted == [own]
    [why] = ignored
    assert "EndpointSlice llm/aaa-forged" in why
    assert first_ready_url(service(), [fake, own]) == "http://127.64.0.20:8000"


def test_only_forged_slices_resolve_nothing_and_say_they_were_ignored() -> None:
    fake = endpoint_slice("FQDN", [ep("127.64.0.3")], name="forged", manager="tenant")
    with pytest.raises(EndpointResolutionError) as raised:
        first_ready_url(service(), [fake])
    message = str(raised.value)
    assert "llm/qwen-abc has no ready endpoint: 1 EndpointSlices, none trusted" in message
    assert "EndpointSlice llm/forged is managed by 'tenant'" in message


def test_the_slice_the_local_executor_publishes_is_trusted() -> None:
    """The runner's rule must not break the local cluster: what the executor writes for
    a Service's loopback pods is read."""
    from infergate_dev.localcluster.executor.endpoints import desired_slice

    svc = {**service(), "spec": {"selector": {"app": "qwen"}, "ports": service()["spec"]["ports"]}}
    pod = {
        "metadata": {"name": "engine-0", "namespace": "llm", "uid": "u0", "labels": {"app": "qwen"}},
        "spec": {"nodeName": "local", "containers": [{"name": "e", "ports": [
            {"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": "127.64.0.7", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    published = desired_slice(svc, [pod])
    assert published is not None
    assert trusted_slices(svc, [published]) == ([published], [])
    assert first_ready_url(svc, [published]) == "http://127.64.0.7:8000"


def _pod(name: str = "p", uid: str = "uid-p", ips: tuple[str, ...] = ("10.0.0.7",)) -> Any:
    return {
        "metadata": {"name": name, "namespace": "llm", "uid": uid},
        "status": {"podIP": ips[0] if ips else None, "podIPs": [{"ip": ip} for ip in ips]},
    }


def _endpoint(target: dict[str, Any] | None, address: str = "10.0.0.7") -> Any:
    endpoint: dict[str, Any] = {"addresses": [address], "conditions": {"ready": True}}
    if target is not None:
        endpoint["targetRef"] = target
    [found] = ready_endpoints(service(), [endpoint_slice("IPv4", [endpoint])])
    return found


POD_REF = {"kind": "Pod", "name": "p", "namespace": "llm", "uid": "uid-p"}


def test_an_endpoint_is_its_pods_when_the_target_and_the_address_are() -> None:
    found = _endpoint(POD_REF)
    assert (found.pod, found.pod_uid) == ("p", "uid-p")
    assert not_the_pods_address(found, _pod()) is None
    assert (
        not_the_pods_address(_endpoint(POD_REF, "fd00::7"), _pod(ips=("10.0.0.7", "fd00::7")))
        is None
    )


@pytest.mark.parametrize(
    ("endpoint", "pod", "said"),
    [
        (POD_REF, _pod(uid="uid-other"), "not Pod p (uid uid-other)"),
        (POD_REF, _pod(name="q"), "not Pod q"),
        ({**POD_REF, "uid": ""}, _pod(), "names Pod p (uid None)"),
        (POD_REF, _pod(ips=("10.0.0.8",)), "is not an address of Pod llm/p"),
        (POD_REF, _pod(ips=()), "(its IPs: none yet)"),
    ],
)
def test_an_endpoint_that_is_not_its_pods_says_why(
    endpoint: dict[str, Any], pod: dict[str, Any], said: str
) -> None:
    message = not_the_pods_address(_endpoint(endpoint), pod)
    assert message is not None
    assert said in message


def test_an_endpoint_without_a_pod_target_names_none() -> None:
    for target in (None, {"kind": "Node", "name": "n", "uid": "u"}):
        found = _endpoint(target)
        assert (found.pod, found.pod_uid) == (None, None)
