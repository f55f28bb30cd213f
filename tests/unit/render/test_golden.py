"""Golden-file tests of rendering: the full manifests of one revision per case.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/render`
and review the diff: a changed golden file is a change to what runs in clusters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.api import InferenceDeployment
from infergate.render import render_revision
from infergate.render.check_children import (
    FINGERPRINT_PORT,
    RunnerSettings,
    probe_pod,
    probe_service,
    report_config_map,
    runner_job,
    runner_network_policy,
    runner_rbac,
)
from infergate.render.check_names import child_labels, probe_name
from infergate.render.images import DEFAULT_RUNNER_IMAGE
from infergate.render.launch import HTTP_PORT
from infergate.render.network import Peer, api_server_peers
from tests.unit.api.manifests import EXAMPLES_DIR

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the engine.json) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def _example(file: str, index: int = 0) -> dict[str, Any]:
    documents: list[dict[str, Any]] = [
        d
        for d in yaml.safe_load_all((EXAMPLES_DIR / file).read_text(encoding="utf-8"))
        if d and d["kind"] == "InferenceDeployment"
    ]
    return documents[index]


def _hf_vllm_with_placement() -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "tiny"},
        "spec": {
            "model": {"name": "tiny-qwen", "uri": "hf://infergate/tiny-qwen2@4f1c2d9"},
            "engine": {
                "kind": "vllm",
                "dtype": "float16",
                "maxModelLen": 4096,
                "tensorParallelSize": 2,
                "seed": 7,
                "deterministic": False,
                "args": ["--enforce-eager"],
                "env": [{"name": "VLLM_ATTENTION_BACKEND", "value": "FLASH_ATTN"}],
            },
            "accelerator": {"kind": "nvidia-gpu", "count": 1},
            "replicas": 3,
            "placement": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}],
                "priorityClassName": "inference",
                "podLabels": {"team": "search"},
                "podAnnotations": {"owner": "search@example.com"},
            },
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"}},
            "rollout": {"autoPromote": False},
        },
    }


def _file_mindformers() -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "tiny-ascend"},
        "spec": {
            "model": {"name": "tiny-qwen", "uri": "file:///var/lib/infergate/models/tiny-qwen2"},
            "engine": {
                "kind": "mindformers",
                "dtype": "float16",
                "paramsDtype": "float32",
                "maxModelLen": 2048,
                "config": {"rms_norm_eps": 1e-5},
            },
            "accelerator": {"kind": "ascend-npu"},
            "rollout": {"autoPromote": False},
        },
    }


CASES: dict[str, dict[str, Any]] = {
    "vllm-gpu": _example("vllm-gpu.yaml"),
    "mindformers-ascend": _example("mindformers-ascend.yaml"),
    "vllm-hf-placement": _hf_vllm_with_placement(),
    "mindformers-hostpath": _file_mindformers(),
}


def render_case(document: dict[str, Any]) -> str:
    resource = InferenceDeployment.model_validate(document)
    objects = render_revision(resource.metadata["name"], "llm", resource.spec)
    return yaml.dump_all(
        objects.manifests(), Dumper=_BlockDumper, sort_keys=True, allow_unicode=True, width=100
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_matches_golden_file(case: str) -> None:
    path = GOLDEN_DIR / f"render-{case}.yaml"
    rendered = render_case(CASES[case])
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered, encoding="utf-8")
    assert path.exists(), f"{path} missing; run with UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert rendered == expected, f"{path} differs; review, then UPDATE_GOLDEN=1 to accept"


def render_check_children() -> str:
    """What the ParityCheck of a vLLM canary starts: probes copied from the revisions'
    Deployments, the NetworkPolicy confining the runner, its RBAC naming what it reads,
    the report, the Job."""
    resource = InferenceDeployment.model_validate(CASES["vllm-gpu"])
    name = resource.metadata["name"]
    stable = render_revision(name, "llm", resource.spec)
    check = {
        "metadata": {"name": f"{name}-{stable.revision}", "namespace": "llm", "uid": "check-uid"}
    }
    revision_service = f"{name}-{stable.revision}"
    probe_labels = {
        **child_labels(check["metadata"]["name"], "probe"),
        "infergate.io/side": "baseline",
    }
    peers = [
        Peer(HTTP_PORT, pods=stable.deployment["spec"]["selector"]["matchLabels"]),
        Peer(HTTP_PORT, pods=probe_labels),
        Peer(FINGERPRINT_PORT, pods=probe_labels),
        *api_server_peers("10.96.0.1", "443"),
    ]
    manifests = [
        probe_service(check, "baseline", HTTP_PORT),
        probe_pod(check, "baseline", stable.deployment, fingerprint_image=DEFAULT_RUNNER_IMAGE),
        runner_network_policy(check, peers, runner_namespace="infergate-system"),
        *runner_rbac(
            check,
            runner_namespace="infergate-system",
            deployments=[name],
            services=[revision_service, probe_name(check["metadata"]["name"], "baseline")],
            config_maps=[revision_service],
        ),
        report_config_map(check),
        runner_job(
            check,
            RunnerSettings(active_deadline_seconds=3600, backoff_limit=1),
            image=DEFAULT_RUNNER_IMAGE,
            runner_namespace="infergate-system",
        ),
    ]
    return yaml.dump_all(
        manifests, Dumper=_BlockDumper, sort_keys=True, allow_unicode=True, width=100
    )


def test_check_children_match_golden_file() -> None:
    path = GOLDEN_DIR / "render-check-children.yaml"
    rendered = render_check_children()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered, encoding="utf-8")
    assert path.exists(), f"{path} missing; run with UPDATE_GOLDEN=1 to create it"
    assert rendered == path.read_text(encoding="utf-8"), (
        f"{path} differs; review, then UPDATE_GOLDEN=1"
    )
