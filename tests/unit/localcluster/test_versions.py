"""The control plane's version is a parameter: one default for `make test`, the others for
`make test-matrix`, each with binaries and a cluster directory of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infergate_dev.localcluster import layout, nodes
from infergate_dev.localcluster.layout import (
    K8S_VERSION,
    K8S_VERSION_ENV,
    MATRIX_K8S_VERSIONS,
    ClusterLayout,
)

REPO = Path(__file__).resolve().parents[3]


def _make_variable(text: str, name: str) -> str:
    match = re.search(rf"^{name}\s*\?=\s*(.+)$", text, re.MULTILINE)
    assert match, name
    return match[1].strip()


def test_the_versions_agree_with_the_build_script_and_the_make_fragment() -> None:
    script = (REPO / "hack" / "build-control-plane.sh").read_text()
    assert f"K8S_VERSION=${{K8S_VERSION:-{K8S_VERSION}}}" in script
    matrix = (REPO / "mk" / "matrix.mk").read_text()
    assert tuple(_make_variable(matrix, "K8S_MATRIX_VERSIONS").split()) == MATRIX_K8S_VERSIONS
    assert K8S_VERSION not in MATRIX_K8S_VERSIONS
    assert all(layout.supported_minor(v) < layout.supported_minor(K8S_VERSION)
               for v in MATRIX_K8S_VERSIONS)  # fmt: skip


def test_the_build_script_fetches_the_gateway_api_release_the_layout_installs() -> None:
    script = (REPO / "hack" / "build-control-plane.sh").read_text()
    assert f"GATEWAY_API_VERSION=${{GATEWAY_API_VERSION:-{layout.GATEWAY_API_VERSION}}}" in script
    assert (
        f"GATEWAY_API_VERSION=${{GATEWAY_API_VERSION:-{layout.GATEWAY_API_VERSION_BEFORE_1_31}}}"
        in script
    )
    assert '[ "$k8s_minor" -lt 31 ]' in script


@pytest.mark.parametrize(
    ("kubernetes", "gateway_api"),
    [
        ("v1.30.14", layout.GATEWAY_API_VERSION_BEFORE_1_31),  # no CEL isIP() before 1.31
        ("v1.30.0", layout.GATEWAY_API_VERSION_BEFORE_1_31),
        ("v1.31.0", layout.GATEWAY_API_VERSION),
        ("v1.31.14", layout.GATEWAY_API_VERSION),
        (K8S_VERSION, layout.GATEWAY_API_VERSION),
    ],
)
def test_each_version_gets_a_gateway_api_release_its_api_server_accepts(
    kubernetes: str, gateway_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert layout.gateway_api_version(kubernetes) == gateway_api
    assert layout.gateway_api_crds(kubernetes).parent.name == f"gateway-api-{gateway_api}"
    monkeypatch.setenv(K8S_VERSION_ENV, kubernetes)
    assert layout.gateway_api_version() == gateway_api


def test_the_default_version_keeps_dot_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(K8S_VERSION_ENV, raising=False)
    monkeypatch.delenv("INFERGATE_CLUSTER_DIR", raising=False)
    assert ClusterLayout.default().root == REPO / ".cluster"
    assert layout.kubernetes_bin().name == f"kubernetes-{K8S_VERSION}"


def test_another_version_gets_its_own_binaries_cluster_and_node_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [older, *_] = MATRIX_K8S_VERSIONS
    monkeypatch.setenv(K8S_VERSION_ENV, older)
    monkeypatch.delenv("INFERGATE_CLUSTER_DIR", raising=False)
    assert ClusterLayout.default().root == REPO / f".cluster-{older}"
    assert layout.kubernetes_bin().name == f"kubernetes-{older}"
    assert layout.kubernetes_bin(K8S_VERSION).name == f"kubernetes-{K8S_VERSION}"
    shape = nodes.simulated_nodes()[0]
    assert nodes.node_object(shape)["status"]["nodeInfo"]["kubeletVersion"] == older


@pytest.mark.parametrize("bad", ["1.31.14", "v1.31", "v1.31.x", "latest"])
def test_a_version_that_is_not_vmajor_minor_patch_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"expected vMAJOR\.MINOR\.PATCH"):
        layout.supported_minor(bad)
