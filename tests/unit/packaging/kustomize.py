"""Build kustomizations with the cluster's kubectl (its built-in kustomize); no API server."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate_dev.localcluster.layout import K8S_VERSION, kubernetes_bin
from tests.unit.packaging.lockfiles import REPO

MANIFESTS = REPO / "manifests"
PRODUCTION = MANIFESTS / "overlays" / "production"


def kubectl_binary() -> Path:
    """The kubectl `make setup` builds (in the version cache; the cluster links it)."""
    return kubernetes_bin(K8S_VERSION) / "kubectl"


@cache
def _build(directory: Path) -> tuple[dict[str, Any], ...]:
    kubectl = kubectl_binary()
    if not kubectl.exists():
        pytest.fail(f"no kubectl at {kubectl} (make setup builds it)")
    result = subprocess.run(
        [str(kubectl), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"kustomize {directory}: {result.stderr}"
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def build(directory: Path) -> list[dict[str, Any]]:
    """The documents `kubectl kustomize DIRECTORY` outputs."""
    return [dict(d) for d in _build(directory)]


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} in the build"
    return found[0]


def operator_service_account(documents: list[dict[str, Any]]) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount the operator Deployment runs as."""
    deployment = one(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    return deployment["metadata"]["namespace"], pod["serviceAccountName"]


def bound_cluster_roles(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ClusterRoles the build binds to the operator's ServiceAccount."""
    namespace, account = operator_service_account(documents)
    names = {
        binding["roleRef"]["name"]
        for binding in documents
        if binding["kind"] == "ClusterRoleBinding"
        and any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace
            for s in binding["subjects"]
        )
    }
    return [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] in names]


def tenant_role(document: dict[str, Any]) -> bool:
    """A ClusterRole aggregated into a built-in role (admin, edit, view) for namespace users."""
    labels = document["metadata"].get("labels") or {}
    return document["kind"] == "ClusterRole" and any(
        key.startswith("rbac.authorization.k8s.io/aggregate-to-") for key in labels
    )
