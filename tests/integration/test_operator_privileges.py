"""What the operator's ServiceAccount may and may not do, asked of the real API server.

Both installs are applied for a session (renamed, bound to a session ServiceAccount;
the operator itself need not run: `kubectl auth can-i --as` asks the authorizer):
the cluster-wide one (manifests/operator + manifests/runner) and the namespaced overlay
(manifests/overlays/namespaced: RoleBindings in the watched namespaces only). Together
the two ClusterRoles must stay well short of cluster-admin. What RBAC still allows and
the admission policies forbid (pods in kube-system, host mounts) is in
test_admission_policies.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.harness import (
    REPO,
    Cluster,
    apply_crds,
    install_for_session,
    release_namespace,
    wait_for,
)
from tests.integration.admission_support import built
from tests.integration.controller_support import deployment_manifest

pytestmark = pytest.mark.cluster

NAMESPACED = REPO / "manifests" / "overlays" / "namespaced"
# Cluster-wide policies bound to the real operator's name: the session's operator is
# another ServiceAccount, and test_admission_policies installs its own copies.
_ADMISSION_KINDS = {
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


@dataclass(frozen=True)
class Install:
    cluster: Cluster
    account: str
    watched: str
    other: str

    def can(self, verb: str, resource: str, *flags: str) -> bool:
        answer = self.cluster.kubectl(
            "auth", "can-i", verb, resource, f"--as={self.account}", *flags, check=False
        )
        return answer.stdout.strip() == "yes"


def _session_rbac(
    documents: list[dict[str, Any]], suffix: str, ops: str, watched: str
) -> list[dict[str, Any]]:
    out = []
    for doc in documents:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "RoleBinding"):
            continue
        if doc["kind"] == "RoleBinding" and doc["roleRef"]["kind"] == "Role":
            continue  # the operator's own namespace (its Lease), not a watched one
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        if doc["kind"] == "RoleBinding":
            doc["metadata"]["namespace"] = watched
        if "roleRef" in doc:
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
            for subject in doc["subjects"]:
                subject["namespace"] = ops
        out.append(doc)
    return out


def _install(cluster: Cluster, documents: list[dict[str, Any]], mode: str) -> Iterator[Install]:
    apply_crds(cluster)
    suffix = f"{mode}-{uuid.uuid4().hex[:6]}"
    ops, watched, other = (f"{name}-{suffix}" for name in ("ops", "team-a", "team-b"))
    for namespace in (ops, watched, other):
        cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", "infergate-operator", "-n", ops)
    rbac = _session_rbac(documents, suffix, ops, watched)
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in rbac))
    yield Install(cluster, f"system:serviceaccount:{ops}:infergate-operator", watched, other)
    for doc in rbac:
        if doc["kind"] != "RoleBinding":
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], check=False)
    for namespace in (ops, watched, other):
        release_namespace(cluster, namespace)


@pytest.fixture(scope="module")
def clusterwide(cluster: Cluster) -> Iterator[Install]:
    documents = [
        d for sub in ("operator", "runner") for d in built(cluster, REPO / "manifests" / sub)
    ]
    yield from _install(cluster, documents, "cw")


@pytest.fixture(scope="module")
def namespaced(cluster: Cluster) -> Iterator[Install]:
    yield from _install(cluster, built(cluster, NAMESPACED), "ns")


# What the operator does (tests/unit/packaging/test_rbac.py derives these from its code).
_NEEDED = [
    ("update", "inferencedeployments.infergate.io", "--subresource=status"),
    ("patch", "inferencedeployments.infergate.io"),
    # kopf lists them; a runner's Role grants it under golden retention.whenDeleted: Delete.
    ("list", "inferencedeployments.infergate.io"),
    ("create", "paritychecks.infergate.io"),
    ("update", "paritychecks.infergate.io", "--subresource=status"),
    ("create", "deployments.apps"),
    ("patch", "configmaps"),
    ("create", "pods"),
    ("create", "jobs.batch"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "events.events.k8s.io"),
    ("patch", "events.events.k8s.io"),
]

# Never: together these would make the two ClusterRoles amount to cluster-admin.
_NEVER = [
    ("get", "secrets"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("create", "pods", "--subresource=exec"),
    ("create", "pods", "--subresource=attach"),
    # Reading ServiceAccount objects is granted: the ParityCheck controller watches the
    # runner accounts it creates, to tell its own from a squatter's. An account object
    # holds no credential: tokens come only through this subresource, and Secrets stay
    # unreadable.
    ("create", "serviceaccounts", "--subresource=token"),
    ("update", "roles.rbac.authorization.k8s.io"),
    ("escalate", "roles.rbac.authorization.k8s.io"),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("impersonate", "users"),
    ("impersonate", "serviceaccounts"),
    ("update", "nodes"),
    ("delete", "namespaces"),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io"),
    ("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("update", "customresourcedefinitions.apiextensions.k8s.io"),
    ("update", "inferencedeployments.infergate.io"),  # the spec is the user's
    ("delete", "inferencedeployments.infergate.io"),
    ("patch", "inferencedeployments.infergate.io", "--subresource=status"),  # update only
    ("update", "paritychecks.infergate.io"),  # the spec is immutable anyway
    ("update", "deployments.apps"),
    ("create", "daemonsets.apps"),
    ("create", "persistentvolumes"),
    ("create", "certificatesigningrequests.certificates.k8s.io"),
]


@pytest.mark.parametrize("ask", _NEEDED, ids=" ".join)
def test_clusterwide_install_grants_what_the_operator_does(
    clusterwide: Install, ask: tuple[str, ...]
) -> None:
    assert clusterwide.can(*ask, "-n", clusterwide.other)


@pytest.mark.parametrize("ask", _NEVER, ids=" ".join)
def test_clusterwide_install_is_not_cluster_admin(
    clusterwide: Install, ask: tuple[str, ...]
) -> None:
    assert not clusterwide.can(*ask, "-n", clusterwide.other)
    assert not clusterwide.can(*ask, "-n", "kube-system")


def test_runner_roles_bound_by_the_escalation_check(clusterwide: Install) -> None:
    """The operator may create Roles, but only with rules it holds: never secrets."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "steal", "namespace": clusterwide.other},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }
    answer = clusterwide.cluster.kubectl(
        "create", "--dry-run=server", f"--as={clusterwide.account}", "-f", "-",
        input=json.dumps(role), check=False,
    )  # fmt: skip
    assert answer.returncode != 0
    assert "attempting to grant RBAC permissions not currently held" in answer.stderr


