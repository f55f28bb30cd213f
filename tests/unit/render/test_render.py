"""What a user checks in the rendered objects of a revision, engine by engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infergate.api import InferenceDeploymentSpec
from infergate.render import render_revision
from infergate.render.objects import RevisionObjects


def _spec(engine: str = "vllm", **overrides: Any) -> InferenceDeploymentSpec:
    accelerator = "nvidia-gpu" if engine == "vllm" else "ascend-npu"
    document: dict[str, Any] = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct", "uri": "pvc://models/qwen/7b"},
        "engine": {"kind": engine, "dtype": "bfloat16", "maxModelLen": 8192},
        "accelerator": {"kind": accelerator},
        "rollout": {"autoPromote": False},
    }
    for path, value in overrides.items():
        *parents, leaf = path.split("__")
        target = document
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value
    return InferenceDeploymentSpec.model_validate(document)


def _render(spec: InferenceDeploymentSpec, **kwargs: Any) -> RevisionObjects:
    return render_revision("qwen", "llm", spec, **kwargs)


def _container(objects: RevisionObjects) -> dict[str, Any]:
    container: dict[str, Any] = objects.deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _pod(objects: RevisionObjects) -> dict[str, Any]:
    pod: dict[str, Any] = objects.deployment["spec"]["template"]["spec"]
    return pod


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _engine_json(objects: RevisionObjects) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(objects.config_map["data"]["engine.json"])
    return data


@pytest.mark.parametrize("engine", ["vllm", "mindformers"])
def test_every_server_binds_the_pod_ip(engine: str) -> None:
    container = _container(_render(_spec(engine)))
    assert _flag(container["args"], "--host") == "$(POD_IP)"
    assert _flag(container["args"], "--port") == "8000"
    pod_ip = next(e for e in container["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # The kubelet expands $(POD_IP) only from a variable defined before use: it is first.
    assert container["env"][0]["name"] == "POD_IP"


def test_vllm_pins_numerics_as_explicit_flags() -> None:
    spec = _spec(
        engine__seed=7, engine__tensorParallelSize=2, engine__config={"rms_norm_eps": 1e-6}
    )
    args = _container(_render(spec))["args"]
    assert _container(_render(spec))["command"] == ["vllm"]
    assert args[:2] == ["serve", "/models/qwen/7b"]
    assert _flag(args, "--dtype") == "bfloat16"
    assert _flag(args, "--max-model-len") == "8192"
    assert _flag(args, "--tensor-parallel-size") == "2"
    assert _flag(args, "--seed") == "7"
    assert _flag(args, "--served-model-name") == "Qwen/Qwen2.5-7B-Instruct"
    # The weights' generation config (EOS ids) applies, as in production.
    assert _flag(args, "--generation-config") == "auto"
    assert json.loads(_flag(args, "--hf-overrides")) == {"rms_norm_eps": 1e-6}


def test_vllm_gets_gpus_nodes_tolerations_shm_and_health() -> None:
    objects = _render(_spec(engine__tensorParallelSize=4, accelerator__count=2))
    container = _container(objects)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    pod = _pod(objects)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_a_stopping_vllm_finishes_its_requests_in_flight_within_the_grace_period() -> None:
    """A promotion scales the old revision down while it serves: vLLM's default (0) aborts
    the requests in flight; the rendered server drains them, and stops before the kubelet's
    SIGKILL at the end of the pod's grace period."""
    objects = _render(_spec())
    drain = int(_flag(_container(objects)["args"], "--shutdown-timeout"))
    assert 0 < drain < _pod(objects)["terminationGracePeriodSeconds"]


def test_deterministic_mode_switches_batch_invariance() -> None:
    on = _container(_render(_spec()))["env"]
    off = _container(_render(_spec(engine__deterministic=False)))["env"]
    assert {"name": "VLLM_BATCH_INVARIANT", "value": "1"} in on
    assert all(e["name"] != "VLLM_BATCH_INVARIANT" for e in off)


