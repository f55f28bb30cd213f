"""vLLM on NVIDIA GPU: `vllm serve` with every numeric setting given as an explicit flag.

The one builder of vLLM's command line: the operator's engine pods, the parity
probe (the same line switched to the pooling runner) and `infergate serve --engine
vllm` (the recorder, the engine tests and the experiment) all run what
`vllm_serve_args` returns, so what is tested is what is deployed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infergate.api.model_uri import UriScheme
from infergate.api.topology import DEFAULT_TOPOLOGY
from infergate.render.launch import (
    ENGINE_GRACE_SECONDS,
    HTTP_PORT,
    POD_IP_REF,
    UNROUTE_SECONDS,
    EngineLaunch,
    RevisionInput,
    env_value,
    pinned_env,
)

# vLLM's default cap; parity requests up to 20 top logprobs per step.
MAX_LOGPROBS = 20
DRAIN_SECONDS = ENGINE_GRACE_SECONDS - UNROUTE_SECONDS - 10
"""How long a stopping vLLM server lets its requests in flight finish (`--shutdown-timeout`).
vLLM's default, 0, aborts them on SIGTERM: every promotion and rollback scales a revision
down while it serves, and its clients' requests in flight failed with 500. Below the pod's
grace period less its preStop hold, so the kubelet does not kill the server mid-drain."""

POOLER_CONFIG: dict[str, object] = {
    "task": "token_embed",
    "tok_pooling_type": "ALL",
    "use_activation": False,
}
"""vLLM's pooling runner returning every token's last-layer hidden state, unnormalised."""

POOLING_FLAGS: tuple[str, ...] = (
    "--runner",
    "pooling",
    "--convert",
    "embed",
    "--pooler-config",
    json.dumps(POOLER_CONFIG, sort_keys=True),
)
# Flags of the serving runner that the pooling runner has no use for, with their arity.
_SERVING_ONLY_FLAGS = {"--max-logprobs": 1}


@dataclass(frozen=True)
class VllmServe:
    """The knobs of one `vllm serve`."""

    model: str
    """Model directory or hub id, as vLLM loads it."""
    served_model_name: str
    dtype: str
    max_model_len: int
    seed: int
    host: str = POD_IP_REF
    port: int = HTTP_PORT
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int | None = None
    """--pipeline-parallel-size; None: left out (vLLM's default, 1)."""
    data_parallel_size: int = 1
    data_parallel_backend: str | None = None
    expert_parallel: bool = False
    distributed_executor_backend: str | None = None
    """`ray` for a group of pods (the leader's Ray head and the workers' Ray nodes)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Pinned model-config overrides (engine.config), passed as --hf-overrides."""
    revision: str | None = None
    """Hub revision of an hf:// model."""
    load_format: str | None = None
    extra: Sequence[str] = ()
    """engine.args, appended last (pinned flags were refused at admission)."""


def hf_overrides(config: Mapping[str, Any]) -> dict[str, Any]:
    """engine.config as vLLM hf_overrides on the Hugging Face config.

    transformers 5 reads the rope base from `rope_parameters` only, so a pinned
    `rope_theta` is written there; every other key is passed as given.
    """
    result: dict[str, Any] = {}
    for key, value in config.items():
        if key == "rope_theta":
            result["rope_parameters"] = {"rope_type": "default", "rope_theta": float(value)}
        else:
            result[key] = value
    return result


def vllm_serve_args(serve: VllmServe) -> list[str]:
    """`serve MODEL --flag value ...`: the arguments of the `vllm` command."""
    args = [
        "serve",
        serve.model,
        "--served-model-name",
        serve.served_model_name,
        "--dtype",
        serve.dtype,
        "--max-model-len",
        str(serve.max_model_len),
        "--tensor-parallel-size",
        str(serve.tensor_parallel_size),
        "--seed",
        str(serve.seed),
        # The weights' generation_config.json applies (its EOS ids decide where output
        # ends, as in production); every request sets its sampling explicitly, and the
        # check compares both sides' generation configs as fingerprints, so a change shows.
        "--generation-config",
        "auto",
        "--max-logprobs",
        str(MAX_LOGPROBS),
        "--host",
        serve.host,
        "--port",
        str(serve.port),
        "--shutdown-timeout",
        str(DRAIN_SECONDS),
    ]
    args += _layout_args(serve)
    if serve.revision is not None:
        args += ["--revision", serve.revision]
    if serve.load_format is not None:
        args += ["--load-format", serve.load_format]
    overrides = hf_overrides(serve.config)
    if overrides:
        args += ["--hf-overrides", json.dumps(overrides, sort_keys=True, separators=(",", ":"))]
    return [*args, *serve.extra]


def _layout_args(serve: VllmServe) -> list[str]:
    """The parallel layout beyond tensor parallelism; nothing for one pod of default sizes."""
    args: list[str] = []
    if serve.pipeline_parallel_size is not None:
        args += ["--pipeline-parallel-size", str(serve.pipeline_parallel_size)]
    if serve.data_parallel_size > 1:
        args += ["--data-parallel-size", str(serve.data_parallel_size)]
    if serve.data_parallel_backend is not None:
        args += ["--data-parallel-backend", serve.data_parallel_backend]
    if serve.expert_parallel:
        args.append("--enable-expert-parallel")
    if serve.distributed_executor_backend is not None:
        args += ["--distributed-executor-backend", serve.distributed_executor_backend]
    return args


def pooling_args(args: Sequence[str]) -> list[str]:
    """A `vllm serve` argument list switched to the pooling runner (hidden states)."""
    out: list[str] = []
    skip = 0
    for arg in args:
        if skip:
            skip -= 1
            continue
        flag = arg.split("=", 1)[0]
        if flag in _SERVING_ONLY_FLAGS:
            skip = 0 if "=" in arg else _SERVING_ONLY_FLAGS[flag]
            continue
        out.append(arg)
    return [*out, *POOLING_FLAGS]


def vllm_launch(revision: RevisionInput) -> EngineLaunch:
    """The `vllm serve` command line and its pinned configuration record."""
    spec = revision.spec
    engine = spec.engine
    location = revision.model.location
    topology = spec.layout
    group = topology.multi_node
    args = vllm_serve_args(
        VllmServe(
            model=revision.model.reference,
            served_model_name=spec.model.name,
            dtype=engine.dtype.value,
            max_model_len=engine.max_model_len,
            seed=engine.seed,
            tensor_parallel_size=engine.tensor_parallel_size,
            # A group names its pipeline size even when 1 (tensor parallel across nodes).
            pipeline_parallel_size=(
                topology.pipeline_parallel_size
                if group or topology.pipeline_parallel_size > 1
                else None
            ),
            data_parallel_size=topology.data_parallel_size,
            # Ray places a group's data-parallel engines over its nodes.
            data_parallel_backend="ray" if group and topology.data_parallel_size > 1 else None,
            expert_parallel=topology.expert_parallel,
            distributed_executor_backend="ray" if group else None,
            config=engine.config,
            revision=location.revision if location.scheme is UriScheme.HF else None,
            load_format="runai_streamer" if location.scheme is UriScheme.S3 else None,
            extra=engine.args,
        )
    )
    env: list[dict[str, Any]] = []
    if engine.deterministic:
        # Batch-invariant kernels: a prompt's logprobs do not depend on its batch.
        env.append(env_value("VLLM_BATCH_INVARIANT", "1"))
    env += [var.container_env() for var in engine.env]

    config: dict[str, Any] = {
        "engine": engine.kind.value,
        "revision": revision.revision,
        "image": revision.image,
        "servedModelName": spec.model.name,
        "model": {"uri": spec.model.uri, "reference": revision.model.reference},
        "dtype": engine.dtype.value,
        "maxModelLen": engine.max_model_len,
        "tensorParallelSize": engine.tensor_parallel_size,
        "seed": engine.seed,
        "deterministic": engine.deterministic,
        "hfOverrides": engine.config,
        "argv": ["vllm", *args],
        # What runs, never a secret: a Secret-backed variable is recorded by its reference.
        "env": pinned_env(env, engine.env),
    }
    if topology != DEFAULT_TOPOLOGY:
        config["topology"] = topology.to_kube()
    return EngineLaunch(command=["vllm"], args=args, env=env, engine_config=config)
