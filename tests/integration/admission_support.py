"""The admission policies of manifests/admission, installed for one test session.

Policies and their bindings are cluster-scoped, so each session installs its own copy:
names suffixed, the operator's identity and namespace moved to a session namespace, and
the policies that judge users' requests bound only to namespaces carrying the session's
label (the ones that judge the operator's requests match this session's operator alone).
Requests are made as the identities the policies tell apart: the operator's
ServiceAccount and other users by impersonation, runner ServiceAccounts with real tokens
(so the API server, not the test, sets their uid).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness import REPO, Cluster, wait_for

ADMISSION_DIR = REPO / "manifests" / "admission"
OPERATOR_DIR = REPO / "manifests" / "operator"
RUNNER_DIR = REPO / "manifests" / "runner"
SESSION_LABEL = "infergate.io/admission-test"
INSTALL_NAMESPACE = "infergate-system"
# Policies that judge the operator's own requests select them by its (session) user name.
_OPERATOR_POLICIES = ("infergate-operator-workloads", "infergate-operator-namespaces")


def built(cluster: Cluster, directory: Path) -> list[dict[str, Any]]:
    text = cluster.kubectl("kustomize", str(directory)).stdout
    return [d for d in yaml.safe_load_all(text) if d]


@dataclass
class Result:
    """What a request answered: allowed or refused, and the API server's message."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def allowed(self) -> bool:
        return self.returncode == 0


@dataclass
class AdmissionSession:
    """One installed copy of the policies and a stand-in operator."""

    cluster: Cluster
    session: str
    ops_namespace: str
    tmp: Path

    @property
    def operator(self) -> str:
        return f"system:serviceaccount:{self.ops_namespace}:infergate-operator"

    def name(self, original: str) -> str:
        return f"{original}-{self.session}"

    # -- requests ----------------------------------------------------------------------

    def as_user(self, user: str, *args: str, input: str | None = None) -> Result:  # noqa: A002
        done = self.cluster.kubectl(f"--as={user}", *args, input=input, check=False)
        return Result(done.returncode, done.stdout, done.stderr)

    def as_operator(self, *args: str, input: str | None = None) -> Result:  # noqa: A002
        return self.as_user(self.operator, *args, input=input)

    def token_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig holding a real token of the ServiceAccount (its uid set by the
        server): what a pod running as that account would present."""
        token = self.cluster.kubectl(
            "create", "token", account, "-n", namespace, "--duration=10m"
        ).stdout.strip()
        config = yaml.safe_load(self.cluster.kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]
        path = self.tmp / f"token-{uuid.uuid4().hex[:6]}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "local", "cluster": server}],
                    "users": [{"name": account, "user": {"token": token}}],
                    "contexts": [{"name": "sa", "context": {"cluster": "local", "user": account}}],
                    "current-context": "sa",
                }
            )
        )
        return path

    def as_service_account(self, namespace: str, account: str, *args: str) -> Result:
        """A request with a real token of the ServiceAccount (its uid set by the server)."""
        path = self.token_kubeconfig(namespace, account)
        done = subprocess.run(
            [str(self.cluster.kubectl_path), f"--kubeconfig={path}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    # -- setup -------------------------------------------------------------------------

    def apply(self, documents: list[dict[str, Any]]) -> None:
        self.cluster.kubectl(
            "apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in documents)
        )

    def allow(self, namespace: str, **annotations: str) -> None:
        """Set (as a cluster admin) what the namespace may reach: the Namespace annotations."""
        args = [
            f"infergate.io/{key.replace('_', '-')}={value}" for key, value in annotations.items()
        ]
        self.cluster.kubectl("annotate", "namespace", namespace, "--overwrite", *args)

    def tenant_namespace(self, name: str) -> str:
        self.cluster.kubectl("create", "namespace", name)
        self.cluster.kubectl("label", "namespace", name, f"{SESSION_LABEL}={self.session}")
        return name

    def grant(
        self, namespace: str, name: str, rules: list[dict[str, Any]], subject: dict[str, str]
    ) -> None:
        """A Role with `rules` in `namespace`, bound to one subject."""
        role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        self.apply(
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": name, "namespace": namespace},
                    "rules": rules,
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": namespace},
                    "roleRef": role_ref,
                    "subjects": [subject],
                },
            ]
        )


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def service_account(namespace: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def session_policies(
    documents: list[dict[str, Any]], session: str, ops_namespace: str
) -> list[dict[str, Any]]:
    """The policies of manifests/admission renamed for one session (see the module doc)."""
    out = []
    for original in documents:
        doc = json.loads(json.dumps(original).replace(INSTALL_NAMESPACE, ops_namespace))
        policy = doc["spec"].get("policyName", doc["metadata"]["name"])
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{session}"
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = f"{policy}-{session}"
            if policy not in _OPERATOR_POLICIES:
                doc["spec"]["matchResources"] = {
                    "namespaceSelector": {"matchLabels": {SESSION_LABEL: session}}
                }
        out.append(doc)
    return out


def session_operator_rbac(
    cluster: Cluster, session: str, ops_namespace: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The operator's ClusterRoles and cluster-wide bindings, renamed for one session."""
    documents = [
        d
        for directory in (OPERATOR_DIR, RUNNER_DIR)
        for d in built(cluster, directory)
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]
    names = []
    for doc in documents:
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-adm-{session}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-adm-{session}"
            for subject in doc["subjects"]:
                subject["namespace"] = ops_namespace
        names.append(f"{doc['kind'].lower()}/{doc['metadata']['name']}")
    return documents, names


def wait_until_enforced(probe: Any, what: str) -> None:
    """Policies reach the admission chain through informers: poll until one bites."""
    wait_for(lambda: not probe().allowed, 30, what)


def recorded_runner_account(
    cluster: Cluster, namespace: str, check: str, runners: str | None = None
) -> tuple[str, str] | None:
    """(name, namespace) of the ServiceAccount the operator recorded in the check's
    status.runnerServiceAccount, found by its uid in `runners` (or any namespace); None
    until it is recorded and exists."""
    body = cluster.get_json("pcheck", check, "-n", namespace)
    account = (body.get("status") or {}).get("runnerServiceAccount") or {}
    name, uid = account.get("name"), account.get("uid")
    if not name:
        return None
    where = ["-n", runners] if runners else ["-A"]
    listed = cluster.get_json(
        "serviceaccounts", *where, "--field-selector", f"metadata.name={name}"
    )["items"]
    found = [a["metadata"]["namespace"] for a in listed if a["metadata"]["uid"] == uid]
    return (str(name), found[0]) if found else None


def patch_check_status_as(
    cluster: Cluster, account: tuple[str, str], namespace: str, check: str, status: dict[str, Any]
) -> Any:
    """PATCH a ParityCheck's status subresource (merge) with a real token of `account`
    (name, namespace), as the runner writes its verdict: the only verb its Role grants
    there (kubectl would read the subresource first). Returns the httpx response."""
    import ssl

    import httpx

    name, account_namespace = account
    token = cluster.kubectl(
        "create", "token", name, "-n", account_namespace, "--duration=10m"
    ).stdout.strip()
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return httpx.patch(
        f"{server}/apis/infergate.io/v1alpha1/namespaces/{namespace}/paritychecks/{check}/status",
        content=json.dumps({"status": status}),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/merge-patch+json",
        },
        verify=ssl.create_default_context(cafile=str(cluster.layout.pki / "ca.crt")),
        timeout=30,
    )
