"""The Helm chart on the local cluster, with the real `helm` (built from its Go module):
`helm template | kubectl apply --dry-run=server` is accepted, and `helm install`,
`helm upgrade` and `helm uninstall` bring the operator up, move it and take it away,
in the cluster-wide and in the namespace-scoped mode.

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
from tests.tools import tool
from tests.unit.packaging.kustomize import tenant_role

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "infergate"
JSON = dict[str, Any]


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


def test_helm_template_is_accepted_by_the_api_server(
    cluster: Cluster, helm: Helm, namespace: str
) -> None:
    """A server-side dry run of both modes (all but the Prometheus Operator's kinds)."""
    for values in (
        {"fullnameOverride": "ig-dry", "networkPolicy.enabled": "true"},
        {
            "fullnameOverride": "ig-dry-ns",
            "rbac.scope": "namespace",
            "watchNamespaces": f"{{{namespace}}}",
        },
    ):
        rendered = helm(
            "template",
            "dry",
            str(CHART),
            "--namespace",
            namespace,
            "--include-crds",
            *_sets(values),
        )
        documents = [d for d in yaml.safe_load_all(rendered) if d]
        text = "\n---\n".join(json.dumps(d) for d in documents)
        result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
        accepted = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
        assert len(accepted) == len(documents), result.stdout
        kinds = {d["kind"] for d in documents}
        assert {"Deployment", "ServiceAccount", "CustomResourceDefinition"} <= kinds


def test_install_upgrade_and_uninstall_cluster_wide(
    cluster: Cluster, helm: Helm, session: str, watched: str
) -> None:
    release, namespace, fullname = f"ig-{session}", f"ig-helm-{session}", f"ig-helm-{session}"
    values = {"fullnameOverride": fullname, "watchNamespaces": f"{{helm-{session}-*}}"}
    helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace",
         *_sets(values), "--wait", "--timeout=5m")  # fmt: skip
    try:
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
    helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace",
         *_sets(values), "--wait", "--timeout=5m")  # fmt: skip
    try:
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
        assert _stable_rollout(cluster, watched)
    finally:
        helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout=3m", check=False)
    assert not cluster.get_json(
        "roles", "-n", watched, "-l", f"app.kubernetes.io/instance={release}"
    )["items"]
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
