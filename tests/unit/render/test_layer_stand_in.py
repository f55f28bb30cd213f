"""The transformers stand-in beside a vLLM side: which probes get it, and what it runs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.render.check_children import PROBE_CONTAINER, probe_pod, probe_service
from infergate.render.layer_stand_in import (
    ANNOTATION_LAYER_STAND_IN,
    LAYERS_CONTAINER,
    LAYERS_PORT,
    StandInDecision,
    decide_stand_in,
    stand_in_container,
    stand_in_image,
)
from infergate.render.objects import render_revision

from .test_check_children import CHECK, RUNNER


def revision(uri: str, image: str = "vllm/vllm-openai:v0.32.0") -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "fixture", "uri": uri},
            "engine": {
                "kind": "vllm",
                "image": image,
                "dtype": "bfloat16",
                "maxModelLen": 2048,
                "config": {"rms_norm_eps": 1e-6},
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "replicas": 1,
            "rollout": {"autoPromote": False},
        }
    )
    return render_revision("qwen", "llm", spec).deployment


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(
    ("engine_image", "expected"),
    [
        ("vllm/vllm-openai:v0.32.0", "ghcr.io/infergate/engine-vllm:0.32.0"),
        ("docker.io/vllm/vllm-openai:v0.31.1", "ghcr.io/infergate/engine-vllm:0.31.1"),
        ("ghcr.io/infergate/engine-vllm:0.32.0", "ghcr.io/infergate/engine-vllm:0.32.0"),
        # Not known to carry infergate with torch and transformers: no stand-in.
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai@sha256:" + "0" * 64, None),
        ("registry.example.com/team/vllm:v0.32.0", None),
        ("ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0", None),
        ("", None),
    ],
)
def test_the_stand_in_runs_in_the_sides_vllm_with_the_infergate_runtime(
    engine_image: str, expected: str | None
) -> None:
    assert stand_in_image(engine_image) == expected


@pytest.mark.parametrize(
    ("uri", "image", "runs", "why"),
    [
        ("pvc://models/qwen", "vllm/vllm-openai:v0.32.0", True, None),
        ("file:///models/tiny", "vllm/vllm-openai:v0.32.0", True, None),
        ("hf://Qwen/Qwen2.5-7B-Instruct", "vllm/vllm-openai:v0.32.0", False, "hf://"),
        ("s3://bucket/qwen", "vllm/vllm-openai:v0.32.0", False, "s3://"),
        ("pvc://models/qwen", "registry.example.com/vllm:1", False, "registry.example.com/vllm:1"),
    ],
)
def test_which_vllm_sides_get_a_stand_in(uri: str, image: str, runs: bool, why: str | None) -> None:
    decision = decide_stand_in(pod_spec(revision(uri, image)), PROBE_CONTAINER)
    assert (decision.image is not None) is runs
    if why is None:
        assert decision.why_not is None
        assert decision.annotation == "transformers"
    else:
        assert decision.why_not is not None
        assert why in decision.why_not
        assert decision.annotation.startswith("none: ")


def test_the_stand_in_reads_the_pinned_config_and_weights_read_only_and_holds_no_gpu() -> None:
    spec = pod_spec(revision("pvc://models/qwen"))
    engine = spec["containers"][0]
    container = stand_in_container(engine, "ghcr.io/infergate/engine-vllm:0.32.0")
    assert container["name"] == LAYERS_CONTAINER
    assert container["command"] == ["infergate"]
    assert container["args"] == [
        "layer-stand-in",
        "--engine-config",
        "/etc/infergate/engine/engine.json",
        "--host",
        "$(POD_IP)",
        "--port",
        str(LAYERS_PORT),
    ]
    # The engine's model and pinned config mounts, every one read-only; no shared memory.
    engine_mounts = {m["mountPath"] for m in engine["volumeMounts"] if m["name"] != "dshm"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == engine_mounts
    assert all(m["readOnly"] for m in container["volumeMounts"])
    # CPU only: no accelerator requested, none visible, never a hub download.
    assert "nvidia.com/gpu" not in str(container["resources"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["HF_HUB_OFFLINE"] == "1"
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["port"] == "layers"


def test_the_stand_in_keeps_the_engines_memory_limit_and_security() -> None:
    engine = {
        "name": "engine",
        "image": "vllm/vllm-openai:v0.32.0",
        "resources": {"limits": {"memory": "48Gi", "nvidia.com/gpu": "1"}},
        "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": True},
    }
    container = stand_in_container(engine, "ghcr.io/infergate/engine-vllm:0.32.0")
    assert container["resources"]["limits"] == {"memory": "48Gi"}
    assert container["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_a_probe_with_a_stand_in_serves_it_on_its_own_port() -> None:
    deployment = revision("pvc://models/qwen")
    decision = decide_stand_in(pod_spec(deployment), PROBE_CONTAINER)
    pod = probe_pod(CHECK, "candidate", deployment, fingerprint_image=RUNNER, stand_in=decision)
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert names == ["engine", "fingerprints", "layers"]
    [layers] = [c for c in pod["spec"]["containers"] if c["name"] == "layers"]
    assert layers["image"] == "ghcr.io/infergate/engine-vllm:0.32.0"
    # The revision's own pod: no service account token, its pod securityContext.
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["securityContext"] == pod_spec(deployment)["securityContext"]
    service = probe_service(CHECK, "candidate", 8000, stand_in=decision)
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "fingerprints", "layers"]
    assert service["metadata"]["annotations"] == {ANNOTATION_LAYER_STAND_IN: "transformers"}
    # Without hidden states the engine does not run, the stand-in still does.
    bare = probe_pod(
        CHECK,
        "candidate",
        deployment,
        fingerprint_image=RUNNER,
        hidden_states=False,
        stand_in=decision,
    )
    assert [c["name"] for c in bare["spec"]["containers"]] == ["fingerprints", "layers"]
    assert "nvidia.com/gpu" not in str(bare["spec"]["containers"])


def test_a_probe_without_a_stand_in_says_why_on_its_service() -> None:
    deployment = revision("hf://Qwen/Qwen2.5-7B-Instruct")
    decision = decide_stand_in(pod_spec(deployment), PROBE_CONTAINER)
    assert decision.image is None
    pod = probe_pod(CHECK, "candidate", deployment, fingerprint_image=RUNNER, stand_in=decision)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["engine", "fingerprints"]
    service = probe_service(CHECK, "candidate", 8000, stand_in=decision)
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "fingerprints"]
    said = service["metadata"]["annotations"][ANNOTATION_LAYER_STAND_IN]
    assert said.startswith("none: the weights are not a mounted directory")


def test_the_template_is_not_changed_by_rendering_a_stand_in() -> None:
    deployment = revision("pvc://models/qwen")
    before = copy.deepcopy(deployment)
    probe_pod(
        CHECK,
        "baseline",
        deployment,
        fingerprint_image=RUNNER,
        stand_in=StandInDecision("ghcr.io/infergate/engine-vllm:0.32.0", None),
    )
    assert deployment == before
