"""The CRDs against the real API server: examples accepted, mistakes refused with a
message naming the field and what is allowed, docs in `kubectl explain`, printer
columns in `kubectl get`, and every status field kept (not pruned)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Cluster
from tests.unit.api.manifests import (
    CRDS_DIR,
    EXAMPLES_DIR,
    InvalidManifest,
    example_documents,
    example_files,
    full_check_status,
    full_deployment_status,
    invalid_manifests,
)

pytestmark = pytest.mark.cluster

_CRD_NAMES = ("inferencedeployments.infergate.io", "paritychecks.infergate.io")
_KIND_RESOURCE = {"InferenceDeployment": "idep", "ParityCheck": "pcheck"}


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Cluster:
    """The CRDs of this checkout, installed and Established."""
    cluster.kubectl("apply", "-f", str(CRDS_DIR))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{name}" for name in _CRD_NAMES),
    )
    return cluster


def _is_subset(part: Any, whole: Any) -> bool:
    if isinstance(part, Mapping):
        return isinstance(whole, Mapping) and all(
            key in whole and _is_subset(value, whole[key]) for key, value in part.items()
        )
    if isinstance(part, list):
        return (
            isinstance(whole, list)
            and len(part) == len(whole)
            and all(_is_subset(a, b) for a, b in zip(part, whole, strict=True))
        )
    return bool(part == whole)


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.stem)
def test_example_is_accepted_and_stored_unpruned(crds: Cluster, namespace: str, path: Path) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(path))
    for stem, document in example_documents():
        if stem != path.stem or document["kind"] not in _KIND_RESOURCE:
            continue
        stored = crds.get_json(
            _KIND_RESOURCE[document["kind"]], document["metadata"]["name"], "-n", namespace
        )
        # Everything written is kept (no field pruned, explicit nulls included)...
        assert _is_subset(document["spec"], stored["spec"])
    # ...and the defaults the server filled in are the models' defaults.
    if path.stem == "vllm-gpu":
        stored = crds.get_json("idep", "qwen", "-n", namespace)
        assert stored["spec"]["rollout"]["parity"]["runner"]["activeDeadlineSeconds"] == 3600
        assert stored["spec"]["rollout"]["parity"]["hiddenStates"]["enabled"] is True


@pytest.mark.parametrize("manifest", invalid_manifests(), ids=lambda m: m.name)
def test_invalid_manifest_is_refused_by_the_api_server(
    crds: Cluster, namespace: str, manifest: InvalidManifest
) -> None:
    result = crds.kubectl("apply", "-n", namespace, "-f", str(manifest.path), check=False)
    assert result.returncode != 0, f"{manifest.name} was accepted:\n{result.stdout}"
    for expected in manifest.server_expects:
        assert expected in result.stderr, f"{expected!r} not in:\n{result.stderr}"
    listed = crds.kubectl("get", "idep,pcheck", "-n", namespace, "-o", "name")
    assert listed.stdout.strip() == ""


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("idep.spec.engine.dtype", "never auto"),
        ("idep.spec.accelerator.kind", "huawei.com/Ascend910"),
        ("idep.spec.rollout.canaryReplicas", "at most spec.replicas"),
        ("idep.status.conditions", "ConfigDrifted"),
        ("pcheck.spec.sampling.temperature", "must be 0 (greedy)"),
        ("pcheck.spec.thresholds", "a field left out keeps the profile's limit"),
        ("pcheck.spec.disabledChecks", "switched off even where the profile sets them"),
        ("pcheck.status.verdict.reasons", "naming the metric, value, threshold and prompts"),
    ],
)
def test_explain_shows_field_docs(crds: Cluster, field: str, expected: str) -> None:
    explained = crds.kubectl("explain", field).stdout
    assert expected in " ".join(explained.split())


def test_get_shows_printer_columns_from_status(crds: Cluster, namespace: str) -> None:
    crds.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        str(EXAMPLES_DIR / "vllm-gpu.yaml"),
    )
    patch = {
        "status": {
            "phase": "Verifying",
            "stableRevision": "ab12cd34ef",
            "canaryRevision": "0011223344",
            "lastParityCheck": {"name": "qwen-0011223344", "verdict": "Pending"},
            "conditions": [
                {
                    "type": "Drifted",
                    "status": "True",
                    "lastTransitionTime": "2026-12-02T12:00:00Z",
                    "reason": "DriftDetected",
                    "message": "drift run qwen-ab12cd34ef-drift2: stable revision ab12cd34ef "
                    "no longer answers like its golden record",
                }
            ],
        }
    }
    crds.kubectl(
        "patch", "idep", "qwen", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(patch),
    )  # fmt: skip
    table = crds.kubectl("get", "idep", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "STABLE", "CANARY", "PARITY", "DRIFTED", "AGE"]
    assert table[1].split()[:6] == [
        "qwen", "Verifying", "ab12cd34ef", "0011223344", "Pending", "True",
    ]  # fmt: skip
    wide = crds.kubectl("get", "infdep", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[7:] == ["ENGINE", "DTYPE", "ACCELERATOR", "REPLICAS"]
    assert wide[1].split()[7:] == ["vllm", "bfloat16", "nvidia-gpu", "2"]


def test_every_status_field_is_kept(crds: Cluster, namespace: str) -> None:
    examples = EXAMPLES_DIR
    crds.kubectl("apply", "-n", namespace, "-f", str(examples / "vllm-gpu.yaml"))
    crds.kubectl("apply", "-n", namespace, "-f", str(examples / "paritycheck.yaml"))
    for resource, name, status in (
        ("idep", "qwen", full_deployment_status()),
        ("pcheck", "qwen-vs-reference", full_check_status()),
    ):
        crds.kubectl(
            "patch", resource, name, "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        assert crds.get_json(resource, name, "-n", namespace)["status"] == status


def test_scale_subresource_sets_replicas(crds: Cluster, namespace: str) -> None:
    examples = EXAMPLES_DIR
    crds.kubectl("apply", "-n", namespace, "-f", str(examples / "vllm-gpu.yaml"))
    crds.kubectl("scale", "idep", "qwen", "-n", namespace, "--replicas=4")
    assert crds.get_json("idep", "qwen", "-n", namespace)["spec"]["replicas"] == 4


def test_migration_is_an_update_of_the_same_object(crds: Cluster, namespace: str) -> None:
    examples = EXAMPLES_DIR
    crds.kubectl("apply", "-n", namespace, "-f", str(examples / "vllm-gpu.yaml"))
    before = crds.get_json("idep", "qwen", "-n", namespace)
    crds.kubectl("apply", "-n", namespace, "-f", str(examples / "gpu-to-ascend-migration.yaml"))
    after = crds.get_json("idep", "qwen", "-n", namespace)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    assert (after["spec"]["engine"]["kind"], after["spec"]["accelerator"]["kind"]) == (
        "mindformers",
        "ascend-npu",
    )
    listed = crds.kubectl("get", "infergate", "-n", namespace, "-o", "name").stdout.split()
    assert "inferencedeployment.infergate.io/qwen" in listed


def test_a_parity_check_spec_cannot_be_edited(crds: Cluster, namespace: str) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES_DIR / "paritycheck.yaml"))
    for patch in (
        {"spec": {"candidate": {"revision": "0123456789"}}},  # point it at another revision
        {"spec": {"disabledChecks": ["minTokenMatchRate"]}},  # switch a check off
        {"spec": {"thresholds": {"minTokenMatchRate": 0.1}}},
    ):
        edited = crds.kubectl(
            "patch", "pcheck", "qwen-vs-reference", "-n", namespace, "--type=merge",
            "-p", json.dumps(patch), check=False,
        )  # fmt: skip
        assert edited.returncode != 0, patch
        assert "spec: Forbidden: spec is immutable" in edited.stderr, edited.stderr
    # Metadata stays editable (labels, kopf's annotations, finalizers).
    crds.kubectl("label", "pcheck", "qwen-vs-reference", "-n", namespace, "team=llm")


def test_an_ended_checks_verdict_cannot_be_rewritten(crds: Cluster, namespace: str) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES_DIR / "paritycheck.yaml"))

    def write(status: dict[str, Any]) -> Any:
        return crds.kubectl(
            "patch", "pcheck", "qwen-vs-reference", "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}), check=False,
        )  # fmt: skip

    assert write({"phase": "Running"}).returncode == 0  # not ended: anything goes
    failed = {
        "phase": "Failed",
        "verdict": {"passed": False, "outcome": "Failed", "summary": "diverged"},
        "candidateRevision": "abcdef0123",
    }
    assert write(failed).returncode == 0
    for forged in (
        {"phase": "Passed"},
        {"verdict": {"passed": True, "outcome": "Passed"}},
        {"candidateRevision": "0123456789"},
        {"phase": "Running"},
    ):
        refused = write(forged)
        assert refused.returncode != 0, forged
        assert "keeps its verdict" in refused.stderr, refused.stderr
    # What may still follow an end: conditions (resources released) and progress.
    released = {
        "type": "ResourcesReleased",
        "status": "True",
        "reason": "ChildrenDeleted",
        "message": "released",
        "lastTransitionTime": "2026-12-02T12:00:00Z",
    }
    assert write({"conditions": [released], "progress": {"done": 3, "total": 3}}).returncode == 0
    stored = crds.get_json("pcheck", "qwen-vs-reference", "-n", namespace)["status"]
    assert (stored["phase"], stored["verdict"]["passed"]) == ("Failed", False)
