"""Inputs that would give an InferenceDeployment's author more than the fields say: pinned flags
in other spellings, pinned MindFormers config keys, traversal in model URIs, secrets as plain env
values, a user-chosen runner image, credentials in an endpoint URL. The models refuse them with
the same expressions the CRD's CEL rules carry (the API server side is tests/integration)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from infergate.api import InferenceDeploymentSpec, ParityCheck
from infergate.api.access import (
    check_host_path,
    host_path_allowed,
    parse_allow_list,
    service_account_allowed,
)
from infergate.api.crd import render_crd_files
from infergate.api.engine_env import EnvVar, plain_value_allowed
from infergate.api.model_uri import parse_model_uri
from infergate.api.parity_check import RUNNER_CONCURRENCY_MAX
from infergate.api.pinned import (
    MINDFORMERS_PINNED_CONFIG_KEYS,
    PINNED_ARG_PATTERNS,
    PINNED_FLAGS,
    pinned_flag,
)
from infergate.commands import serve
from infergate.render.launch import RevisionInput
from infergate.render.mindformers import mindformers_model_config
from infergate.render.model_weights import model_weights
from tests.unit.api.manifests import example_documents


def _spec(**engine: Any) -> dict[str, Any]:
    return {
        "model": {"name": "tiny", "uri": "pvc://models/tiny"},
        "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096, **engine},
        "accelerator": {"kind": "nvidia-gpu"},
        "rollout": {"autoPromote": False},
    }


def _mindformers(**engine: Any) -> dict[str, Any]:
    spec = _spec(kind="mindformers", **engine)
    spec["accelerator"]["kind"] = "ascend-npu"
    return spec


# -- pinned flags --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--dtype", "--dtype"),
        ("--dtype=float16", "--dtype"),
        ("--max_model_len", "--max-model-len"),  # vLLM reads _ as -
        ("--max_model-len=131072", "--max-model-len"),
        ("--max-model", "--max-model-len"),  # argparse abbreviation
        ("--max-model=131072", "--max-model-len"),
        ("--hf-overrides", "--hf-overrides"),
        ("--hf-overrides.rms_norm_eps=1e-4", "--hf-overrides"),  # dotted sub-key
        ("--hf_overrides.rope_scaling.factor", "--hf-overrides"),
        ("--hf-over.rms_norm_eps=1e-4", "--hf-overrides"),  # abbreviated, then dotted
        ("--tensor_parallel_size=4", "--tensor-parallel-size"),
        ("-tp", "-tp"),
        ("-tp=4", "-tp"),
        ("-t", "-tp"),  # single-dash options are prefix-matched by argparse
        ("--seed=7", "--seed"),
        ("--served_model_name", "--served-model-name"),
        ("--generation-config=auto", "--generation-config"),
        ("--max-logprobs=5", "--max-logprobs"),
        ("--config=/tmp/flags.yaml", "--config"),
        ("--engine-config=/tmp/engine.json", "--engine-config"),
        ("--engine_c", "--engine-config"),
        ("--rev=main", "--revision"),
        ("--port=9000", "--port"),
        ("--host", "--host"),
    ],
)
def test_every_spelling_of_a_pinned_flag_is_refused(arg: str, flag: str) -> None:
    assert pinned_flag(arg) == flag
    with pytest.raises(ValidationError, match="args must not set") as caught:
        InferenceDeploymentSpec.model_validate(_spec(args=["--enforce-eager", arg]))
    assert f"it sets {flag}" in str(caught.value)


@pytest.mark.parametrize(
    "arg",
    [
        "--enforce-eager",
        "--max-num-seqs=8",
        "--max-num-batched-tokens",
        "8192",
        "-O3",  # --optimization-level, not pinned
        "-1",
        "--model-impl=transformers",  # longer than --model: not an abbreviation of it
        "--config-format=hf",
        "--seed-offset",  # not a prefix of --seed
        "--tokenizer-mode=auto",
        "--kv-cache-dtype=auto",
        '{"rms_norm_eps": 1e-6}',
    ],
)
def test_other_arguments_pass(arg: str) -> None:
    assert pinned_flag(arg) is None
    spec = InferenceDeploymentSpec.model_validate(_spec(args=[arg]))
    assert spec.engine.args == [arg]


def _adapter_args(extra: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="infergate")
    serve.register(parser.add_subparsers(dest="command", required=True))
    pinned = ["serve", "--engine", "mindformers", "--engine-config", "/etc/engine.json"]
    pinned += ["--host", "10.0.0.1", "--port", "8000"]
    return parser.parse_args([*pinned, *extra])


@pytest.mark.parametrize(
    "extra",
    [["--port", "9000"], ["--po", "9000"], ["--engine-c", "/tmp/x"], ["--ho=0.0.0.0"]],
)
def test_abbreviations_really_reach_the_adapters_pinned_flags(extra: list[str]) -> None:
    """What the matcher refuses is what argparse (the MindFormers adapter's parser) would do."""
    pinned = _adapter_args([])
    changed = _adapter_args(extra)
    assert vars(changed) != vars(pinned)
    assert pinned_flag(extra[0]) is not None


def test_an_unknown_underscore_spelling_is_refused_by_the_adapter_too() -> None:
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        _adapter_args(["--max_model_len", "9"])


def test_the_crd_carries_the_same_flag_expression_as_the_model() -> None:
    text = render_crd_files()["infergate.io_inferencedeployments.yaml"]
    crd = yaml.safe_load(text)
    engine = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["engine"]
    rules = engine["properties"]["args"]["x-kubernetes-validations"]
    for pattern in PINNED_ARG_PATTERNS:
        assert any(pattern in rule["rule"] for rule in rules)
    assert all(flag in rules[0]["message"] for flag in PINNED_FLAGS)


# -- pinned MindFormers config ---------------------------------------------------------------


@pytest.mark.parametrize("key", MINDFORMERS_PINNED_CONFIG_KEYS)
def test_mindformers_config_may_not_set_a_pinned_key(key: str) -> None:
    with pytest.raises(ValidationError, match=f"engine.config: {key} is not allowed"):
        InferenceDeploymentSpec.model_validate(_mindformers(config={key: "float16"}))


def test_every_key_the_renderer_pins_is_refused_in_config() -> None:
    spec = InferenceDeploymentSpec.model_validate(_mindformers(config={"rms_norm_eps": 1e-6}))
    uri = spec.model.uri
    weights = model_weights(parse_model_uri(uri), uri)
    rendered = mindformers_model_config(RevisionInput("tiny", "0" * 10, spec, "i:1", weights))
    pinned = set(rendered) - {"rms_norm_eps"}
    assert pinned <= set(MINDFORMERS_PINNED_CONFIG_KEYS)
    assert rendered["rms_norm_eps"] == 1e-6


def test_vllm_config_keys_are_hf_overrides_and_not_restricted() -> None:
    spec = InferenceDeploymentSpec.model_validate(_spec(config={"compute_dtype": "x"}))
    assert spec.engine.config == {"compute_dtype": "x"}


# -- model URIs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "pvc://models/../../etc",
        "pvc://models/qwen/..",
        "pvc://models/./qwen",
        "pvc://models/%2e%2e/secret",
        "pvc://models/qwen%2F..%2F..",
        "pvc://models/a\\..\\b",
        "file:///data/models/../../etc",
        "file:///..",
        "file:///data/%2e%2e/etc",
        "s3://bucket/../other-bucket/key",
        "hf://Qwen/Qwen2.5-7B@../../../../tmp",
        "hf://Qwen/Qwen2.5-7B@..",
    ],
)
def test_traversal_is_refused_in_every_scheme(uri: str) -> None:
    with pytest.raises(ValueError, match=re.escape("must not contain '.' or '..' path segments")):
        parse_model_uri(uri)
    with pytest.raises(ValidationError, match=r"model\.uri"):
        InferenceDeploymentSpec.model_validate({**_spec(), "model": {"name": "m", "uri": uri}})


