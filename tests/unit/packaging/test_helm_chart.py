"""The Helm chart installs what the kustomize base installs, by rendering both and
comparing the objects: `helm template` with default values against `kubectl kustomize
manifests/`, with every optional piece enabled against the base plus every kustomize
Component, and for a Kubernetes version before 1.36 against the overlay for those
versions. Then what only the chart does: the namespace-scoped mode, names moved by
fullnameOverride, the runner image following the operator's, every value having an
effect, the schema refusing what cannot work, the CRD upgrade hook, and
`helm lint --strict`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate_dev.chartvalues import COMPONENT_VALUES
from infergate_dev.commands.chart import find_components, kustomize
from infergate_dev.helmchart import strip_release
from tests.tools import REPO, tool
from tests.unit.packaging.kustomize import MANIFESTS, build, kubectl_binary, one, tenant_role

CHART = REPO / "charts" / "infergate"
NAMESPACE = "infergate-system"
JSON = dict[str, Any]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(tool("helm")), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": "/tmp/infergate-helm/cache",
             "HELM_CONFIG_HOME": "/tmp/infergate-helm/config",
             "HELM_DATA_HOME": "/tmp/infergate-helm/data"},
    )  # fmt: skip
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result


def template(
    *values: str, namespace: str = NAMESPACE, kube_version: str | None = None
) -> list[JSON]:
    """`helm template infergate charts/infergate` with --set VALUES, CRDs included."""
    sets = [a for v in values for a in ("--set", v)]
    if kube_version is not None:
        sets += ["--kube-version", kube_version]
    out = helm(
        "template", "infergate", str(CHART), "--namespace", namespace, "--include-crds", *sets
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def hook(doc: JSON) -> bool:
    """An object Helm creates around an upgrade only (the CRD upgrade hook)."""
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def _key(doc: JSON) -> str:
    return f"{doc['kind']}/{doc['metadata'].get('namespace', '')}/{doc['metadata']['name']}"


def _by_key(documents: list[JSON]) -> dict[str, JSON]:
    keyed = {_key(d): d for d in documents}
    assert len(keyed) == len(documents), "two objects with one kind/namespace/name"
    return keyed


def _without_namespace_object(documents: list[JSON]) -> list[JSON]:
    """Helm leaves the release namespace to `--create-namespace`; kustomize makes it."""
    return [
        d
        for d in documents
        if not (d["kind"] == "Namespace" and d["metadata"]["name"] == NAMESPACE)
    ]


def _assert_same(rendered: list[JSON], built: list[JSON]) -> None:
    release = [d for d in rendered if not hook(d)]
    ours, theirs = _by_key(strip_release(release)), _by_key(_without_namespace_object(built))
    assert sorted(ours) == sorted(theirs)
    for key, doc in theirs.items():
        assert json.dumps(ours[key], sort_keys=True) == json.dumps(doc, sort_keys=True), key


def test_default_values_render_exactly_the_kustomize_base() -> None:
    _assert_same(template(), build(MANIFESTS))


def test_a_cluster_before_1_36_gets_exactly_the_overlay_for_those_versions() -> None:
    """Without admissionregistration.k8s.io/v1 MutatingAdmissionPolicy the chart leaves out
    what manifests/overlays/kubernetes-before-1.36 leaves out, and nothing else."""
    overlay = build(MANIFESTS / "overlays" / "kubernetes-before-1.36")
    assert not [d for d in overlay if d["kind"].startswith("MutatingAdmissionPolicy")]
    assert [d for d in overlay if d["kind"] == "ValidatingAdmissionPolicy"]
    for version in ("1.30.0", "1.31.4", "1.35.2"):
        _assert_same(template(kube_version=version), overlay)
    _assert_same(template(kube_version="1.36.0"), build(MANIFESTS))


def test_every_optional_piece_renders_exactly_its_kustomize_component(tmp_path: Path) -> None:
    components = [c for c in find_components(MANIFESTS) if c.name in COMPONENT_VALUES]
    assert {c.name for c in components} == set(COMPONENT_VALUES)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(MANIFESTS, tmp_path)],
        "components": [os.path.relpath(c, tmp_path) for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    built = kustomize(kubectl_binary(), tmp_path)
    enabled = [f"{key}.enabled=true" for key in COMPONENT_VALUES.values()]
    _assert_same(template(*enabled), built)


def test_component_labels_are_added_and_override_those_of_manifests() -> None:
    rendered = template(
        "monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.labels.release=prom"
    )
    monitor = next(d for d in rendered if d["kind"] == "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "infergate"


def test_namespace_scope_grants_roles_in_the_watched_namespaces_only() -> None:
    # The CRD upgrade hook's role exists only while an upgrade runs, for its own account.
    rendered = [
        d
        for d in template("rbac.scope=namespace", "watchNamespaces={team-a,team-b}")
        if not hook(d)
    ]
    kinds = {d["kind"] for d in rendered}
    # The tenant roles stay: aggregated into the built-in roles, they grant the operator nothing.
    assert [d for d in rendered if d["kind"] == "ClusterRole" and not tenant_role(d)] == []
    assert "ClusterRoleBinding" not in kinds
    # The release namespace's Roles (leader election, runner objects): the next test.
    roles = [d for d in rendered if d["kind"] == "Role" and d["metadata"]["namespace"] != NAMESPACE]
    bindings = [
        d
        for d in rendered
        if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] != NAMESPACE
    ]
    assert {r["metadata"]["namespace"] for r in roles} == {"team-a", "team-b"}
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b"}
    # Each Role holds exactly the namespaced rules of the ClusterRole it replaces.
    cluster_roles = {
        d["metadata"]["name"]: d for d in build(MANIFESTS) if d["kind"] == "ClusterRole"
    }
    for role in roles:
        original = cluster_roles[role["metadata"]["name"]]
        expected = [
            {
                **rule,
                "resources": [
                    r
                    for r in rule["resources"]
                    if r not in ("namespaces", "customresourcedefinitions")
                ],
            }
            for rule in original["rules"]
        ]
        assert role["rules"] == [r for r in expected if r["resources"]]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "infergate-operator", "namespace": NAMESPACE}
        ]
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--namespace=team-a", "--namespace=team-b"]


def test_namespace_scope_grants_in_the_release_namespace_what_the_namespaced_overlay_does() -> None:
    """The parity runners' Jobs, ServiceAccounts and NetworkPolicies are made in the
    operator's own namespace: a namespace-scoped install holds the namespaced overlay's
    Role there (beside the leader election's), the same rules; a cluster-wide one needs
    none, its ClusterRoles cover every namespace."""

    def own(documents: list[JSON]) -> list[JSON]:
        return [
            d
            for d in documents
            if d["kind"] in ("Role", "RoleBinding") and d["metadata"]["namespace"] == NAMESPACE
        ]

    overlay = own(build(MANIFESTS / "overlays" / "namespaced"))
    assert {d["metadata"]["name"] for d in overlay} == {
        "infergate-operator-leader-election",
        "infergate-runner-namespace",
    }
    _assert_same(own(template("rbac.scope=namespace", "watchNamespaces={llm}")), overlay)
    assert {d["metadata"]["name"] for d in own(template())} == {
        "infergate-operator-leader-election"
    }
    # Moved with the release and the chart's name, its subject too.
    moved = template(
        "rbac.scope=namespace",
        "watchNamespaces={team-a}",
        "fullnameOverride=acme",
        namespace="platform-llm",
    )
    role = one(moved, "Role", "acme-runner-namespace")
    binding = one(moved, "RoleBinding", "acme-runner-namespace")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "platform-llm"
    assert binding["roleRef"]["name"] == "acme-runner-namespace"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "acme-operator", "namespace": "platform-llm"}
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["rbac.scope=namespace"], "rbac.scope=namespace needs watchNamespaces"),
        (
            ["rbac.scope=namespace", "watchNamespaces={default}"],
            '"default" is the release namespace, where the parity runners run',
        ),
        (["rbac.scope=namespace", "watchNamespaces={team-*}"], '"team-*" is a pattern'),
        (["rbac.scope=tenant"], "at '/rbac/scope': value must be one of 'cluster', 'namespace'"),
        (["operator.replicas=0"], "at '/operator/replicas': minimum: got 0, want 1"),
        (["operator.replica=3"], "additional properties 'replica' not allowed"),
        (["image.pullPolicy=Sometimes"], "at '/image/pullPolicy'"),
        (["imagePullSecrets[0].nam=regcred"], "additional properties 'nam' not allowed"),
        (["fullnameOverride=Acme_Corp"], "at '/fullnameOverride'"),
    ],
)
def test_values_that_cannot_work_are_refused_with_the_reason(
    values: list[str], message: str
) -> None:
    sets = [a for v in values for a in ("--set", v)]
    result = helm("template", "infergate", str(CHART), *sets, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_fullname_override_moves_every_name_and_every_reference() -> None:
    rendered = [
        d for d in template("fullnameOverride=acme") if d["kind"] != "CustomResourceDefinition"
    ]
    names = {d["metadata"]["name"] for d in rendered}
    assert names
    assert all(n.startswith("acme-") for n in names), names
    text = json.dumps(rendered)
    assert '"infergate-operator"' in text  # the app label stays (selectors match it)
    for doc in rendered:
        for subject in doc.get("subjects", []):
            assert subject["name"] == ("acme-crd-upgrade" if hook(doc) else "acme-operator")
        if "roleRef" in doc:
            assert doc["roleRef"]["name"] in names
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "acme-operator"


def test_a_moved_operator_image_moves_the_runner_image_too() -> None:
    def env(*values: str) -> dict[str, Any]:
        deployment = next(d for d in template(*values) if d["kind"] == "Deployment")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]} | {"image": container["image"]}

    assert "INFERGATE_RUNNER_IMAGE" not in env()
    moved = env("image.repository=registry.example.com/infergate", "image.tag=0.1.1")
    assert moved["image"] == "registry.example.com/infergate:0.1.1"
    assert moved["INFERGATE_RUNNER_IMAGE"] == "registry.example.com/infergate:0.1.1"
    assert env("runner.image=runner:2")["INFERGATE_RUNNER_IMAGE"] == "runner:2"


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--set", "rbac.scope=namespace", "--set", "watchNamespaces={team-a}"],
        [
            "--set", "monitoring.serviceMonitor.enabled=true",
            "--set", "networkPolicy.enabled=true",
            "--set", "monitoring.prometheusRule.enabled=true",
        ],
        ["--set", "admission.enabled=false,monitoring.enabled=false,crds.upgrade=false"],
        ["--kube-version", "1.31.0"],
    ],
    ids=["defaults", "namespace-scope", "all-components", "all-off", "kubernetes-1.31"],
)  # fmt: skip
def test_helm_lint_strict_passes(flags: list[str]) -> None:
    result = helm("lint", "--strict", str(CHART), *flags, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    # What --strict still reports is information only: the chart has no icon to point at.
    findings = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert findings == ["[INFO] Chart.yaml: icon is recommended"]


def test_the_runner_namespace_of_the_policies_moves_with_the_release() -> None:
    """Runners run in the operator's namespace: installed elsewhere, the status policy
    admits the runner accounts of that namespace, not of infergate-system."""
    rendered = template(namespace="platform-llm")
    policies = {
        d["metadata"]["name"]: yaml.safe_dump(d, width=10_000)
        for d in rendered
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    status = next(
        d
        for d in rendered
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"].endswith("paritycheck-status")
    )
    variables = {v["name"]: v["expression"] for v in status["spec"]["variables"]}
    assert variables["runnerNamespace"] == "'platform-llm'"
    assert not any("'infergate-system'" in text for text in policies.values())
