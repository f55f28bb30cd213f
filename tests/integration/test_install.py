"""The install, on the local cluster: `kubectl apply --dry-run=server -k manifests/` is
accepted, and the real install comes up and works under its own RBAC.

The real install is the kustomize output of manifests/ applied as it is, except for
names: the namespace and the cluster-wide RBAC objects get a session suffix and the
operator watches only this session's namespaces, so it never acts on objects of
other tests (or of a demo install) sharing the cluster. The CRDs are applied
unchanged. The operator runs as a real pod on the local executor, under the
installed ServiceAccount and ClusterRoles; the API server's own authorizer answers
the RBAC questions (SubjectAccessReviews) for every permission the code needs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import (
    REPO,
    Cluster,
    install_for_session,
    leader_pod,
    release_namespace,
    wait_for,
)
from tests.integration.admission_support import SESSION_LABEL, session_policies
from tests.unit.packaging.kustomize import tenant_role
from tests.unit.packaging.rbac_usage import (
    Permission,
    grants,
    operator_usage,
    rule_label,
)

pytestmark = pytest.mark.cluster

MANIFESTS = REPO / "manifests"
INSTALL_NAMESPACE = "infergate-system"
JSON = dict[str, Any]


# What the default install needs that a cluster before 1.36 does not serve.
MUTATING_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def _default_install(cluster: Cluster) -> str:
    """The kustomization a user installs on this cluster (docs/install.md, Requirements):
    `manifests/` from 1.36, its overlay for older versions before."""
    if cluster.serves_mutating_admission_policy():
        return "manifests"
    return "manifests/overlays/kubernetes-before-1.36"


def _build(cluster: Cluster, directory: str) -> list[JSON]:
    built = cluster.kubectl("kustomize", str(REPO / directory)).stdout
    return [d for d in yaml.safe_load_all(built) if d]


@pytest.fixture(scope="module")
def install_namespace(cluster: Cluster) -> Iterator[None]:
    """A server-side dry run creates nothing, so the namespaced objects need their
    namespace to exist; made here if absent, and removed again if still empty."""

    def phase() -> str | None:
        found = cluster.kubectl(
            "get", "namespace", INSTALL_NAMESPACE, "-o", "jsonpath={.status.phase}", check=False
        )
        return found.stdout.strip() if found.returncode == 0 else None

    wait_for(lambda: phase() != "Terminating", 120, f"namespace {INSTALL_NAMESPACE} to go")
    created = phase() is None
    if created:
        cluster.kubectl("create", "namespace", INSTALL_NAMESPACE)
    yield
    if created:
        left = cluster.kubectl("get", "all", "-n", INSTALL_NAMESPACE, "-o", "name").stdout
        if not left.strip():
            cluster.kubectl("delete", "namespace", INSTALL_NAMESPACE, "--wait=false")


@pytest.mark.matrix
def test_server_dry_run_of_the_install_is_accepted(
    cluster: Cluster, install_namespace: None
) -> None:
    if not cluster.serves_mutating_admission_policy():
        pytest.skip("before 1.36 the overlay kubernetes-before-1.36 is the install (below)")
    expected = {
        f"{d['kind'].lower()}/{d['metadata']['name']}" for d in _build(cluster, "manifests")
    }
    result = cluster.kubectl("apply", "--dry-run=server", "-k", "manifests/")
    applied = set()
    for line in result.stdout.splitlines():
        if "(server dry run)" in line:
            kind, name = line.split(" ")[0].split("/", 1)
            applied.add(f"{kind.split('.')[0]}/{name}")
    assert applied == expected, result.stdout


@pytest.mark.matrix
def test_the_default_install_before_1_36_is_refused_naming_the_api_it_lacks(
    cluster: Cluster, install_namespace: None
) -> None:
    """What docs/install.md says: `manifests/` as it is needs 1.36; an older API server
    refuses it for its MutatingAdmissionPolicy, which is why the overlay exists."""
    if cluster.serves_mutating_admission_policy():
        pytest.skip("this API server serves MutatingAdmissionPolicy (1.36+)")
    result = cluster.kubectl("apply", "--dry-run=server", "-k", "manifests/", check=False)
    assert result.returncode != 0
    assert 'no matches for kind "MutatingAdmissionPolicy"' in result.stderr, result.stderr


@pytest.mark.matrix
def test_server_dry_run_of_the_production_overlay_is_accepted(
    cluster: Cluster, install_namespace: None
) -> None:
    """Everything but the ServiceMonitor and PrometheusRule, whose CRDs (Prometheus
    Operator) are not here; before 1.36 also without the MutatingAdmissionPolicy, as a
    copy of the overlay there adds the component kubernetes-before-1.36."""
    left_out = ("ServiceMonitor", "PrometheusRule")
    if not cluster.serves_mutating_admission_policy():
        left_out += MUTATING_KINDS
    documents = [
        d for d in _build(cluster, "manifests/overlays/production") if d["kind"] not in left_out
    ]
    text = "\n---\n".join(json.dumps(d) for d in documents)
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
    assert "networkpolicy.networking.k8s.io/infergate-operator created" in result.stdout


@pytest.mark.matrix
def test_server_dry_run_of_the_overlay_for_kubernetes_before_1_36_is_accepted(
    cluster: Cluster, install_namespace: None
) -> None:
    """The default install less what 1.30-1.35 do not serve (the MutatingAdmissionPolicy
    and its binding); the validating half of infergate-control-requester stays."""
    documents = _build(cluster, "manifests/overlays/kubernetes-before-1.36")
    base = _build(cluster, "manifests")
    left_out = sorted(
        f"{d['kind']}/{d['metadata']['name']}" for d in base
        if (d["kind"], d["metadata"]["name"])
        not in {(o["kind"], o["metadata"]["name"]) for o in documents}
    )  # fmt: skip
    assert left_out == [
        "MutatingAdmissionPolicy/infergate-control-requester",
        "MutatingAdmissionPolicyBinding/infergate-control-requester",
    ]
    text = "\n---\n".join(json.dumps(d) for d in documents)
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
    accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(documents), result.stdout
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/infergate-control-requester" in (
        result.stdout
    )


@dataclass
class Install:
    cluster: Cluster
    session: str
    documents: list[JSON]

    @property
    def namespace(self) -> str:
        return f"infergate-inst-{self.session}"

    @property
    def watched(self) -> str:
        """The namespace pattern this install's operator watches."""
        return f"inst-{self.session}-*"

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:infergate-operator"

    def operator_pod(self) -> JSON | None:
        pods = self.cluster.get_json(
            "pods", "-n", self.namespace, "-l", "app.kubernetes.io/name=infergate-operator"
        )["items"]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        return ready[0] if ready else None


