"""The pydantic models accept the examples, refuse the invalid manifests and default as documented."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from infergate.api import InferenceDeployment, InferenceDeploymentSpec, ParityCheck
from infergate.api.enums import DType
from tests.unit.api.manifests import InvalidManifest, example_documents, invalid_manifests

_MODELS: dict[str, type[InferenceDeployment] | type[ParityCheck]] = {
    "InferenceDeployment": InferenceDeployment,
    "ParityCheck": ParityCheck,
}
_INVALID = invalid_manifests()


def _minimal_spec(**engine: Any) -> dict[str, Any]:
    return {
        "model": {"name": "tiny", "uri": "pvc://models/tiny"},
        "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096, **engine},
        "accelerator": {"kind": "nvidia-gpu"},
        "rollout": {"autoPromote": False},
    }


@pytest.mark.parametrize(
    ("stem", "document"),
    [(stem, doc) for stem, doc in example_documents() if doc["kind"] in _MODELS],
    ids=lambda value: value if isinstance(value, str) else value["metadata"]["name"],
)
def test_every_example_is_valid(stem: str, document: dict[str, Any]) -> None:
    resource = _MODELS[document["kind"]].model_validate(document)
    assert resource.metadata["name"] == document["metadata"]["name"]


def test_there_are_at_least_fifteen_invalid_manifests() -> None:
    assert len(_INVALID) >= 15


@pytest.mark.parametrize("manifest", _INVALID, ids=lambda m: m.name)
def test_invalid_manifest_is_refused_by_the_models(manifest: InvalidManifest) -> None:
    model = _MODELS[manifest.document["kind"]]
    with pytest.raises(ValidationError) as caught:
        model.model_validate(manifest.document)
    assert manifest.python_expects in str(caught.value)


def test_defaults_fill_what_a_user_leaves_out() -> None:
    spec = InferenceDeploymentSpec.model_validate(_minimal_spec())
    assert spec.replicas == 1
    assert spec.rollout.canary_replicas == 1
    assert spec.rollout.auto_rollback is True
    assert spec.rollout.progress_deadline_seconds == 1800
    assert spec.rollout.scale_down_delay_seconds == 30
    assert spec.revision_history_limit == 5
    assert spec.engine.tensor_parallel_size == 1
    assert spec.engine.seed == 42
    assert spec.engine.deterministic is True
    assert spec.engine.effective_params_dtype is DType.BFLOAT16
    assert spec.accelerator.count == 1


def test_wire_format_is_camel_case_without_unset_optionals() -> None:
    wire = InferenceDeploymentSpec.model_validate(_minimal_spec()).to_kube()
    assert wire["engine"]["maxModelLen"] == 4096
    assert wire["rollout"]["canaryReplicas"] == 1
    assert "image" not in wire["engine"]
    assert "paramsDtype" not in wire["engine"]
    assert "parity" not in wire["rollout"]


def test_dtype_error_names_field_value_and_allowed_values() -> None:
    with pytest.raises(ValidationError) as caught:
        InferenceDeploymentSpec.model_validate(_minimal_spec(dtype="auto"))
    text = str(caught.value)
    assert "engine.dtype" in text
    assert "'auto'" in text
    assert "'float32', 'float16' or 'bfloat16'" in text


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:v0.32.0",
        "registry.example.com:5000/team/vllm:0.11.0-cu128",
        "vllm/vllm-openai@sha256:" + "a" * 64,
        "vllm/vllm-openai:v0.32.0@sha256:" + "b" * 64,
    ],
)
def test_pinned_images_are_accepted(image: str) -> None:
    spec = InferenceDeploymentSpec.model_validate(_minimal_spec(image=image))
    assert spec.engine.image == image


@pytest.mark.parametrize(
    "image",
    ["vllm/vllm-openai", "vllm/vllm-openai:latest", "registry.example.com:5000/vllm", "a b:1"],
)
def test_moving_images_are_refused(image: str) -> None:
    with pytest.raises(ValidationError, match="image must be pinned"):
        InferenceDeploymentSpec.model_validate(_minimal_spec(image=image))


def test_pinned_flag_is_refused_in_both_spellings() -> None:
    for args in (["--seed", "7"], ["--seed=7"], ["-tp", "2"]):
        with pytest.raises(ValidationError, match="args must not set"):
            InferenceDeploymentSpec.model_validate(_minimal_spec(args=args))
    spec = InferenceDeploymentSpec.model_validate(_minimal_spec(args=["--enforce-eager"]))
    assert spec.engine.args == ["--enforce-eager"]


def test_canary_bound_is_lifted_when_scaled_to_zero() -> None:
    document = _minimal_spec()
    document["replicas"] = 0
    document["rollout"]["canaryReplicas"] = 2
    assert InferenceDeploymentSpec.model_validate(document).replicas == 0


def test_disabled_checks_become_null_thresholds_and_win() -> None:
    document = next(doc for stem, doc in example_documents() if stem == "paritycheck")
    document = {**document, "spec": {**document["spec"]}}
    document["spec"]["disabledChecks"] = ["minTokenMatchRate", "maxMeanKlIncrease"]
    spec = ParityCheck.model_validate(document).spec
    thresholds = spec.effective_thresholds()
    # Null (switched off) is told apart from unset (the profile's limit) by fields_set.
    assert thresholds.min_token_match_rate is None
    assert "min_token_match_rate" in thresholds.model_fields_set
    assert "max_mean_kl" not in thresholds.model_fields_set
    regression = spec.effective_regression()
    assert regression.max_mean_kl_increase is None
    assert regression.confidence == 0.95
    # Unset allowances derive from the profile's limits (parity.profiles.resolve_regression).
    assert regression.max_token_match_rate_drop is None
    assert "max_token_match_rate_drop" not in regression.model_fields_set


def test_unknown_disabled_check_names_the_allowed_ones() -> None:
    document = next(doc for stem, doc in example_documents() if stem == "paritycheck")
    document = {**document, "spec": {**document["spec"], "disabledChecks": ["confidence"]}}
    with pytest.raises(ValidationError) as caught:
        ParityCheck.model_validate(document)
    assert "'confidence' is not a check; allowed: minTokenMatchRate" in str(caught.value)


def _named(name: str, nodes: int) -> dict[str, Any]:
    spec = _minimal_spec()
    if nodes > 1:
        spec["topology"] = {"nodes": nodes, "acceleratorsPerNode": 1, "pipelineParallelSize": nodes}
    return {"apiVersion": "infergate.io/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


@pytest.mark.parametrize(("length", "nodes", "allowed"), [
    (52, 1, True),   # one node: its revision Service <name>-<revision> fits a DNS label
    (53, 1, False),
    (31, 2, True),   # a group: <name>-<revision>-group-<index> fits a StatefulSet's 52
    (32, 2, False),
])  # fmt: skip
def test_a_multi_node_deployments_name_leaves_room_for_its_groups(
    length: int, nodes: int, allowed: bool
) -> None:
    document = _named("a" * length, nodes)
    if allowed:
        InferenceDeployment.model_validate(document)
        return
    with pytest.raises(ValidationError) as caught:
        InferenceDeployment.model_validate(document)
    assert "metadata.name" in str(caught.value)
