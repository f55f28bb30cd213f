"""The Helm chart on the local cluster, with the real `helm` (built from its Go module):
`helm template | kubectl apply --dry-run=server` is accepted for several value sets
(the API server is the schema check: kubeconform's schemas cannot be fetched here), and
`helm install`, `helm upgrade` and `helm uninstall` bring the operator up, move it and
take it away, in the cluster-wide and in the namespace-scoped mode. An upgrade from the
previous chart (as committed at PREVIOUS) to this one replaces the CRDs through the
chart's pre-upgrade hook while a canary's check is in flight; the check ends as it would
have, and the stable revision keeps serving.

Each release gets its own names (fullnameOverride) and watches only this module's
namespaces, so it never meets the objects of other tests or of a demo install. The
operator runs as a real pod on the local executor, under the chart's RBAC: a rollout
reaching Stable proves the grants work.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import REPO, Cluster, apply_crds, release_namespace, wait_for
from tests.integration.controller_support import Idep, deployment_manifest
from tests.integration.fault_support import RunnerIdep
from tests.tools import tool
from tests.unit.packaging.kustomize import tenant_role

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "infergate"
JSON = dict[str, Any]
# The last commit whose chart had no values schema and no CRD upgrade hook: what a
# cluster upgrading to this chart runs today.
PREVIOUS = "80a25fcc8a9c83d90af1b7e041b95ba0f33c0fa1"
IDEP_CRD = "inferencedeployments.infergate.io"


class Helm:
    def __init__(self, cluster: Cluster, home: Path) -> None:
        self.cluster = cluster
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 360) -> str:
        result = subprocess.run(
            [str(tool("helm")), *args], capture_output=True, text=True, env=self.env,
            timeout=timeout, check=False,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}{result.stderr}"
        shown = "" if args[0] == "template" else result.stdout.strip()[-1500:]
        print(f"$ helm {' '.join(args)}\n{shown}")  # noqa: T201 - the log shows what ran
        return result.stdout


@pytest.fixture(scope="module")
def helm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    apply_crds(cluster)
    return Helm(cluster, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def session() -> str:
    return uuid.uuid4().hex[:6]


def _sets(values: dict[str, str]) -> list[str]:
    return [a for key, value in values.items() for a in ("--set", f"{key}={value}")]


def _operator_ready(cluster: Cluster, namespace: str) -> JSON | None:
    pods = cluster.get_json(
        "pods", "-n", namespace, "-l", "app.kubernetes.io/name=infergate-operator"
    )["items"]
    for pod in pods:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not pod["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in conditions
        ):
            return dict(pod)
    return None


def _print_operator_logs(cluster: Cluster, namespace: str, tail: int = 80) -> None:
    """The last lines of each operator pod's log in `namespace`, for a failed test's report."""
    pods = cluster.get_json(
        "pods", "-n", namespace, "-l", "app.kubernetes.io/name=infergate-operator"
    )["items"]
    for pod in pods:
        lines = cluster.pod_log(namespace, pod["metadata"]["name"], "operator").splitlines()
        print(f"--- {pod['metadata']['name']} (last {tail} lines)")  # noqa: T201
        print("\n".join(lines[-tail:]))  # noqa: T201


def _stable_rollout(cluster: Cluster, namespace: str) -> str:
    """An InferenceDeployment in `namespace` reaches Stable under the installed operator."""
    idep = Idep(cluster, namespace, deployment_manifest(replicas=1))
    idep.apply()
    return idep.wait_stable(timeout=180)


@pytest.fixture
def watched(cluster: Cluster, session: str) -> Iterator[str]:
    name = f"helm-{session}-{uuid.uuid4().hex[:4]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    release_namespace(cluster, name)


DRY_RUNS: list[tuple[str, dict[str, str], list[str]]] = [
    ("defaults", {}, []),
    ("kubernetes-1.30", {}, ["--kube-version", "1.30.0"]),
    ("kubernetes-1.31", {}, ["--kube-version", "1.31.0"]),
    (
        "placement",
        {
            "networkPolicy.enabled": "true",
            "imagePullSecrets[0].name": "regcred",
            "operator.replicas": "3",
            "operator.priorityClassName": "system-cluster-critical",
            "operator.nodeSelector.pool": "system",
            "operator.tolerations[0].key": "dedicated",
            "operator.tolerations[0].operator": "Exists",
            "serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account": "ig@p.iam",
            "operator.extraEnv[0].name": "HTTPS_PROXY",
            "operator.extraEnv[0].value": "http://proxy:3128",
        },
        [],
    ),
    (
        "all-off",
        {"admission.enabled": "false", "monitoring.enabled": "false", "crds.upgrade": "false"},
        [],
    ),
    # A tenant namespace apart from the release's, where the parity runners run (the
    # chart refuses the release namespace among the watched ones).
    ("namespace-scope", {"rbac.scope": "namespace", "watchNamespaces": "{NAMESPACE-t}"}, []),
]


# Rendered for an older cluster without asking one: `make test-matrix` applies it to each
# supported version's API server too.
MATRIX_DRY_RUNS = ("kubernetes-1.30", "kubernetes-1.31")


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(d, id=d[0], marks=[pytest.mark.matrix] if d[0] in MATRIX_DRY_RUNS else [])
        for d in DRY_RUNS
    ],
)
def test_helm_template_is_accepted_by_the_api_server(
    cluster: Cluster, helm: Helm, namespace: str, case: tuple[str, dict[str, str], list[str]]
) -> None:
    """A server-side dry run of each value set (the Prometheus Operator's kinds are left
    out: the local cluster has not their CRDs)."""
    name, given, flags = case
    values = {k: v.replace("NAMESPACE", namespace) for k, v in given.items()}
    tenants = f"{namespace}-t"
    if any(tenants in v for v in values.values()):
        cluster.kubectl("create", "namespace", tenants)
    try:
        rendered = helm(
            "template", "dry", str(CHART), "--namespace", namespace, "--include-crds",
            "--set", f"fullnameOverride=ig-dry-{name.replace('.', '-')}", *_sets(values), *flags,
        )  # fmt: skip
        documents = [d for d in yaml.safe_load_all(rendered) if d]
        text = "\n---\n".join(json.dumps(d) for d in documents)
        result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
    finally:
        if any(tenants in v for v in values.values()):
            release_namespace(cluster, tenants)
    accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(documents), result.stdout
    kinds = {d["kind"] for d in documents}
    assert {"Deployment", "ServiceAccount", "CustomResourceDefinition"} <= kinds
    assert ("MutatingAdmissionPolicy" in kinds) == (name not in (*MATRIX_DRY_RUNS, "all-off"))
    assert ("Job" in kinds) == (name != "all-off")  # the CRD upgrade hook


@pytest.mark.matrix
def test_install_upgrade_and_uninstall_cluster_wide(
    cluster: Cluster, helm: Helm, session: str, watched: str
) -> None:
    """On every supported version (`make test-matrix`): the chart asks the cluster's version
    itself and leaves the MutatingAdmissionPolicy out before 1.36."""
    release, namespace, fullname = f"ig-{session}", f"ig-helm-{session}", f"ig-helm-{session}"
    values = {"fullnameOverride": fullname, "watchNamespaces": f"{{helm-{session}-*}}"}
    try:  # a failed install leaves a release (cluster-wide policies among it): uninstalled below
        helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace",
             *_sets(values), "--wait", "--timeout=5m")  # fmt: skip
        manifest = helm("get", "manifest", release, "--namespace", namespace)
        kinds = {d["kind"] for d in yaml.safe_load_all(manifest) if d}
        assert "ValidatingAdmissionPolicy" in kinds
        assert ("MutatingAdmissionPolicy" in kinds) == cluster.serves_mutating_admission_policy()
        first = wait_for(
            lambda: _operator_ready(cluster, namespace), 180, "the operator pod to be Ready"
        )
        assert _stable_rollout(cluster, watched)
        roles = cluster.get_json("clusterroles", "-l", f"app.kubernetes.io/instance={release}")[
            "items"
        ]
        assert {r["metadata"]["name"] for r in roles if not tenant_role(r)} == {
            f"{fullname}-operator",
            f"{fullname}-paritycheck-controller",
        }
        assert {r["metadata"]["name"] for r in roles if tenant_role(r)} == {
            f"{fullname}-edit",
            f"{fullname}-view",
        }

        helm("upgrade", release, str(CHART), "--namespace", namespace, "--reuse-values",
             "--set", "operator.extraArgs={--resync-seconds=3}", "--wait", "--timeout=5m")  # fmt: skip
        status = json.loads(helm("status", release, "--namespace", namespace, "-o", "json"))
        assert status["version"] == 2
        assert status["info"]["status"] == "deployed"

        def replaced() -> JSON | None:
            pod = _operator_ready(cluster, namespace)
            return pod if pod and pod["metadata"]["uid"] != first["metadata"]["uid"] else None

        pod = wait_for(replaced, 180, "the upgraded operator pod to be Ready")
        assert pod["spec"]["containers"][0]["args"][-1] == "--resync-seconds=3"
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=3m", check=False)
    assert not cluster.get_json("clusterroles", "-l", f"app.kubernetes.io/instance={release}")[
        "items"
    ]
    assert not cluster.get_json("deployments", "-n", namespace)["items"]
    # CustomResourceDefinitions stay: deleting them would delete every user's objects.
    cluster.kubectl("get", "crd", "inferencedeployments.infergate.io")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_install_namespace_scoped_grants_roles_only_where_it_watches(
    cluster: Cluster, helm: Helm, session: str, watched: str
) -> None:
    release, namespace, fullname = f"ig-ns-{session}", f"ig-helm-ns-{session}", f"ig-ns-{session}"
    values = {
        "fullnameOverride": fullname,
        "rbac.scope": "namespace",
        "watchNamespaces": f"{{{watched}}}",
    }
    try:  # a failed install leaves a release (cluster-wide policies among it): uninstalled below
        helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace",
             *_sets(values), "--wait", "--timeout=5m")  # fmt: skip
        wait_for(lambda: _operator_ready(cluster, namespace), 180, "the operator pod to be Ready")
        # The only cluster-wide roles are the tenant roles aggregated into admin, edit and
        # view: they grant namespace users, never the operator.
        cluster_roles = cluster.get_json(
            "clusterroles", "-l", f"app.kubernetes.io/instance={release}"
        )["items"]
        assert all(tenant_role(role) for role in cluster_roles), [
            role["metadata"]["name"] for role in cluster_roles
        ]
        roles = cluster.get_json(
            "roles", "-n", watched, "-l", f"app.kubernetes.io/instance={release}"
        )["items"]
        assert {r["metadata"]["name"] for r in roles} == {
            f"{fullname}-operator",
            f"{fullname}-paritycheck-controller",
        }
        # In its own namespace: the Lease, and the runners' Jobs it makes there.
        own = cluster.get_json(
            "roles", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}"
        )["items"]
        assert {r["metadata"]["name"] for r in own} == {
            f"{fullname}-operator-leader-election",
            f"{fullname}-runner-namespace",
        }
        assert _stable_rollout(cluster, watched)
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=3m", check=False)
    assert not cluster.get_json(
        "roles", "-n", watched, "-l", f"app.kubernetes.io/instance={release}"
    )["items"]
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _previous_chart(directory: Path) -> Path:
    """The chart as committed at PREVIOUS, unpacked under `directory`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "charts/infergate"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory / "charts" / "infergate"