def test_mindformers_runs_the_adapter_on_the_mounted_config() -> None:
    objects = _render(_spec("mindformers", engine__tensorParallelSize=2))
    container = _container(objects)
    assert container["command"] == ["infergate"]
    assert container["args"][:5] == [
        "serve",
        "--engine",
        "mindformers",
        "--engine-config",
        "/etc/infergate/engine/engine.json",
    ]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "engine-config")
    assert mount == {
        "name": "engine-config",
        "mountPath": "/etc/infergate/engine",
        "readOnly": True,
    }
    volume = next(v for v in _pod(objects)["volumes"] if v["name"] == "engine-config")
    assert volume["configMap"]["name"] == objects.config_map["metadata"]["name"]
    assert container["resources"]["limits"]["huawei.com/Ascend910"] == "2"


def test_mindformers_config_pins_compute_types_and_takes_overrides() -> None:
    spec = _spec(
        "mindformers",
        engine__paramsDtype="float32",
        engine__config={"rms_norm_eps": 1e-5},
    )
    mindformers = _engine_json(_render(spec))["mindformers"]
    model_config = mindformers["model_config"]
    assert model_config["compute_dtype"] == "bfloat16"
    assert model_config["param_init_type"] == "float32"
    assert model_config["layernorm_compute_type"] == "float32"
    assert model_config["rotary_dtype"] == "float32"
    assert model_config["softmax_compute_type"] == "float32"  # pinned: config may not set it
    assert model_config["rms_norm_eps"] == 1e-5
    assert model_config["use_past"] is True
    assert model_config["seq_length"] == 8192
    assert mindformers["context"]["deterministic"] == "ON"
    assert mindformers["parallel_config"]["model_parallel"] == 1


def test_mindformers_gets_ascend_driver_nodes_and_deterministic_env() -> None:
    objects = _render(_spec("mindformers"))
    pod = _pod(objects)
    container = _container(objects)
    assert pod["nodeSelector"] == {"accelerator": "huawei-Ascend910"}
    assert {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    host_paths = {
        v["hostPath"]["path"]: v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v
    }
    assert host_paths == {
        "/usr/local/Ascend/driver": "Directory",
        "/usr/local/dcmi": "Directory",
        "/usr/local/bin/npu-smi": "File",
    }
    for path in host_paths:
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == path)
        assert mount["readOnly"] is True
    assert {"name": "HCCL_DETERMINISTIC", "value": "true"} in container["env"]
    assert {"name": "LCCL_DETERMINISTIC", "value": "1"} in container["env"]


def test_objects_are_named_and_labelled_by_revision() -> None:
    objects = _render(_spec())
    revision = objects.revision
    assert len(revision) == 10
    assert objects.revision_hash.startswith(revision)
    for manifest in (objects.config_map, objects.deployment, objects.service):
        assert manifest["metadata"]["name"] == f"qwen-{revision}"
        labels = manifest["metadata"]["labels"]
        assert labels["infergate.io/revision"] == revision
        assert labels["infergate.io/deployment"] == "qwen"
        assert labels["app.kubernetes.io/managed-by"] == "infergate"
        assert "app.kubernetes.io/name" in labels
        assert "ownerReferences" not in manifest["metadata"]
    pod_labels = objects.deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["infergate.io/revision"] == revision
    assert objects.config_map["immutable"] is True