@pytest.mark.parametrize("list_deployments", [False, True], ids=["retain", "delete"])
def test_the_operator_may_create_the_runner_role_it_renders(
    namespaced: Install, list_deployments: bool
) -> None:
    """The escalation check passes for the runner's Role exactly as rendered, with `list`
    on InferenceDeployments (golden whenDeleted: Delete) or without, where it is bound."""
    from infergate.render.check_children import runner_rbac

    body = {"metadata": {"name": "check", "namespace": namespaced.watched, "uid": "none"}}
    objects = runner_rbac(
        body, runner_namespace="infergate-system", deployments=["qwen"],
        services=["qwen-aaaaaaaaaa"], config_maps=["prompts"], list_deployments=list_deployments,
    )  # fmt: skip
    role = next(o for o in objects if o["kind"] == "Role")
    role["metadata"].pop("ownerReferences", None)
    verbs = {
        verb for rule in role["rules"] if rule["resources"] == ["inferencedeployments"]
        for verb in rule["verbs"]
    }  # fmt: skip
    assert verbs == ({"get", "list"} if list_deployments else {"get"})
    for where, allowed in ((namespaced.watched, True), (namespaced.other, False)):
        role["metadata"]["namespace"] = where
        answer = namespaced.cluster.kubectl(
            "create", "--dry-run=server", f"--as={namespaced.account}", "-f", "-",
            input=json.dumps(role), check=False,
        )  # fmt: skip
        assert (answer.returncode == 0) is allowed, answer.stderr