@pytest.mark.parametrize(
    "uri",
    [
        "pvc://models/qwen2.5-7b",
        "pvc://models/v1.0/weights",
        "hf://Qwen/Qwen2.5-7B@v1.0",
        "s3://bucket/qwen..7b/key",
        "file:///data/models/qwen",
    ],
)
def test_dots_inside_names_pass(uri: str) -> None:
    assert parse_model_uri(uri).scheme.value == uri.split(":", 1)[0]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/data/models", True),
        ("/data/models/", True),
        ("/data/models/qwen", True),
        ("/data/models-old/qwen", False),
        ("/data", False),
        ("/etc", False),
        ("/", False),
    ],
)
def test_host_paths_are_allowed_by_whole_segments(path: str, allowed: bool) -> None:
    assert host_path_allowed(path, ("/data/models/", "relative/ignored")) is allowed


def test_file_uris_need_an_allowed_directory() -> None:
    prefixes = parse_allow_list(" /data/models ,\n/mnt/weights,, ")
    assert prefixes == ("/data/models", "/mnt/weights")
    check_host_path("file:///data/models/qwen", prefixes)
    check_host_path("pvc://models/qwen", ())
    with pytest.raises(ValueError, match="only these are allowed: /data/models, /mnt/weights"):
        check_host_path("file:///var/lib/kubelet", prefixes)
    with pytest.raises(ValueError, match=r"none \(file:// is off\)"):
        check_host_path("file:///data/models/qwen", ())


