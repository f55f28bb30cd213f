"""What a platform team checks in rendered engine pods: which Pod Security level admits them,
what they run as, where they write, what they request, how they spread and pull."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.api import InferenceDeploymentSpec
from infergate.render import render_revision
from infergate.render.disruption import stable_disruption_budget
from infergate.render.pod_security import (
    ENGINE_HOME,
    ENGINE_UID,
    PodSecurityLevel,
    pod_security_level,
)


def _spec(engine: str = "vllm", uri: str = "pvc://models/qwen/7b", **extra: Any) -> Any:
    document: dict[str, Any] = {
        "model": {"name": "qwen", "uri": uri},
        "engine": {"kind": engine, "dtype": "bfloat16", "maxModelLen": 4096},
        "accelerator": {"kind": "nvidia-gpu" if engine == "vllm" else "ascend-npu"},
        "rollout": {"autoPromote": False},
        **extra,
    }
    return InferenceDeploymentSpec.model_validate(document)


def _pod(spec: InferenceDeploymentSpec) -> dict[str, Any]:
    pod: dict[str, Any] = render_revision("qwen", "llm", spec).deployment["spec"]["template"][
        "spec"
    ]
    return pod


def _env(pod: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


@pytest.mark.parametrize(
    ("engine", "uri", "level"),
    [
        ("vllm", "pvc://models/qwen/7b", PodSecurityLevel.RESTRICTED),
        ("vllm", "hf://Qwen/Qwen2.5-0.5B", PodSecurityLevel.RESTRICTED),
        ("vllm", "s3://models/qwen", PodSecurityLevel.RESTRICTED),
        ("vllm", "file:///models/qwen", PodSecurityLevel.PRIVILEGED),
        ("mindformers", "pvc://models/qwen/7b", PodSecurityLevel.PRIVILEGED),
    ],
)
def test_each_engine_pod_needs_the_level_the_docs_state(
    engine: str, uri: str, level: PodSecurityLevel
) -> None:
    assert pod_security_level(_pod(_spec(engine, uri))) is level


def test_a_vllm_pod_runs_as_a_fixed_non_root_user_whatever_its_image() -> None:
    for image in (None, "vllm/vllm-openai:v0.32.0", "registry.example.com/vllm:v1"):
        engine = {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096}
        if image:
            engine["image"] = image
        spec = InferenceDeploymentSpec.model_validate(
            {
                "model": {"name": "qwen", "uri": "pvc://models/qwen"},
                "engine": engine,
                "accelerator": {"kind": "nvidia-gpu"},
                "rollout": {"autoPromote": False},
            }
        )
        context = _pod(spec)["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == ENGINE_UID
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_vllm_writes_its_caches_to_an_empty_dir_named_by_its_environment() -> None:
    pod = _pod(_spec())
    home = next(v for v in pod["volumes"] if v["name"] == "engine-home")
    assert home == {"name": "engine-home", "emptyDir": {}}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[ENGINE_HOME]["name"] == "engine-home"
    assert not mounts[ENGINE_HOME].get("readOnly")
    env = _env(pod)
    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCHINDUCTOR_CACHE_DIR"):
        assert str(env[name]).startswith(ENGINE_HOME), name


def test_a_hub_model_keeps_its_own_cache_and_no_variable_is_set_twice() -> None:
    pod = _pod(_spec(uri="hf://Qwen/Qwen2.5-0.5B"))
    names = [e["name"] for e in pod["containers"][0]["env"]]
    assert len(names) == len(set(names))
    assert _env(pod)["HF_HOME"] == "/models/.hf"


def test_an_engine_env_variable_wins_over_the_cache_default() -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "qwen", "uri": "pvc://models/qwen"},
            "engine": {
                "kind": "vllm",
                "dtype": "bfloat16",
                "maxModelLen": 4096,
                "env": [
                    {
                        "name": "XDG_CACHE_HOME",
                        "valueFrom": {"secretKeyRef": {"name": "paths", "key": "cache"}},
                    }
                ],
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
        }
    )
    env = [e for e in _pod(spec)["containers"][0]["env"] if e["name"] == "XDG_CACHE_HOME"]
    assert env == [
        {"name": "XDG_CACHE_HOME", "valueFrom": {"secretKeyRef": {"name": "paths", "key": "cache"}}}
    ]


def test_mindformers_runs_as_its_images_user_with_the_driver_mounted_read_only() -> None:
    pod = _pod(_spec("mindformers"))
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    # The image's user must match the node driver's HwHiAiUser: no uid pinned here.
    assert "runAsUser" not in context
    host_paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    assert host_paths == ["/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert all(mounts[v["name"]]["readOnly"] for v in pod["volumes"] if "hostPath" in v)
    container = pod["containers"][0]["securityContext"]
    assert container == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        (None, {"cpu": "2", "memory": "6Gi"}, {}),
        ({"requests": {"cpu": "8"}}, {"cpu": "8", "memory": "6Gi"}, {}),
        # A limit alone is the request too: no default request above it.
        ({"limits": {"memory": "4Gi"}}, {"cpu": "2"}, {"memory": "4Gi"}),
        (
            {"requests": {"cpu": "1", "memory": "32Gi"}, "limits": {"memory": "64Gi"}},
            {"cpu": "1", "memory": "32Gi"},
            {"memory": "64Gi"},
        ),
    ],
)
@pytest.mark.parametrize("engine", ["vllm", "mindformers"])
def test_every_engine_requests_cpu_and_memory_unless_told_otherwise(
    engine: str, resources: Any, requests: dict[str, str], limits: dict[str, str]
) -> None:
    extra = {"resources": resources} if resources else {}
    container = _pod(_spec(engine, **extra))["containers"][0]
    device = "nvidia.com/gpu" if engine == "vllm" else "huawei.com/Ascend910"
    assert container["resources"]["requests"] == {**requests, device: "1"}
    assert container["resources"]["limits"] == {**limits, device: "1"}


def test_a_revisions_pods_prefer_distinct_nodes_unless_placement_says_otherwise() -> None:
    objects = render_revision("qwen", "llm", _spec())
    pod = objects.deployment["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    # The term selects exactly this revision's pods (the Deployment's own selector).
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == objects.deployment["spec"]["selector"]["matchLabels"]
    )
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    assert _pod(_spec(placement={"affinity": own}))["affinity"] == own


def test_placement_sets_pull_secrets_and_priority() -> None:
    pod = _pod(
        _spec(
            placement={
                "imagePullSecrets": [{"name": "mirror-creds"}],
                "priorityClassName": "inference-high",
            }
        )
    )
    assert pod["imagePullSecrets"] == [{"name": "mirror-creds"}]
    assert pod["priorityClassName"] == "inference-high"
    assert "imagePullSecrets" not in _pod(_spec())


def test_a_pull_secret_named_twice_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"placement\.imagePullSecrets: 'a' appears twice"):
        _spec(placement={"imagePullSecrets": [{"name": "a"}, {"name": "a"}]})


def test_the_stable_budget_allows_one_eviction_at_a_time_of_the_stable_pods_only() -> None:
    objects = render_revision("qwen", "llm", _spec())
    budget = stable_disruption_budget("qwen", "llm", objects.revision)
    assert budget["kind"] == "PodDisruptionBudget"
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == objects.deployment["spec"]["selector"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
