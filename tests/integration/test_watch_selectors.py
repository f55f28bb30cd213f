"""The operator's watches of Kubernetes' own kinds ask the API server only for the objects
infergate made: every list and watch kopf sends for them carries the label selector
`app.kubernetes.io/managed-by=infergate`, and objects of those kinds without the label, in
the very namespace the operator watches, never reach it, neither in the first list nor as
changes while it watches; the rollout works as before.

The operator runs as a process of the test behind the fault proxy (fault_proxy.py), which
records the answer to every read, so the test sees exactly what was delivered to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from infergate.controllers._watched import WATCHED, label_selectors
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    operator,
    watched_namespace,
)
from tests.integration.fault_proxy import Exchange
from tests.integration.fault_support import Rig, installed_stopped, rig

pytestmark = [pytest.mark.cluster]
__all__ = ["installed_stopped", "operator", "rig"]

SELECTOR = "app.kubernetes.io/managed-by=infergate"
STRANGER = "stranger"


@pytest.fixture
def namespace(
    operator: OperatorInstall, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    made = watched_namespace(operator, cluster, request)
    yield next(made)
    next(made, None)


def _strangers(namespace: str) -> list[dict[str, object]]:
    """Objects of watched kinds that infergate did not make: one unlabelled, one labelled as
    another tool's."""
    meta = {"name": STRANGER, "namespace": namespace}
    other = {
        "name": f"{STRANGER}-other",
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "helm"},
    }
    pod_spec = {"containers": [{"name": "c", "image": "registry.example/none:1"}]}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": other, "data": {"a": "b"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"selector": {"app": STRANGER}, "ports": [{"port": 80}]},
        },
        {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": other,
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": STRANGER}},
                "template": {"metadata": {"labels": {"app": STRANGER}}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    ]


def _plural(exchange: Exchange) -> str:
    return exchange.path.rstrip("/").rsplit("/", 1)[-1]


def _kopf_reads(exchanges: list[Exchange]) -> list[Exchange]:
    """kopf's lists and watches of the watched kinds (the operator's own client reads
    single objects and other kinds with its own User-Agent)."""
    plurals = {plural for _, _, plural in WATCHED}
    return [
        e
        for e in exchanges
        if e.agent.startswith("kopf/") and e.method == "GET" and _plural(e) in plurals
    ]


def _delivered(exchanges: list[Exchange], plural: str) -> set[str]:
    names: set[str] = set()
    for exchange in _kopf_reads(exchanges):
        if _plural(exchange) == plural:
            names |= {str(o["metadata"]["name"]) for o in exchange.objects()}  # type: ignore[index]
    return names


def test_watches_of_kubernetes_kinds_deliver_only_infergates_objects(
    rig: Rig, cluster: Cluster, namespace: str
) -> None:
    assert set(label_selectors().values()) == {SELECTOR}
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input="\n---\n".join(map(json.dumps, _strangers(namespace))),
    )
    proxy = rig.proxy()
    proxy.record_reads = True
    rig.operator(proxy, "selectors")

    idep = Idep(cluster, namespace, deployment_manifest(replicas=1))
    idep.apply()
    stable = idep.wait_stable(timeout=120)
    # Changes to the strangers while the operator watches, then one it must see: a new
    # canary's ConfigMap and Deployment, written after them.
    cluster.kubectl("annotate", "-n", namespace, "configmap", STRANGER, "touched=1")
    cluster.kubectl("annotate", "-n", namespace, "serviceaccount", STRANGER, "touched=1")
    idep.apply(dtype="float16")
    canary, _ = idep.wait_check(timeout=120)
    canary_objects = f"{idep.name}-{canary}"
    wait_for(
        lambda: (
            canary_objects in _delivered(proxy.exchanges(), "configmaps")
            and canary_objects in _delivered(proxy.exchanges(), "deployments")
        ),
        60,
        f"the operator's watches delivering {canary_objects}",
    )

    for plural in ("configmaps", "deployments", "services"):
        delivered = _delivered(proxy.exchanges(), plural)
        assert f"{idep.name}-{stable}" in delivered, plural
        assert not {n for n in delivered if n.startswith(STRANGER)}, plural
    for plural in ("serviceaccounts", "pods", "roles"):
        delivered = _delivered(proxy.exchanges(), plural)
        assert not {n for n in delivered if n.startswith(STRANGER)}, plural

    reads = _kopf_reads(proxy.exchanges())
    assert {_plural(e) for e in reads} == {plural for _, _, plural in WATCHED}
    assert any(e.watch for e in reads)
    assert any(not e.watch for e in reads)
    for exchange in reads:
        selectors = parse_qs(exchange.query).get("labelSelector")
        assert selectors == [SELECTOR], f"{exchange.path}?{exchange.query}"