def _age_crd(cluster: Cluster) -> JSON:
    """Make the installed InferenceDeployment CRD look like an older version's: one printer
    column fewer and a schema field this version does not have. Returns the CRD as it was."""
    crd = cluster.get_json("crd", IDEP_CRD)
    version = crd["spec"]["versions"][0]
    patch = [
        {"op": "remove", "path": "/spec/versions/0/additionalPrinterColumns/"
                                 f"{len(version['additionalPrinterColumns']) - 1}"},
        {"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/"
                              "properties/retiredField", "value": {"type": "string"}},
    ]  # fmt: skip
    cluster.kubectl("patch", "crd", IDEP_CRD, "--type=json", "-p", json.dumps(patch))
    return dict(crd)


THIS_TREES_ROLES = (
    "templates/clusterrole-infergate-operator.yaml",
    "templates/clusterrole-infergate-paritycheck-controller.yaml",
)
"""The ClusterRoles of this tree's chart that its operator's ServiceAccount is bound to."""


def _grant_this_trees_rights(helm: Helm, cluster: Cluster, fullname: str, namespace: str) -> None:
    """The local executor runs this tree's operator code whatever the image's tag, so the
    previous release's pods run code that watches and writes kinds the previous operator
    did not (a stable revision's PodDisruptionBudget, a multi-node revision's
    LeaderWorkerSet wherever its CRD is installed, events.k8s.io Events); kopf stops
    watching a kind whose watch is refused. Grant the rules of this tree's chart's
    ClusterRoles beside the previous chart, which the previous image would never have
    needed, before the previous operator starts (a grant that came after its first watch
    came too late); the upgrade's own RBAC is what the upgraded operator runs under. Read
    from this tree's chart, the grant follows every right a later change adds."""
    rendered = helm("template", fullname, str(CHART), "--namespace", namespace,
                    "--set", f"fullnameOverride={fullname}",
                    *(a for path in THIS_TREES_ROLES for a in ("--show-only", path)))  # fmt: skip
    rules = [rule for role in yaml.safe_load_all(rendered) if role for rule in role["rules"]]
    assert rules, f"no rules in this tree's {THIS_TREES_ROLES}"
    name = f"{fullname}-newer-rights"
    objects = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": f"{fullname}-operator",
                       "namespace": namespace}]},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": objects}))  # fmt: skip


