"""Properties of the revision hash: stable, order-free, sensitive to numerics, blind to cosmetics."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infergate.api import InferenceDeploymentSpec
from infergate.api.engine import Accelerator, Engine, ModelSource
from infergate.api.pinned import pinned_config_keys
from infergate.api.topology import Topology
from infergate.render import RevisionHashError, canonical_json, revision_hash, revision_identity

Spec = dict[str, Any]

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=12)
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_dtypes = st.sampled_from(["float32", "float16", "bfloat16"])


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    """Valid InferenceDeployment specs, as a user writes them."""
    engine = draw(st.sampled_from(["vllm", "mindformers"]))
    dtype = draw(_dtypes)
    uri = draw(
        st.sampled_from(
            ["pvc://models/qwen", "file:///data/qwen", "hf://Qwen/Qwen2.5-7B@main"]
            + (["s3://weights/qwen"] if engine == "vllm" else [])
        )
    )
    spec_engine: dict[str, Any] = {
        "kind": engine,
        "dtype": dtype,
        "maxModelLen": draw(st.integers(1024, 131072)),
        "tensorParallelSize": draw(st.sampled_from([1, 2, 4])),
        "seed": draw(st.integers(0, 2**32 - 1)),
        "deterministic": draw(st.booleans()),
        "config": {
            key: value
            for key, value in draw(
                st.dictionaries(st.text(min_size=1, max_size=10), _json_values, max_size=4)
            ).items()
            # MindFormers rejects the keys it pins (a spec a user cannot write).
            if not (engine == "mindformers" and pinned_config_keys([key]))
        },
        "args": draw(
            st.lists(st.sampled_from(["--enforce-eager", "--max-num-seqs=8"]), max_size=2)
        ),
    }
    if draw(st.booleans()):
        spec_engine["image"] = draw(st.sampled_from(["vllm/vllm-openai:v0.10.2", "x/y:1"]))
    if engine == "mindformers" and draw(st.booleans()):
        spec_engine["paramsDtype"] = draw(_dtypes)
    replicas = draw(st.integers(1, 8))
    return {
        "model": {"name": draw(st.sampled_from(["qwen", "Qwen/Qwen2.5-7B"])), "uri": uri},
        "engine": spec_engine,
        "accelerator": {
            "kind": "nvidia-gpu" if engine == "vllm" else "ascend-npu",
            "count": draw(st.sampled_from([1, 2])),
        },
        "replicas": replicas,
        "rollout": {"canaryReplicas": draw(st.integers(1, replicas)), "autoPromote": False},
    }


def _hash(spec: Spec) -> str:
    return revision_hash(InferenceDeploymentSpec.model_validate(spec))


def _reorder(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _reorder(item, rng) for key, item in items}
    if isinstance(value, list):
        return [_reorder(item, rng) for item in value]
    return value


def _other(values: list[str], current: str) -> str:
    return next(value for value in values if value != current)


def _flip_engine(spec: Spec) -> None:
    vllm = spec["engine"]["kind"] == "vllm"
    spec["engine"]["kind"] = "mindformers" if vllm else "vllm"
    spec["accelerator"]["kind"] = "ascend-npu" if vllm else "nvidia-gpu"
    spec["engine"].pop("paramsDtype", None)
    if vllm and spec["model"]["uri"].startswith("s3://"):
        spec["model"]["uri"] = "pvc://models/qwen"


_DTYPES = ["float32", "float16", "bfloat16"]

# Each changes what runs: the revision must change.
NUMERIC_CHANGES: dict[str, Callable[[Spec], None]] = {
    "dtype": lambda s: s["engine"].update(dtype=_other(_DTYPES, s["engine"]["dtype"])),
    "maxModelLen": lambda s: s["engine"].update(maxModelLen=s["engine"]["maxModelLen"] + 1),
    "tensorParallelSize": lambda s: s["engine"].update(
        tensorParallelSize=s["engine"]["tensorParallelSize"] * 2
    ),
    "seed": lambda s: s["engine"].update(seed=(s["engine"]["seed"] + 1) % 2**32),
    "deterministic": lambda s: s["engine"].update(deterministic=not s["engine"]["deterministic"]),
    "config": lambda s: s["engine"]["config"].update(
        rms_norm_eps=1e-6 if s["engine"]["config"].get("rms_norm_eps") != 1e-6 else 1e-5
    ),
    "args": lambda s: s["engine"]["args"].append("--disable-custom-all-reduce"),
    "env": lambda s: s["engine"].update(env=[{"name": "VLLM_ATTENTION_BACKEND", "value": "X"}]),
    "image": lambda s: s["engine"].update(
        image=_other(["a/b:1", "a/b:2"], s["engine"].get("image", ""))
    ),
    "model-uri": lambda s: s["model"].update(
        uri=_other(["pvc://models/a", "pvc://models/b"], s["model"]["uri"])
    ),
    "model-name": lambda s: s["model"].update(name=s["model"]["name"] + "-v2"),
    "accelerator-count": lambda s: s["accelerator"].update(count=3 - s["accelerator"]["count"]),
    "engine-and-accelerator": _flip_engine,
}

# Each changes size, policy or placement only: the revision must not change.
COSMETIC_CHANGES: dict[str, Callable[[Spec], None]] = {
    "replicas": lambda s: s.update(replicas=s["replicas"] + 3),
    "canaryReplicas": lambda s: s["rollout"].update(canaryReplicas=1),
    "autoRollback": lambda s: s["rollout"].update(autoRollback=False),
    "progressDeadlineSeconds": lambda s: s["rollout"].update(progressDeadlineSeconds=600),
    "revisionHistoryLimit": lambda s: s.update(revisionHistoryLimit=9),
    "placement": lambda s: s.update(
        placement={
            "nodeSelector": {"zone": "b"},
            "podLabels": {"team": "x"},
            "podAnnotations": {"a": "b"},
        }
    ),
    "resources": lambda s: s.update(resources={"requests": {"cpu": "2", "memory": "8Gi"}}),
    "parity": lambda s: s["rollout"].update(
        parity={
            "suite": {"configMapRef": {"name": "p", "key": "p.jsonl"}},
            "sampling": {"maxTokens": 16},
        }
    ),
}

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(specs(), st.randoms(use_true_random=False))
def test_key_order_never_changes_the_hash(spec: Spec, rng: random.Random) -> None:
    assert _hash(_reorder(spec, rng)) == _hash(spec)


@_SETTINGS
@given(specs(), st.sampled_from(sorted(NUMERIC_CHANGES)))
def test_every_numeric_change_changes_the_hash(spec: Spec, change: str) -> None:
    changed = copy.deepcopy(spec)
    NUMERIC_CHANGES[change](changed)
    assert _hash(changed) != _hash(spec), change


@_SETTINGS
@given(specs(), st.sampled_from(sorted(COSMETIC_CHANGES)))
def test_cosmetic_changes_never_change_the_hash(spec: Spec, change: str) -> None:
    changed = copy.deepcopy(spec)
    COSMETIC_CHANGES[change](changed)
    assert _hash(changed) == _hash(spec), change


_SUBPROCESS = """
import json, sys
from infergate.api import InferenceDeploymentSpec
from infergate.render import revision_hash
specs = json.load(sys.stdin)
print(json.dumps([revision_hash(InferenceDeploymentSpec.model_validate(s)) for s in specs]))
"""


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(specs(), min_size=10, max_size=10))
def test_hash_is_the_same_in_another_process(batch: list[Spec]) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    assert json.loads(result.stdout) == [_hash(spec) for spec in batch]


def _base() -> Spec:
    return {
        "model": {"name": "qwen", "uri": "pvc://models/qwen"},
        "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096},
        "accelerator": {"kind": "nvidia-gpu"},
        "rollout": {"autoPromote": False},
    }


def test_a_float_read_back_as_an_integer_hashes_alike() -> None:
    # The API server returns 1.0 as 1: the revision must not move on a read-back.
    as_float, as_int = _base(), _base()
    as_float["engine"]["config"] = {"scale": 1.0, "eps": 1e-5}
    as_int["engine"]["config"] = {"scale": 1, "eps": 1e-5}
    assert _hash(as_float) == _hash(as_int)


def test_an_unset_params_dtype_equal_to_dtype_hashes_alike() -> None:
    implicit, explicit = _base(), _base()
    explicit["engine"]["paramsDtype"] = "bfloat16"
    assert _hash(implicit) == _hash(explicit)


def test_params_dtype_is_hashed_for_mindformers() -> None:
    bf16, fp32 = _base(), _base()
    for spec in (bf16, fp32):
        spec["engine"]["kind"] = "mindformers"
        spec["accelerator"]["kind"] = "ascend-npu"
    fp32["engine"]["paramsDtype"] = "float32"
    assert _hash(bf16) != _hash(fp32)


def test_true_and_one_hash_apart() -> None:
    as_bool, as_int = _base(), _base()
    as_bool["engine"]["config"] = {"use_past": True}
    as_int["engine"]["config"] = {"use_past": 1}
    assert _hash(as_bool) != _hash(as_int)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (math.nan, "spec.engine.config.bad"),
        (math.inf, "spec.engine.config.bad"),
        (b"raw", "spec.engine.config.bad"),
        ({1, 2}, "spec.engine.config.bad"),
        ({"nested": [1, object()]}, "spec.engine.config.bad.nested[1]"),
        ({3: "x"}, "spec.engine.config.bad: key 3"),
    ],
)
def test_unhashable_values_are_refused_naming_the_field(value: Any, where: str) -> None:
    spec = _base()
    spec["engine"]["config"] = {"bad": value}
    with pytest.raises(RevisionHashError) as caught:
        _hash(spec)
    assert str(caught.value).startswith(where)


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": [1, 2.5], "a": {"d": None, "c": "é"}}) == (
        '{"a":{"c":"é","d":null},"b":[1,2.5]}'
    )


def test_every_spec_field_is_hashed_or_declared_cosmetic() -> None:
    # A new field must be classified here, so it cannot slip out of the hash unnoticed.
    cosmetic = {"replicas", "rollout", "revisionHistoryLimit", "placement", "resources"}
    spec = _base()
    spec["engine"]["tensorParallelSize"] = 8
    spec["topology"] = {"nodes": 2, "acceleratorsPerNode": 8, "pipelineParallelSize": 2}
    identity = revision_identity(InferenceDeploymentSpec.model_validate(spec))
    spec_fields = {f.alias or n for n, f in InferenceDeploymentSpec.model_fields.items()}
    assert spec_fields - cosmetic == {"model", "engine", "accelerator", "topology"}
    parts = (
        ("model", ModelSource),
        ("engine", Engine),
        ("accelerator", Accelerator),
        ("topology", Topology),
    )
    for part, model in parts:
        fields = {f.alias or n for n, f in model.model_fields.items()}
        assert fields == set(identity[part]), part


@pytest.mark.parametrize("topology", [{}, {"nodes": 1}, {"pipelineParallelSize": 1}])
def test_the_one_node_topology_hashes_as_no_topology(topology: Spec) -> None:
    # Every revision made before topology existed keeps its hash: no canary on upgrade.
    stated = _base()
    stated["topology"] = topology
    assert _hash(stated) == _hash(_base())
    assert "topology" not in revision_identity(InferenceDeploymentSpec.model_validate(stated))


def _grouped(tensor: int, **topology: Any) -> Spec:
    spec = _base()
    spec["engine"]["tensorParallelSize"] = tensor
    spec["topology"] = topology
    return spec


def test_every_layout_is_a_revision_of_its_own() -> None:
    layouts = [
        _base(),
        _grouped(2, pipelineParallelSize=2),
        _grouped(4, nodes=1, acceleratorsPerNode=4),
        _grouped(8, nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2),
        _grouped(16, nodes=2, acceleratorsPerNode=8),
        _grouped(8, nodes=2, acceleratorsPerNode=8, dataParallelSize=2),
        _grouped(8, nodes=2, acceleratorsPerNode=8, dataParallelSize=2, expertParallel=True),
        _grouped(8, nodes=4, acceleratorsPerNode=4, pipelineParallelSize=2),
    ]
    hashes = [_hash(spec) for spec in layouts]
    assert len(set(hashes)) == len(layouts)
