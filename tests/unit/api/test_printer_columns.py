"""The InferenceDeployment's `kubectl get` columns, read by kubectl's own JSONPath (the
library the API server prints columns with) from statuses the controller writes. No API
server: `kubectl annotate --local -o jsonpath` prints a local file through that printer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infergate.api.crd import INFERENCE_DEPLOYMENT, crd_document
from infergate.plan import reasons
from infergate_dev.localcluster.layout import kubernetes_bin
from tests.unit.api.manifests import full_deployment_status

_SEPARATOR = "|"


def _columns() -> list[dict[str, Any]]:
    version = crd_document(INFERENCE_DEPLOYMENT)["spec"]["versions"][0]
    columns: list[dict[str, Any]] = version["additionalPrinterColumns"]
    return columns


def _cells(status: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    """Each column's value for an object with this status, as `kubectl get` shows it."""
    kubectl = kubernetes_bin() / "kubectl"
    if not kubectl.exists():
        pytest.fail(f"no kubectl at {kubectl} (make setup builds it)")
    obj = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {"engine": {"kind": "vllm"}},
        "status": status,
    }
    path = tmp_path / "idep.json"
    path.write_text(json.dumps(obj))
    columns = _columns()
    # The API server wraps each column's jsonPath in braces, as this template does.
    template = _SEPARATOR.join("{" + c["jsonPath"] + "}" for c in columns)
    result = subprocess.run(
        [str(kubectl), "annotate", "--local", "-f", str(path), "shown=yes",
         "-o", f"jsonpath={template}"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": str(tmp_path / "no-cluster")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return dict(zip([c["name"] for c in columns], result.stdout.split(_SEPARATOR), strict=True))


def _drifted(status: str) -> dict[str, str]:
    return {
        "type": reasons.DRIFTED,
        "status": status,
        "lastTransitionTime": "2026-12-02T12:00:00Z",
        "reason": reasons.DRIFT_DETECTED if status == "True" else reasons.NO_DRIFT_DETECTED,
        "message": "drift run qwen-ab12cd34ef-drift2",
    }


@pytest.mark.parametrize(
    ("drifted", "shown"),
    [
        pytest.param("True", "True", id="drifted"),
        pytest.param("False", "False", id="no-drift"),
        pytest.param("Unknown", "Unknown", id="not-yet-known"),
        pytest.param(None, "", id="no-watch"),
    ],
)
def test_drifted_shows_the_drifted_condition_and_nothing_without_a_watch(
    drifted: str | None, shown: str, tmp_path: Path
) -> None:
    status = full_deployment_status()
    if drifted is None:
        del status["drift"]
    else:
        status["conditions"] = [*status["conditions"], _drifted(drifted)]
    cells = _cells(status, tmp_path)
    assert cells["Drifted"] == shown
    # A drifted stable revision still reads Stable and Passed: only Drifted tells.
    assert (cells["Phase"], cells["Stable"], cells["Parity"]) == ("Stable", "ab12cd34ef", "Passed")