def _for_session(documents: list[JSON], session: str) -> list[JSON]:
    """The install with session names; the rules and the Deployment otherwise as built.

    The admission policies name infergate-system's operator (as the only writer of
    InferenceDeployment status and of what wears infergate.io metadata) and are
    cluster-wide: the session's copies name the session's operator instead, and those that
    judge everyone's requests are bound to the session's labelled namespaces only
    (tests/integration/admission_support.py), so they neither refuse this operator nor
    reach other tests' namespaces.
    """
    policies = [d for d in documents if "AdmissionPolicy" in d["kind"]]
    rest = [d for d in documents if "AdmissionPolicy" not in d["kind"]]
    installed = install_for_session(
        rest,
        namespace=f"infergate-inst-{session}",
        cluster_role=lambda name: f"{name}-{session}",
        operator_args=[f"--namespace=inst-{session}-*"],
    )
    return installed + session_policies(policies, session, f"infergate-inst-{session}")


def _apply(cluster: Cluster, documents: list[JSON]) -> None:
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in documents))


@pytest.fixture(scope="module")
def install(cluster: Cluster) -> Iterator[Install]:
    session = uuid.uuid4().hex[:6]
    documents = _for_session(_build(cluster, _default_install(cluster)), session)
    installed = Install(cluster, session, documents)
    _apply(cluster, documents)
    try:
        yield installed
    finally:
        for namespace in cluster.kubectl("get", "namespaces", "-o", "name").stdout.split():
            if namespace.startswith(f"namespace/inst-{session}-"):
                release_namespace(cluster, namespace.split("/", 1)[1])
        uninstall = [d for d in documents if d["kind"] != "CustomResourceDefinition"]
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-",
            input="\n---\n".join(json.dumps(d) for d in uninstall), check=False,
        )  # fmt: skip


@pytest.mark.matrix
def test_the_installed_operator_becomes_ready_and_serves_metrics(install: Install) -> None:
    pod = wait_for(install.operator_pod, 180, "the installed operator pod to be Ready")

    # The metrics Service finds the pod, as Prometheus would.
    def ready_addresses() -> set[str] | None:
        slices = install.cluster.get_json(
            "endpointslices", "-n", install.namespace,
            "-l", "kubernetes.io/service-name=infergate-operator-metrics",
        )["items"]  # fmt: skip
        found = {
            address
            for endpoint_slice in slices
            for endpoint in endpoint_slice.get("endpoints") or []
            if (endpoint.get("conditions") or {}).get("ready")
            for address in endpoint["addresses"]
        }
        return found if pod["status"]["podIP"] in found else None

    wait_for(ready_addresses, 60, "the metrics Service to select the operator pod")
    text = httpx.get(f"http://{pod['status']['podIP']}:9090/metrics", timeout=10).text
    assert "# TYPE infergate_reconcile_duration_seconds histogram" in text