def test_engine_service_accounts_need_listing() -> None:
    assert service_account_allowed(None, ())
    assert service_account_allowed("default", ())
    assert not service_account_allowed("ci-deployer", ())
    assert service_account_allowed("model-reader", parse_allow_list("model-reader, other"))


# -- env -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "plain"),
    [
        ("VLLM_ATTENTION_BACKEND", True),
        ("VLLM_CPU_KVCACHE_SPACE", True),
        ("MS_DEV_RUNTIME_CONF", True),
        ("HCCL_DETERMINISTIC", True),
        ("TOKENIZERS_PARALLELISM", True),  # TOKENIZERS is not the word TOKEN
        ("VLLM_API_KEY", False),
        ("HF_TOKEN", False),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("NCCL_SOCKET_AUTH", False),
        ("MS_PASSWORD", False),
        ("HTTPS_PROXY", False),
        ("vllm_attention_backend", False),
    ],
)
def test_only_tuning_knobs_take_plain_values(name: str, plain: bool) -> None:
    assert plain_value_allowed(name) is plain
    env = [{"name": name, "value": "x"}]
    if plain:
        InferenceDeploymentSpec.model_validate(_spec(env=env))
    else:
        with pytest.raises(ValidationError, match=r"valueFrom\.secretKeyRef"):
            InferenceDeploymentSpec.model_validate(_spec(env=env))


def test_secrets_come_by_reference_and_the_revision_covers_the_reference() -> None:
    var = EnvVar.model_validate(
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    )
    assert var.container_env() == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert var.revision_value() == {"secretKeyRef": {"name": "hf", "key": "token"}}
    with pytest.raises(ValidationError, match="exclusive"):
        EnvVar.model_validate(
            {
                "name": "HF_TOKEN",
                "value": "hf_abc",
                "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
            }
        )
    with pytest.raises(ValidationError):
        EnvVar.model_validate({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c"}}})


# -- ParityCheck -----------------------------------------------------------------------------


def _check(**spec: Any) -> dict[str, Any]:
    document = next(doc for stem, doc in example_documents() if stem == "paritycheck")
    return {**document, "spec": {**document["spec"], **spec}}


def test_runner_image_is_refused_and_says_why() -> None:
    with pytest.raises(ValidationError, match="operator's own pinned image"):
        ParityCheck.model_validate(_check(runner={"image": "evil/runner:1"}))


@pytest.mark.parametrize(
    "field",
    [
        {"command": ["sh", "-c", "write-a-verdict"]},
        {"args": ["parity", "run", "--check", "other/check"]},
        {"env": [{"name": "INFERGATE_GOLDEN_CONFIG", "value": "{}"}]},
        {"volumes": [{"name": "x", "secret": {"secretName": "golden-s3"}}]},
        {"serviceAccountName": "infergate-operator"},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_check_sets_nothing_of_the_runner_pod_but_its_resources_and_pacing(
    field: dict[str, Any],
) -> None:
    """The runner runs with an identity that may write the check's verdict: what it runs and
    with what is the operator's, never the check author's. The model refuses such fields,
    and the CRD schema has no room for them (the API server prunes unknown fields)."""
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ParityCheck.model_validate(_check(runner=field))
    crds = [yaml.safe_load(text) for text in render_crd_files().values()]
    [crd] = [d for d in crds if d["spec"]["names"]["kind"] == "ParityCheck"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    runner = schema["properties"]["spec"]["properties"]["runner"]
    assert set(runner["properties"]) == {
        "image",  # refused by a CEL rule: see the test above
        "resources",
        "activeDeadlineSeconds",
        "backoffLimit",
        "concurrency",
    }
    assert "x-kubernetes-preserve-unknown-fields" not in runner


@pytest.mark.parametrize(
    "url",
    ["http://user:pass@reference.llm.svc:8000", "https://token@api.example.com/v1"],
)
def test_endpoint_urls_carry_no_credentials(url: str) -> None:
    baseline = {"endpoint": {"url": url, "model": "m"}}
    with pytest.raises(ValidationError, match="must not carry credentials") as caught:
        ParityCheck.model_validate(_check(baseline=baseline))
    assert "pass@" not in str(caught.value).split("input_value")[0]


@pytest.mark.parametrize("concurrency", [0, RUNNER_CONCURRENCY_MAX + 1])
def test_runner_concurrency_outside_its_bounds_is_refused_naming_the_field(
    concurrency: int,
) -> None:
    with pytest.raises(ValidationError, match="concurrency") as caught:
        ParityCheck.model_validate(_check(runner={"concurrency": concurrency}))
    assert "runner" in str(caught.value)


def test_runner_concurrency_one_is_accepted_for_an_exact_overhead() -> None:
    check = ParityCheck.model_validate(_check(runner={"concurrency": 1}))
    assert check.spec.runner.concurrency == 1