@pytest.mark.parametrize("ask", _NEEDED, ids=" ".join)
def test_namespaced_install_grants_it_in_watched_namespaces_only(
    namespaced: Install, ask: tuple[str, ...]
) -> None:
    assert namespaced.can(*ask, "-n", namespaced.watched)
    assert not namespaced.can(*ask, "-n", namespaced.other)
    assert not namespaced.can(*ask, "-n", "kube-system")


@pytest.mark.parametrize(
    "ask",
    [
        ("list", "namespaces"),
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        ("list", "inferencedeployments.infergate.io", "--all-namespaces"),
        ("list", "nodes"),
    ],
    ids=" ".join,
)
def test_namespaced_install_has_nothing_cluster_wide(
    namespaced: Install, ask: tuple[str, ...]
) -> None:
    assert not namespaced.can(*ask)


@pytest.mark.parametrize("ask", _NEVER, ids=" ".join)
def test_namespaced_install_is_not_namespace_admin(
    namespaced: Install, ask: tuple[str, ...]
) -> None:
    assert not namespaced.can(*ask, "-n", namespaced.watched)


def test_the_namespaced_install_runs_and_acts_only_where_it_is_bound(cluster: Cluster) -> None:
    """The overlay as built, renamed for a session: its operator comes up with no
    cluster-wide permission, rolls out a deployment in the namespace it is bound in, and
    leaves one in another namespace alone."""
    suffix = f"run-{uuid.uuid4().hex[:6]}"
    ops, watched, other = (f"{name}-{suffix}" for name in ("ops", "team-a", "team-b"))

    def to_watched(doc: dict[str, Any]) -> bool:  # bindings of the shared rule sets
        return doc["kind"] == "RoleBinding" and doc["roleRef"]["kind"] == "ClusterRole"

    documents = install_for_session(
        [d for d in built(cluster, NAMESPACED) if not to_watched(d)],
        namespace=ops,
        cluster_role=lambda name: f"{name}-{suffix}",
        operator_args=[],
    )
    documents = [d for d in documents if d["kind"] not in _ADMISSION_KINDS]
    bindings = _session_rbac(
        [d for d in built(cluster, NAMESPACED) if to_watched(d)], suffix, ops, watched
    )
    for document in documents:
        if document["kind"] == "Deployment":
            container = document["spec"]["template"]["spec"]["containers"][0]
            container["args"] = [
                f"--namespace={watched}" if a.startswith("--namespace=") else a
                for a in container["args"]
            ]
    for namespace in (watched, other):
        cluster.kubectl("create", "namespace", namespace)
    text = "\n---\n".join(json.dumps(d) for d in [*documents, *bindings])
    try:
        cluster.kubectl("apply", "-f", "-", input=text)
        assert [d for d in documents if d["kind"] == "ClusterRoleBinding"] == []
        for namespace in (other, watched):
            manifest = deployment_manifest(parity=False, auto_promote=False, replicas=1)
            cluster.apply(manifest, namespace)

        def stable() -> dict[str, Any] | None:
            status = cluster.get_json("idep", "qwen", "-n", watched).get("status") or {}
            return status if status.get("phase") == "Stable" else None

        wait_for(stable, 240, "the namespaced operator to roll out qwen in its namespace")
        assert cluster.get_json("idep", "qwen", "-n", other).get("status") is None
        assert cluster.get_json("deployments", "-n", other)["items"] == []
    finally:
        for namespace in (watched, other, ops):
            release_namespace(cluster, namespace)
        for doc in documents:
            if doc["kind"] == "ClusterRole":
                cluster.kubectl("delete", "clusterrole", doc["metadata"]["name"], check=False)
