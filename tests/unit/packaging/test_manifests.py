"""The install (`kubectl apply -k manifests/`) and its production overlay, as a user checks
them before applying: what gets created, and that the operator Deployment is shaped the
way this project runs it. Built with kustomize; no API server."""

from __future__ import annotations

import json
from typing import Any

import yaml

from infergate.api.crd import render_crd_files
from infergate.render.images import DEFAULT_RUNNER_IMAGE, RUNNER_IMAGE_ENV
from tests.unit.packaging.dockerfile import Dockerfile
from tests.unit.packaging.kustomize import (
    MANIFESTS,
    PRODUCTION,
    bound_cluster_roles,
    build,
    one,
    operator_service_account,
    tenant_role,
)
from tests.unit.packaging.lockfiles import REPO

# API groups a plain cluster serves: the default install may need nothing else
# (admission policies: ValidatingAdmissionPolicy GA since v1.30, MutatingAdmissionPolicy v1.36).
_PLAIN_GROUPS = {
    "v1",
    "apps/v1",
    "rbac.authorization.k8s.io/v1",
    "apiextensions.k8s.io/v1",
    "admissionregistration.k8s.io/v1",
    # PodDisruptionBudget: built in since Kubernetes 1.21.
    "policy/v1",
}
_POLICY_KINDS = {
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


def _container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(documents, "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def _flag(container: dict[str, Any], flag: str) -> str:
    for arg in [*container.get("command", []), *container.get("args", [])]:
        if arg.startswith(f"{flag}="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"the operator is not started with {flag}=...")


def _port(container: dict[str, Any], name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert name in ports, f"the operator container has no port named {name!r}"
    return int(ports[name])


def test_installs_the_crds_the_operator_and_its_rbac_and_nothing_needing_extra_crds() -> None:
    documents = build(MANIFESTS)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents)
    crds = {yaml.safe_load(text)["metadata"]["name"] for text in render_crd_files().values()}
    assert {name for kind, name in kinds if kind == "CustomResourceDefinition"} == crds
    for kind in ("Namespace", "ServiceAccount", "Deployment", "Service"):
        one(documents, kind)
    assert len(bound_cluster_roles(documents)) >= 1
    assert {d["apiVersion"] for d in documents} <= _PLAIN_GROUPS
    assert not [k for k, _ in kinds if k in {"ServiceMonitor", "NetworkPolicy", "PrometheusRule"}]


def test_every_namespaced_object_is_in_the_install_namespace() -> None:
    documents = build(MANIFESTS)
    namespace = one(documents, "Namespace")["metadata"]["name"]
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        *_POLICY_KINDS,
    }
    for document in documents:
        if document["kind"] not in cluster_scoped:
            assert document["metadata"].get("namespace") == namespace, document["metadata"]


def test_operator_runs_two_replicas_of_which_only_the_lease_holder_acts() -> None:
    documents = build(MANIFESTS)
    spec = one(documents, "Deployment")["spec"]
    assert spec["replicas"] == 2
    container = _container(documents)
    assert "--leader-election" in container["args"]
    env = {
        e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        for e in container["env"]
    }
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert env["POD_NAME"] == "metadata.name"
    [role] = [d for d in documents if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "infergate-system"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]


def test_operator_runs_non_root_as_its_image_user_with_a_read_only_root() -> None:
    documents = build(MANIFESTS)
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    container = _container(documents)
    context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert "ALL" in context["capabilities"]["drop"]
    image = Dockerfile.read(REPO / "runtime_images/operator/Dockerfile")
    user = image.final_user()
    assert user is not None
    uid, _, gid = user.partition(":")
    assert (int(context["runAsUser"]), int(context["runAsGroup"])) == (int(uid), int(gid))


def test_operator_has_resource_requests_and_separate_liveness_and_readiness() -> None:
    container = _container(build(MANIFESTS))
    requests = container["resources"]["requests"]
    assert requests.get("cpu")
    assert requests.get("memory")
    health = _port(container, "health")
    assert int(_flag(container, "--health-port")) == health
    # Liveness: kopf's event loop answers on the health port.
    live = container["livenessProbe"]["httpGet"]
    assert live["path"] == "/healthz"
    assert live["port"] in ("health", health)
    # Readiness: the operator's own /readyz, served beside /metrics.
    metrics = _port(container, "metrics")
    assert int(_flag(container, "--metrics-port")) == metrics
    ready = container["readinessProbe"]["httpGet"]
    assert ready["path"] == "/readyz"
    assert ready["port"] in ("metrics", metrics)


def test_the_operator_replicas_spread_and_a_drain_keeps_one() -> None:
    documents = build(MANIFESTS)
    deployment = one(documents, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] >= 2
    [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()
    budget = one(documents, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] == deployment["spec"]["replicas"] - 1


def test_metrics_service_reaches_the_port_the_operator_serves_metrics_on() -> None:
    documents = build(MANIFESTS)
    container = _container(documents)
    metrics = _port(container, "metrics")
    assert int(_flag(container, "--metrics-port")) == metrics
    service = one(documents, "Service")
    labels = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] in (["metrics"], [metrics])


def test_the_operator_image_is_the_runner_image_and_runs_the_operator_command() -> None:
    container = _container(build(MANIFESTS))
    assert container["image"] == DEFAULT_RUNNER_IMAGE
    image = Dockerfile.read(REPO / "runtime_images/operator/Dockerfile")
    entrypoint = image.final_exec("ENTRYPOINT") or []
    argv = [*(container.get("command") or entrypoint), *container["args"]]
    assert argv[:2] == ["infergate", "operator"]


def test_the_roles_are_bound_to_the_operators_service_account() -> None:
    documents = build(MANIFESTS)
    namespace, account = operator_service_account(documents)
    assert one(documents, "ServiceAccount", account)["metadata"]["namespace"] == namespace
    bound = {role["metadata"]["name"] for role in bound_cluster_roles(documents)}
    # Every ClusterRole but the tenant ones (aggregated into the built-in roles, bound by none).
    assert bound == {
        d["metadata"]["name"]
        for d in documents
        if d["kind"] == "ClusterRole" and not tenant_role(d)
    }


def test_the_dashboard_configmap_carries_the_dashboard() -> None:
    config_map = one(build(MANIFESTS), "ConfigMap", "infergate-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["infergate.json"])
    dashboard = json.loads((REPO / "dashboards/infergate.json").read_text(encoding="utf-8"))
    assert shipped == dashboard, "cp dashboards/infergate.json manifests/monitoring/"


def test_production_overlay_installs_the_same_objects_plus_its_components() -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in build(MANIFESTS)}
    production = {(d["kind"], d["metadata"]["name"]) for d in build(PRODUCTION)}
    assert production - base == {
        ("ServiceMonitor", "infergate-operator"),
        ("NetworkPolicy", "infergate-operator"),
        ("PrometheusRule", "infergate-alerts"),
        ("PriorityClass", "infergate-operator"),
    }
    assert base <= production


def test_production_overlay_moves_the_operator_and_runner_images_together() -> None:
    container = _container(build(PRODUCTION))
    assert container["image"] != DEFAULT_RUNNER_IMAGE
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[RUNNER_IMAGE_ENV] == container["image"]


def test_servicemonitor_scrapes_the_metrics_service_keeping_the_metric_labels() -> None:
    documents = build(PRODUCTION)
    monitor = one(documents, "ServiceMonitor")
    service = one(documents, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports
        # The metrics' own `namespace` label names the InferenceDeployment's namespace.
        assert endpoint["honorLabels"] is True


def test_networkpolicy_selects_the_operator_and_names_its_ports() -> None:
    documents = build(PRODUCTION)
    policy = one(documents, "NetworkPolicy")
    labels = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    container = _container(documents)
    names = {p["name"] for p in container["ports"]}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in names
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert {443, 53} <= egress_ports