@pytest.mark.matrix
def test_the_installed_operator_rolls_out_a_deployment(install: Install) -> None:
    cluster = install.cluster
    wait_for(install.operator_pod, 180, "the installed operator pod to be Ready")
    namespace = f"inst-{install.session}-rollout"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, f"{SESSION_LABEL}={install.session}")
    cluster.apply(_inference_deployment(), namespace)

    seen: list[JSON] = [{}]

    def stable() -> JSON | None:
        seen[0] = cluster.get_json("idep", "qwen", "-n", namespace).get("status") or {}
        status = seen[0]
        return status if status.get("phase") == "Stable" and status.get("stableRevision") else None

    try:
        status = wait_for(stable, 180, "InferenceDeployment qwen to be Stable")
    except AssertionError as error:
        raise AssertionError(f"{error}; status: {json.dumps(seen[0])}") from None
    deployments = cluster.get_json("deployments", "-n", namespace)["items"]
    assert any(status["stableRevision"] in d["metadata"]["name"] for d in deployments)
    pod = wait_for(
        lambda: leader_pod(cluster, install.namespace), 60, "the replica holding the Lease"
    )
    metrics = httpx.get(f"http://{pod['status']['podIP']}:9090/metrics", timeout=10).text
    phases = {
        sample.labels["phase"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "infergate_rollout_phase"
        and sample.labels.get("namespace") == namespace
        and sample.labels.get("name") == "qwen"
    }
    assert phases.get("Stable") == 1.0, phases
    assert sum(phases.values()) == 1.0, phases
    cluster.kubectl("delete", "idep", "qwen", "-n", namespace, "--timeout=60s")


def _inference_deployment() -> JSON:
    """A vLLM deployment whose pods land on KWOK's simulated GPU nodes (no engine runs)."""
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "qwen"},
        "spec": {
            "model": {"name": "tiny-qwen", "uri": "hf://infergate/tiny-qwen2"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 2048},
            "accelerator": {"kind": "nvidia-gpu", "count": 1},
            "replicas": 1,
            "rollout": {
                "canaryReplicas": 1,
                "parity": {"suite": {"inline": [{"id": "capital", "text": "Paris is"}]}},
            },
            "placement": {
                "nodeSelector": {"type": "kwok"},
                "tolerations": [
                    {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    }


# Granted by a Role in the operator's own namespace, not cluster-wide: asked there.
_OWN_NAMESPACE = {("coordination.k8s.io", "leases")}


def _review(user: str, permission: Permission) -> JSON:
    resource, _, subresource = permission.resource.partition("/")
    namespace = user.split(":")[2]
    attributes = {
        "verb": permission.verb,
        "group": permission.group,
        "resource": resource,
        "subresource": subresource,
    }
    if (permission.group, resource) in _OWN_NAMESPACE:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }


def _allowed(cluster: Cluster, questions: list[tuple[str, Permission]]) -> list[bool]:
    """The API server's answers, in order, to 'may USER do PERMISSION (any namespace)?'."""
    listed = {"apiVersion": "v1", "kind": "List", "items": [_review(u, p) for u, p in questions]}
    text = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(listed)).stdout
    # One JSON document per review, one after the other.
    decoder, items, position = json.JSONDecoder(), [], 0
    while text[position:].strip():
        item, end = decoder.raw_decode(text, len(text) - len(text[position:].lstrip()))
        items.append(item)
        position = end
    assert len(items) == len(questions)
    return [bool(item["status"].get("allowed")) for item in items]


@pytest.mark.matrix
def test_the_api_server_allows_the_installed_operator_what_its_code_needs(
    install: Install,
) -> None:
    needed = sorted(operator_usage().permissions())
    answers = _allowed(install.cluster, [(install.user, p) for p in needed])
    refused = [str(p) for p, ok in zip(needed, answers, strict=True) if not ok]
    assert refused == []


def test_without_any_single_rule_the_api_server_refuses_something_needed(
    install: Install,
) -> None:
    """For each rule: a copy of the installed roles without it, bound to an account of its
    own; the API server refuses that account at least one permission the code needs."""
    cluster = install.cluster
    # The operator's rule sets (the tenant roles are for namespace users, not the operator).
    roles = [d for d in install.documents if d["kind"] == "ClusterRole" and not tenant_role(d)]
    union = [rule for role in roles for rule in role["rules"]]
    needed = operator_usage().reachable()
    objects: list[JSON] = []
    questions: list[tuple[str, Permission]] = []
    expected: list[tuple[str, Permission]] = []
    for index, rule in enumerate(union):
        rest = [r for i, r in enumerate(union) if i != index]
        broken = sorted(p for p in needed if grants(union, p) and not grants(rest, p))
        assert broken, f"nothing the code does needs {rule_label(rule)}"
        name = f"without-{index}-{install.session}"
        objects += [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": install.namespace},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "annotations": {"without": rule_label(rule)}},
                "rules": rest,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": name, "namespace": install.namespace}
                ],
            },
        ]
        user = f"system:serviceaccount:{install.namespace}:{name}"
        questions += [(user, p) for p in broken]
        # The same account is allowed what the rest of the rules grant (the binding works).
        kept = next(p for p in sorted(needed) if grants(rest, p))
        expected.append((user, kept))
    assert questions, "no rule is needed by anything: the derivation found nothing"
    _apply(cluster, objects)
    try:

        def settled() -> list[bool] | None:
            answers = _allowed(cluster, expected)
            return answers if all(answers) else None

        wait_for(settled, 30, "the per-rule bindings to take effect")
        answers = _allowed(cluster, questions)
        still_allowed = [f"{u} {p}" for (u, p), ok in zip(questions, answers, strict=True) if ok]
        assert still_allowed == []
    finally:
        for kind in ("clusterrolebinding", "clusterrole"):
            names = [o["metadata"]["name"] for o in objects if o["kind"].lower() == kind]
            cluster.kubectl("delete", kind, *names, "--ignore-not-found", check=False)