def test_upgrade_from_the_previous_chart_replaces_the_crds_with_a_canary_in_flight(
    cluster: Cluster, helm: Helm, session: str, watched: str, tmp_path: Path
) -> None:
    release, namespace = f"ig-up-{session}", f"ig-helm-up-{session}"
    fullname = f"ig-up-{session}"
    values = {"fullnameOverride": fullname, "watchNamespaces": f"{{helm-{session}-*}}"}
    previous = _previous_chart(tmp_path)
    assert not (previous / "values.schema.json").exists()  # the chart before this one
    try:  # a failed install leaves a release (cluster-wide policies among it): uninstalled below
        # A cluster that runs the previous chart has the previous chart's CRDs (Helm applies
        # the chart's crds/ server-side at install, which CRDs of a newer tree would
        # contradict): restored by apply_crds below.
        crds = sorted((previous / "crds").glob("*.yaml"))
        cluster.kubectl("replace", *(f"--filename={path}" for path in crds))
        _grant_this_trees_rights(helm, cluster, fullname, namespace)
        helm("install", release, str(previous), "--namespace", namespace, "--create-namespace",
             *_sets(values), "--wait", "--timeout=5m")  # fmt: skip
        first = wait_for(
            lambda: _operator_ready(cluster, namespace), 180, "the operator pod to be Ready"
        )
        # Verdicts as the check's recorded runner writes them: a token of its ServiceAccount,
        # which the upgraded operator makes in its own namespace, the release's.
        idep = RunnerIdep(
            cluster, watched, deployment_manifest(replicas=2), runner_namespace=namespace
        )
        idep.apply()
        stable = idep.wait_stable(timeout=180)
        idep.apply(dtype="float16")
        canary, check = idep.wait_check(timeout=120)
        assert idep.revisions() == {stable: 2, canary: 1}
        expected = cluster.get_json("crd", IDEP_CRD)
        _age_crd(cluster)
        aged = cluster.get_json("crd", IDEP_CRD)
        assert "retiredField" in json.dumps(aged["spec"])

        # The operator image of this tree: the local executor runs its code from the
        # source tree (an image would carry it).
        helm("upgrade", release, str(CHART), "--namespace", namespace,
             "--reset-then-reuse-values",
             "--set", "operator.extraEnv[0].name=PYTHONPATH",
             "--set", f"operator.extraEnv[0].value={REPO / 'operator'}",
             "--wait", "--timeout=5m")  # fmt: skip
        status = json.loads(helm("status", release, "--namespace", namespace, "-o", "json"))
        assert (status["version"], status["info"]["status"]) == (2, "deployed")

        # The hook replaced the CRD with this version's, then went away.
        upgraded = cluster.get_json("crd", IDEP_CRD)
        assert "retiredField" not in json.dumps(upgraded["spec"])
        assert (
            upgraded["spec"]["versions"][0]["additionalPrinterColumns"]
            == expected["spec"]["versions"][0]["additionalPrinterColumns"]
        )

        def hook_gone() -> bool:
            jobs = cluster.get_json(
                "jobs", "-n", namespace, "-l", "app.kubernetes.io/name=infergate-crd-upgrade"
            )["items"]
            roles = cluster.get_json(
                "clusterroles", "-l", f"app.kubernetes.io/instance={release},"
                "app.kubernetes.io/name=infergate-crd-upgrade",
            )["items"]  # fmt: skip
            return not jobs and not roles

        wait_for(hook_gone, 60, "the succeeded hook's Job and ClusterRole to be deleted")

        def replaced() -> JSON | None:
            pod = _operator_ready(cluster, namespace)
            return pod if pod and pod["metadata"]["uid"] != first["metadata"]["uid"] else None

        wait_for(replaced, 180, "an upgraded operator pod to be Ready")
        # The canary's check, started under the previous operator, ends as it would have:
        # its verdict is acted on by the new one, and the stable served until then.
        assert idep.status()["stableRevision"] == stable
        assert idep.revisions()[stable] == 2
        idep.verdict(check["metadata"]["name"], "Passed", passed=True)
        idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=120)
    except BaseException:
        _print_operator_logs(cluster, namespace)
        raise
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=3m", check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", f"{fullname}-newer-rights",
                        "--ignore-not-found", check=False)  # fmt: skip
        apply_crds(cluster)  # whatever happened above, the CRDs of this tree again
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