def test_stable_service_selects_every_revision_with_traffic_replicas() -> None:
    first = _render(_spec(rollout__traffic={"mode": "replicas"}))
    second = _render(_spec(engine__dtype="float16", rollout__traffic={"mode": "replicas"}))
    assert first.revision != second.revision
    assert first.stable_service == second.stable_service
    stable_selector = first.stable_service["spec"]["selector"]
    assert first.stable_service["metadata"]["name"] == "qwen"
    for objects in (first, second):
        pod_labels = objects.deployment["spec"]["template"]["metadata"]["labels"]
        assert stable_selector.items() <= pod_labels.items()
        assert objects.service["spec"]["selector"].items() <= pod_labels.items()
        assert objects.deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert not second.service["spec"]["selector"].items() <= (
        first.deployment["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("mode", ["dark", "gateway"])
def test_stable_service_selects_only_the_serving_revision_by_default(mode: str) -> None:
    gateway = {"parentRefs": [{"name": "public"}]} if mode == "gateway" else None
    traffic = {"mode": mode, **({"gateway": gateway} if gateway else {})}
    first = _render(_spec(rollout__traffic=traffic))
    second = _render(_spec(engine__dtype="float16", rollout__traffic=traffic))
    selector = first.stable_service["spec"]["selector"]
    first_pods = first.deployment["spec"]["template"]["metadata"]["labels"]
    second_pods = second.deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= first_pods.items()
    # Another revision's pods (a canary's) are never selected by the serving Service.
    assert not selector.items() <= second_pods.items()


def test_replicas_come_from_the_spec_or_the_controller() -> None:
    spec = _spec(replicas=4)
    assert _render(spec).deployment["spec"]["replicas"] == 4
    canary = _render(spec, replicas=1)
    assert canary.deployment["spec"]["replicas"] == 1
    assert canary.revision == _render(spec).revision


@pytest.mark.parametrize(
    ("uri", "reference", "volume_key"),
    [
        ("pvc://models/qwen/7b", "/models/qwen/7b", "persistentVolumeClaim"),
        ("file:///data/qwen", "/data/qwen", "hostPath"),
        ("hf://Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "emptyDir"),
        ("s3://weights/qwen/7b", "s3://weights/qwen/7b", None),
    ],
)
def test_model_weights_are_reached_by_uri_scheme(
    uri: str, reference: str, volume_key: str | None
) -> None:
    objects = _render(_spec(model__uri=uri))
    args = _container(objects)["args"]
    assert args[1] == reference
    model_volumes = [v for v in _pod(objects)["volumes"] if v["name"] == "model"]
    if volume_key is None:
        assert model_volumes == []
        assert _flag(args, "--load-format") == "runai_streamer"
    else:
        assert volume_key in model_volumes[0]
    if volume_key in ("persistentVolumeClaim", "hostPath"):
        mount = next(m for m in _container(objects)["volumeMounts"] if m["name"] == "model")
        assert mount["readOnly"] is True


def test_placement_adds_to_the_preset_without_replacing_it() -> None:
    spec = _spec(
        placement={
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "podLabels": {"team": "search"},
        },
        resources={"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"memory": "48Gi"}},
    )
    objects = _render(spec)
    pod = _pod(objects)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "zone": "a"}
    assert len(pod["tolerations"]) == 2
    assert objects.deployment["spec"]["template"]["metadata"]["labels"]["team"] == "search"
    resources = _container(objects)["resources"]
    assert resources["requests"] == {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}
    assert resources["limits"] == {"memory": "48Gi", "nvidia.com/gpu": "1"}
    assert objects.revision == _render(_spec()).revision


def test_default_image_is_pinned_per_engine() -> None:
    vllm_image = _container(_render(_spec()))["image"]
    mindformers_image = _container(_render(_spec("mindformers")))["image"]
    for image in (vllm_image, mindformers_image):
        assert ":" in image.rsplit("/", 1)[-1]
        assert not image.endswith(":latest")
    assert vllm_image != mindformers_image


def test_a_secret_backed_variable_is_mounted_by_reference_and_recorded_as_one() -> None:
    from infergate.render import render_revision

    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "m", "uri": "pvc://models/m"},
            "engine": {
                "kind": "vllm",
                "dtype": "bfloat16",
                "maxModelLen": 4096,
                "env": [
                    {
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                    },
                    {"name": "VLLM_ATTENTION_BACKEND", "value": "FLASH_ATTN"},
                ],
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
        }
    )
    objects = render_revision("m", "llm", spec)
    pod = objects.deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    pinned = json.loads(objects.config_map["data"]["engine.json"])
    assert pinned["env"]["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert pinned["env"]["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN"
    # Engines need no API access and no privilege.
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = pod["containers"][0]["securityContext"]
    assert context == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