# (built-in role, verb, resource, subresource, allowed): what a namespace user bound to
# admin, edit or view may do with infergate's objects once the tenant roles aggregate.
_TENANT_ACCESS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("edit", "create", "inferencedeployments.infergate.io", "", True),
    ("edit", "patch", "inferencedeployments.infergate.io", "", True),
    ("edit", "update", "inferencedeployments.infergate.io", "scale", True),
    ("edit", "create", "paritychecks.infergate.io", "", True),
    ("edit", "delete", "paritychecks.infergate.io", "", True),
    ("edit", "get", "configmaps", "", True),  # the check reports
    ("edit", "patch", "inferencedeployments.infergate.io", "status", False),
    ("edit", "update", "paritychecks.infergate.io", "status", False),
    ("admin", "create", "paritychecks.infergate.io", "", True),
    ("admin", "patch", "paritychecks.infergate.io", "status", False),
    ("view", "list", "paritychecks.infergate.io", "", True),
    ("view", "get", "inferencedeployments.infergate.io", "", True),
    ("view", "get", "configmaps", "", True),
    ("view", "create", "inferencedeployments.infergate.io", "", False),
    ("view", "patch", "paritychecks.infergate.io", "", False),
)


@pytest.mark.matrix
def test_namespace_users_get_the_resources_through_the_built_in_roles(
    install: Install, namespace: str
) -> None:
    """The installed tenant ClusterRoles aggregate into admin, edit and view: an editor runs
    rollouts and checks and reads reports, a viewer reads, and nobody but the operator (and
    a check's runner) writes a status. The API server's authorizer answers."""
    cluster = install.cluster

    def tenant(role: str) -> str:
        return f"tenant-{role}-{install.session}"

    for role in ("admin", "edit", "view"):
        cluster.kubectl(
            "create", "rolebinding", f"tenant-{role}", f"--clusterrole={role}",
            f"--user={tenant(role)}", "-n", namespace,
        )  # fmt: skip

    def answers() -> list[tuple[str, str, str, str, bool]]:
        found = []
        for role, verb, resource, subresource, _ in _TENANT_ACCESS:
            asked = ["auth", "can-i", verb, resource, "-n", namespace, f"--as={tenant(role)}"]
            if subresource:
                asked.append(f"--subresource={subresource}")
            said = cluster.kubectl(*asked, check=False).stdout.strip() == "yes"
            found.append((role, verb, resource, subresource, said))
        return found

    # The aggregation controller folds the labelled roles into the built-in ones shortly.
    wait_for(lambda: answers() == list(_TENANT_ACCESS), 60, "the tenant roles aggregated")


@pytest.mark.matrix
def test_uninstall_removes_the_operator_and_its_rbac(cluster: Cluster, install: Install) -> None:
    """Last in this module: `kubectl delete` of the install (CRDs kept, other tests use them)."""
    wait_for(install.operator_pod, 180, "the installed operator pod to be Ready")
    uninstall = [d for d in install.documents if d["kind"] != "CustomResourceDefinition"]
    cluster.kubectl(
        "delete", "-f", "-", "--timeout=120s",
        input="\n---\n".join(json.dumps(d) for d in uninstall),
    )  # fmt: skip
    for document in uninstall:
        if document["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
            gone = cluster.kubectl(
                "get", document["kind"].lower(), document["metadata"]["name"], check=False
            )
            assert gone.returncode != 0, document["metadata"]["name"]
