"""Inputs at the edges of the admission rules, each with the answer both judges must give.

The same objects go through the operator's pydantic models (tests/unit/api) and through
the CRD schema on the real API server (tests/integration/test_admission_agreement.py):
a rule written in one place and not the other shows as a disagreement. Each bad input
sits next to a good one just inside the rule, so a rule that refuses too much shows too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from infergate.api import InferenceDeployment, ParityCheck
from tests.unit.api.manifests import example_documents

JSON = dict[str, Any]

_MODELS: dict[str, type[InferenceDeployment] | type[ParityCheck]] = {
    "InferenceDeployment": InferenceDeployment,
    "ParityCheck": ParityCheck,
}


@dataclass(frozen=True)
class AdmissionCase:
    """One object and whether it must be admitted."""

    name: str
    document: JSON
    accepted: bool


def models_accept(document: JSON) -> bool:
    """Whether the operator's models take `document` (what the operator would act on)."""
    try:
        _MODELS[document["kind"]].model_validate(document)
    except ValidationError:
        return False
    return True


def _example(stem: str) -> JSON:
    document = next(doc for name, doc in example_documents() if name == stem)
    return copy.deepcopy(document)


def _deployment(change: Callable[[JSON], None]) -> JSON:
    document = _example("vllm-gpu")
    change(document["spec"])
    return document


def _check(change: Callable[[JSON], None]) -> JSON:
    document = _example("paritycheck")
    change(document["spec"])
    return document


def _shadow_check(change: Callable[[JSON], None]) -> JSON:
    """A shadow check: two revisions of one deployment, no suite."""

    def shadow(spec: JSON) -> None:
        del spec["suite"]
        spec["source"] = "shadow"
        spec["baseline"] = {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "0123456789"}
        spec["candidate"] = {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "abcdef0123"}
        change(spec)

    return _check(shadow)


def _args(*args: str) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["engine"]["args"] = list(args)

    return change


