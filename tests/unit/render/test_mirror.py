"""The mirror's NetworkPolicy: clients reach `http`, only the parity runners of the namespace's
checks (pods of the runner namespace) reach `control`, where shadow sessions (live users'
token ids) are opened and read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from infergate.api.shadow import Mirror
from infergate.render.check_children import RunnerSettings, runner_job
from infergate.render.check_names import ROLE_PROBE, child_labels
from infergate.render.labels import engine_pod_selector
from infergate.render.mirror import CONTROL_PORT, HEALTH_PATH, mirror_network_policy, render_mirror

NAMESPACE = "llm"
RUNNERS = "infergate-system"
IMAGE = "ghcr.io/infergate/infergate:0.1.0"


def _mirror(name: str = "qwen") -> dict[str, dict[str, Any]]:
    rendered = render_mirror(
        name, NAMESPACE, Mirror(replicas=2), image=IMAGE, runner_namespace=RUNNERS
    )
    return {o["kind"]: o for o in rendered}


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # nothing this check does not read
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _admits(
    policy: Mapping[str, Any],
    *,
    to: Mapping[str, str],
    port: int,
    source: Mapping[str, str],
    source_namespace: str,
) -> bool:
    """Whether `policy` lets a pod (labels `source`, in `source_namespace`) connect to a pod
    labelled `to` on `port`, as an enforcing network plugin reads it (ingress only)."""
    spec = policy["spec"]
    if not _matches(spec["podSelector"], to) or "Ingress" not in spec["policyTypes"]:
        return True  # not selected: this policy says nothing
    for rule in spec.get("ingress", []):
        ports = rule.get("ports")
        if ports is not None and not any(
            p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in ports
        ):
            continue
        peers = rule.get("from")
        if peers is None:
            return True
        for peer in peers:
            assert set(peer) <= {"podSelector", "namespaceSelector"}, peer  # by labels only
            # Without a namespaceSelector a peer is a pod of the policy's own namespace; the
            # API server sets kubernetes.io/metadata.name on every Namespace.
            in_namespace = (
                _matches(
                    peer["namespaceSelector"], {"kubernetes.io/metadata.name": source_namespace}
                )
                if "namespaceSelector" in peer
                else source_namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and _matches(peer["podSelector"], source):
                return True
    return False


def _runner_pod_labels(check: str, namespace: str = NAMESPACE) -> dict[str, str]:
    body = {"metadata": {"name": check, "namespace": namespace, "uid": "u"}}
    job = runner_job(
        body,
        RunnerSettings(active_deadline_seconds=60, backoff_limit=0),
        image=IMAGE,
        runner_namespace=RUNNERS,
    )
    # The Job controller adds its own labels to the pods it makes.
    return {**job["spec"]["template"]["metadata"]["labels"], "job-name": job["metadata"]["name"]}


def test_the_policy_selects_exactly_the_mirrors_pods_and_comes_before_them() -> None:
    objects = _mirror()
    policy = objects["NetworkPolicy"]
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["name"] == "qwen-mirror"
    assert policy["metadata"]["namespace"] == NAMESPACE
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"] == pod_labels
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # Not another deployment's mirror, nor this deployment's engines.
    other = _mirror("other")["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not _matches(policy["spec"]["podSelector"], other)
    engine = {
        **engine_pod_selector("qwen", "aaaaaaaaaa"),
        "app.kubernetes.io/managed-by": "infergate",
    }
    assert not _matches(policy["spec"]["podSelector"], engine)
    rendered = render_mirror("qwen", NAMESPACE, Mirror(), image=IMAGE, runner_namespace=RUNNERS)
    kinds = [o["kind"] for o in rendered]
    assert kinds.index("NetworkPolicy") < kinds.index("Deployment")


def test_every_port_the_mirror_serves_has_a_rule() -> None:
    objects = _mirror()
    [container] = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    served = {p["containerPort"] for p in container["ports"]}
    ruled = {p["port"] for r in objects["NetworkPolicy"]["spec"]["ingress"] for p in r["ports"]}
    assert ruled == served
    assert CONTROL_PORT in served


@pytest.mark.parametrize("check", ["qwen-bbbbbbbbbb", "other-cccccccccc-step2", "x" * 80])
def test_control_admits_the_runner_of_any_check_of_the_namespace(check: str) -> None:
    objects = _mirror()
    policy = objects["NetworkPolicy"]
    mirror_pod = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    runner = _runner_pod_labels(check)
    assert _admits(
        policy, to=mirror_pod, port=CONTROL_PORT, source=runner, source_namespace=RUNNERS
    )
    # A runner of another namespace's check is someone else's.
    other = _runner_pod_labels(check, namespace="default")
    assert not _admits(
        policy, to=mirror_pod, port=CONTROL_PORT, source=other, source_namespace=RUNNERS
    )
    # A pod of the tenant's namespace wearing a runner's labels is not a runner.
    for namespace in (NAMESPACE, "default"):
        assert not _admits(
            policy, to=mirror_pod, port=CONTROL_PORT, source=runner, source_namespace=namespace
        )


def test_control_refuses_every_other_pod_and_http_admits_all() -> None:
    objects = _mirror()
    policy = objects["NetworkPolicy"]
    mirror_pod = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    http = next(p["containerPort"] for p in _container_ports(objects) if p["name"] == "http")
    others = {
        "a client": {"app": "chat-frontend"},
        "an engine pod": engine_pod_selector("qwen", "aaaaaaaaaa"),
        "the mirror itself": mirror_pod,
        "a probe": child_labels("qwen-bbbbbbbbbb", ROLE_PROBE),
        "a pod claiming only managed-by": {"app.kubernetes.io/managed-by": "infergate"},
    }
    for what, labels in others.items():
        assert not _admits(
            policy, to=mirror_pod, port=CONTROL_PORT, source=labels, source_namespace="llm"
        ), what
        for namespace in ("llm", "default"):
            assert _admits(
                policy, to=mirror_pod, port=http, source=labels, source_namespace=namespace
            ), what


def test_the_kubelets_probes_call_control() -> None:
    """The probes call `control`, which the policy opens to runner pods only: they rely on
    traffic from a pod's own node being exempt from NetworkPolicy (see the policy's
    docstring); a probe on a port without a rule would fail this test first."""
    [container] = _mirror()["Deployment"]["spec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": HEALTH_PATH, "port": "control"}


def test_the_policy_is_the_same_one_render_mirror_returns() -> None:
    assert _mirror()["NetworkPolicy"] == mirror_network_policy(
        "qwen", NAMESPACE, runner_namespace=RUNNERS
    )


def _container_ports(objects: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    [container] = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return list(container["ports"])