def _engine_resources(**requests: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["resources"] = {"requests": requests}

    return change


def _runner_resources(**limits: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["runner"]["resources"] = {"limits": limits}

    return change


def _rollout_runner_resources(**limits: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["rollout"]["parity"]["runner"] = {"resources": {"limits": limits}}

    return change


def _thresholds(**limits: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["thresholds"] = limits

    return change


def _regression(**allowances: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["regression"] = allowances

    return change


def _set(path: str, value: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


def _unchanged(spec: JSON) -> None:
    """The object as built."""


def _renamed(name: str) -> JSON:
    document = _example("vllm-gpu")
    document["metadata"]["name"] = name
    return document


def _quantity_cases() -> list[AdmissionCase]:
    return [
        AdmissionCase("cpu-negative-string", _deployment(_engine_resources(cpu="-1")), False),
        AdmissionCase("cpu-negative-int", _deployment(_engine_resources(cpu=-1)), False),
        AdmissionCase("memory-negative", _deployment(_engine_resources(memory="-1Gi")), False),
        AdmissionCase("memory-negative-milli", _deployment(_engine_resources(memory="-5m")), False),
        AdmissionCase("cpu-zero", _deployment(_engine_resources(cpu=0)), True),
        AdmissionCase("cpu-milli", _deployment(_engine_resources(cpu="500m")), True),
        AdmissionCase("memory-plus-sign", _deployment(_engine_resources(memory="+1Gi")), True),
        AdmissionCase(
            "memory-negative-exponent-is-positive",
            _deployment(_engine_resources(memory="1e-3")),
            True,
        ),
        AdmissionCase(
            "rollout-runner-memory-negative",
            _deployment(_rollout_runner_resources(memory="-1Gi")),
            False,
        ),
        AdmissionCase("runner-cpu-negative", _check(_runner_resources(cpu="-2")), False),
        AdmissionCase("runner-cpu-two", _check(_runner_resources(cpu=2)), True),
    ]


# Flags that would load weights, config, tokenizer, generation settings or code from
# elsewhere than model.uri, in the spellings vLLM's parser accepts.
_REFUSED_ARGS: tuple[tuple[str, ...], ...] = (
    ("--load-format", "dummy"),
    ("--load-format=dummy",),
    ("--load_format=dummy",),
    ("--load-f", "dummy"),
    ("--hf-config-path", "other/model"),
    ("--hf_config_path=other/model",),
    ("--tokenizer", "other/tokenizer"),
    ("--tokenizer=other/tokenizer",),
    ("--tokenizer-revision=main",),
    ("--tokenizer_revision", "main"),
    ("--code-revision=abc",),
    ("--revision=main",),
    ("--override-generation-config", '{"temperature": 1.0}'),
    ("--override-generation-config.temperature=1.0",),
    ("--override_generation_config={}",),
    ("--generation-config=/tmp/other",),
    ("--trust-remote-code",),
    ("--trust_remote_code",),
    ("--trust-remote",),
    # One argument is one printable token: no spelling hides behind a control character.
    ("--dtype\n",),
    ("--dtype=float16\n",),
    ("--enforce-eager\n",),
    ("--max-num-seqs=8\t",),
    ("--enforce-eager\x00",),
)
_ALLOWED_ARGS: tuple[tuple[str, ...], ...] = (
    ("--enforce-eager",),
    ("--tokenizer-mode=slow",),
    ("--config-format=hf",),
    ("--no-trust-remote-code",),
    ("--tool-call-parser=hermes",),
    ("--override-pooler-config={}",),
    ("--compilation-config", '{"level": 3}'),
    ("-O3",),
    ("--disable-log-requests",),
)


def _arg_cases() -> list[AdmissionCase]:
    refused = [
        AdmissionCase(f"args-{' '.join(args)!r}", _deployment(_args(*args)), False)
        for args in _REFUSED_ARGS
    ]
    allowed = [
        AdmissionCase(f"args-{' '.join(args)!r}", _deployment(_args(*args)), True)
        for args in _ALLOWED_ARGS
    ]
    return refused + allowed


def _newline_cases() -> list[AdmissionCase]:
    """Patterns the CRD matches with RE2 and the models with Python: `$` must agree."""
    return [
        AdmissionCase(
            "model-uri-trailing-newline",
            _deployment(_set("model.uri", "pvc://models/qwen2.5-7b-instruct\n")),
            False,
        ),
        AdmissionCase(
            "image-trailing-newline",
            _deployment(_set("engine.image", "vllm/vllm-openai:v0.32.0\n")),
            False,
        ),
        AdmissionCase("name-trailing-newline", _renamed("qwen\n"), False),
    ]


def _threshold_cases() -> list[AdmissionCase]:
    limits: list[tuple[str, Any, bool]] = [
        ("minTokenMatchRate", 0, False),  # passes every measurement
        ("minTokenMatchRate", 0.001, True),
        ("minTokenMatchRate", 1, True),
        ("minTokenMatchRate", 1.5, False),  # passes none
        ("minSameTopRate", 0, False),
        ("minHiddenCosine", -1, False),
        ("minHiddenCosine", -0.5, True),
        ("minHiddenCosineP1", 1, True),
        ("maxIllegitimateDivergenceRate", 1, False),  # fails none
        ("maxIllegitimateDivergenceRate", 0, True),
        ("maxDeltaPMean", 1, False),
        ("maxDeltaPRms", 0.5, True),
        ("maxLongSameTopDrop", 1, False),
        ("maxMeanKl", 0, True),
        ("maxMeanKl", 100, True),
        ("maxMeanKl", 1e9, False),  # fails none in practice
        ("maxMeanKl", -0.1, False),
        ("maxKlP99", 101, False),
        ("maxLogPerplexityRatio", 1000, False),
        ("maxDivergenceLogprobGap", 1e6, False),
        ("maxHiddenMaxAbsErr", 1e12, False),
        ("maxHiddenMaxAbsErr", 0, True),
        ("maxHiddenRelL2P99", 1e4, False),
        ("maxHiddenNormLogRatio", 50, False),  # the measurement is clipped at 50
        ("maxHiddenNormLogRatio", 49.5, True),
        ("maxLongToShortKlRatio", 0, False),
        ("maxLongToShortKlRatio", 3, True),
        ("maxLongToShortHiddenRatio", 1e9, False),
        ("minFirstDivergenceP10", 0, False),
        ("minFirstDivergenceP10", 128, True),  # the example's sampling.maxTokens
        ("minFirstDivergenceP10", 129, False),  # never generated that far
        ("longPromptTokens", 2000000, False),
        ("confidence", 0.99, True),
    ]
    cases = [
        AdmissionCase(f"threshold-{key}-{value}", _check(_thresholds(**{key: value})), accepted)
        for key, value, accepted in limits
    ]
    allowances: list[tuple[str, Any, bool]] = [
        ("maxTokenMatchRateDrop", 1, False),  # a drop of 1 never regresses
        ("maxTokenMatchRateDrop", 0.99, True),
        ("maxSameTopRateDrop", 1, False),
        ("maxMeanKlIncrease", 1e9, False),
        ("maxMeanKlIncrease", 0.01, True),
        ("maxHiddenRelL2Increase", 1e4, False),
    ]
    cases += [
        AdmissionCase(f"regression-{key}-{value}", _check(_regression(**{key: value})), accepted)
        for key, value, accepted in allowances
    ]
    cases += [
        AdmissionCase(
            "rollout-threshold-min-rate-zero",
            _deployment(_set("rollout.parity.thresholds.minTokenMatchRate", 0)),
            False,
        ),
        AdmissionCase(
            "rollout-p10-past-max-tokens",
            _deployment(_set("rollout.parity.thresholds.minFirstDivergenceP10", 257)),
            False,
        ),
        AdmissionCase(
            "rollout-p10-at-max-tokens",
            _deployment(_set("rollout.parity.thresholds.minFirstDivergenceP10", 256)),
            True,
        ),
        AdmissionCase(
            "performance-throughput-drop-one",
            _check(_set("performance.maxThroughputDrop", 1)),
            False,
        ),
        AdmissionCase(
            "performance-throughput-drop-half",
            _check(_set("performance.maxThroughputDrop", 0.5)),
            True,
        ),
    ]
    return cases


def _topology(tensor: int = 1, count: int = 1, **topology: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["engine"]["tensorParallelSize"] = tensor
        spec["accelerator"]["count"] = count
        spec["topology"] = topology

    return change


def _mindformers_topology(**topology: Any) -> Callable[[JSON], None]:
    def change(spec: JSON) -> None:
        spec["engine"]["kind"] = "mindformers"
        spec["engine"].pop("image", None)
        spec["accelerator"]["kind"] = "ascend-npu"
        spec["topology"] = topology

    return change


# (name, change, admitted): a group's devices and the engine's world must agree exactly.
_TOPOLOGIES: tuple[tuple[str, Callable[[JSON], None], bool], ...] = (
    ("topology-empty-is-one-node", _topology(), True),
    ("topology-one-node-pp2", _topology(tensor=4, pipelineParallelSize=2), True),
    ("topology-one-node-over-16", _topology(tensor=16, pipelineParallelSize=2), False),
    (
        "topology-one-node-named-size",
        _topology(tensor=8, nodes=1, acceleratorsPerNode=8),
        True,
    ),
    ("topology-two-nodes-no-size", _topology(tensor=8, nodes=2, pipelineParallelSize=2), False),
    (
        "topology-two-nodes-tp8-pp2",
        _topology(tensor=8, nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2),
        True,
    ),
    (
        "topology-two-nodes-tp16",
        _topology(tensor=16, nodes=2, acceleratorsPerNode=8),
        True,
    ),
    (
        "topology-two-nodes-devices-idle",
        _topology(tensor=8, nodes=2, acceleratorsPerNode=8),
        False,
    ),
    (
        "topology-two-nodes-devices-short",
        _topology(tensor=8, nodes=2, acceleratorsPerNode=4, pipelineParallelSize=2),
        False,
    ),
    (
        "topology-count-counts",
        _topology(tensor=4, count=2, nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2),
        True,
    ),
    (
        "topology-dp-ep",
        _topology(
            tensor=8, nodes=2, acceleratorsPerNode=8, dataParallelSize=2, expertParallel=True
        ),
        True,
    ),
    ("topology-ep-one-rank", _topology(tensor=1, expertParallel=True), False),
    ("topology-ep-vllm-tp2", _topology(tensor=2, expertParallel=True), True),
    ("topology-nodes-over-max", _topology(tensor=1, nodes=65, acceleratorsPerNode=1), False),
    ("topology-size-over-max", _topology(tensor=16, nodes=1, acceleratorsPerNode=17), False),
    (
        "topology-mindformers-ep-needs-dp",
        _mindformers_topology(
            nodes=2, acceleratorsPerNode=1, pipelineParallelSize=2, expertParallel=True
        ),
        False,
    ),
    (
        "topology-mindformers-two-nodes",
        _mindformers_topology(
            nodes=2,
            acceleratorsPerNode=2,
            dataParallelSize=2,
            pipelineParallelSize=2,
            expertParallel=True,
        ),
        True,
    ),
    ("topology-unknown-field", _topology(tensorParallelSize=2), False),
)


def _topology_cases() -> list[AdmissionCase]:
    cases = [AdmissionCase(name, _deployment(change), ok) for name, change, ok in _TOPOLOGIES]
    pinned = ("--pipeline-parallel-size=2", "-pp", "--distributed-executor-backend=ray", "--nnodes")
    return cases + [
        AdmissionCase(f"args-{arg!r}", _deployment(_args(arg, "2")), False) for arg in pinned
    ]


def _deadline_cases() -> list[AdmissionCase]:
    return [
        AdmissionCase("shadow-default-window", _shadow_check(_unchanged), True),
        AdmissionCase(
            "shadow-window-as-long-as-runner",
            _shadow_check(_set("shadow.windowSeconds", 1800)),  # the runner's deadline
            False,
        ),
        AdmissionCase(
            "shadow-window-below-runner",
            _shadow_check(_set("shadow.windowSeconds", 1799)),
            True,
        ),
        AdmissionCase(
            "shadow-default-window-past-runner",
            _shadow_check(_set("runner.activeDeadlineSeconds", 300)),
            False,
        ),
        AdmissionCase(
            "suite-check-ignores-window",
            _check(_set("runner.activeDeadlineSeconds", 300)),
            True,
        ),
        AdmissionCase(
            "runner-past-check-deadline",
            _check(_set("runner.activeDeadlineSeconds", 3601)),
            False,
        ),
    ]


def _placement_cases() -> list[AdmissionCase]:
    secrets = "placement.imagePullSecrets"
    return [
        AdmissionCase("pull-secret", _deployment(_set(secrets, [{"name": "registry"}])), True),
        AdmissionCase(
            "pull-secrets-16",
            _deployment(_set(secrets, [{"name": f"r{i}"} for i in range(16)])),
            True,
        ),
        AdmissionCase(
            "pull-secrets-17",
            _deployment(_set(secrets, [{"name": f"r{i}"} for i in range(17)])),
            False,
        ),
        AdmissionCase(
            "pull-secret-twice",
            _deployment(_set(secrets, [{"name": "registry"}, {"name": "registry"}])),
            False,
        ),
        AdmissionCase(
            "pull-secret-not-a-name", _deployment(_set(secrets, [{"name": "Registry_1"}])), False
        ),
        AdmissionCase("pull-secret-no-name", _deployment(_set(secrets, [{}])), False),
        AdmissionCase(
            "priority-class", _deployment(_set("placement.priorityClassName", "inference")), True
        ),
        AdmissionCase(
            "priority-class-not-a-name",
            _deployment(_set("placement.priorityClassName", "Inference High")),
            False,
        ),
    ]


def admission_cases() -> list[AdmissionCase]:
    """Every case, bad and good."""
    return [
        *_placement_cases(),
        *_quantity_cases(),
        *_arg_cases(),
        *_newline_cases(),
        *_threshold_cases(),
        *_deadline_cases(),
        *_topology_cases(),
    ]
