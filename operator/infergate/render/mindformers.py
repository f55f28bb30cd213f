"""MindFormers on Ascend: infergate's adapter server driven by a pinned MindFormers config.

The adapter (`infergate serve --engine mindformers --engine-config engine.json`) reads
the ConfigMap's `engine.json`: the MindSpore context, the parallel layout and
the MindFormers `model_config`, whose numeric types are pinned here
(low-precision compute with float32 layer norm, softmax and rotary embedding,
as MindFormers' own inference configs do) and then overridden by
`spec.engine.config`.
"""

from __future__ import annotations

from typing import Any

from infergate.api.model_uri import UriScheme
from infergate.api.topology import DEFAULT_TOPOLOGY
from infergate.render.launch import (
    CONFIG_PATH,
    HTTP_PORT,
    POD_IP_REF,
    EngineLaunch,
    RevisionInput,
    env_value,
    pinned_env,
)

GRAPH_MODE = 0
# Numerically sensitive reductions run in float32 whatever the compute dtype.
FLOAT32_COMPUTE_TYPES = ("layernorm_compute_type", "softmax_compute_type", "rotary_dtype")


def mindformers_model_config(revision: RevisionInput) -> dict[str, Any]:
    """MindFormers `model_config`: pinned dtypes and sequence length, then the user's overrides."""
    engine = revision.spec.engine
    pinned: dict[str, Any] = {
        "compute_dtype": engine.dtype.value,
        "param_init_type": engine.effective_params_dtype.value,
        **dict.fromkeys(FLOAT32_COMPUTE_TYPES, "float32"),
        "seq_length": engine.max_model_len,
        # Incremental inference (KV cache), as MindFormers serves on Ascend.
        "use_past": True,
    }
    return {**pinned, **engine.config}


def _parallel_config(revision: RevisionInput) -> dict[str, Any]:
    """MindFormers parallel_config: data_parallel x model_parallel x pipeline_stage devices
    (msrun's worker_num in a group); with expert parallelism, experts over data_parallel."""
    topology = revision.spec.layout
    config: dict[str, Any] = {
        "data_parallel": topology.data_parallel_size,
        "model_parallel": revision.spec.engine.tensor_parallel_size,
        "pipeline_stage": topology.pipeline_parallel_size,
    }
    if topology.expert_parallel:
        config["expert_parallel"] = topology.data_parallel_size
    return config


def mindformers_launch(revision: RevisionInput) -> EngineLaunch:
    """The adapter's command line, deterministic env and the engine.json it reads."""
    spec = revision.spec
    engine = spec.engine
    args = [
        "serve",
        "--engine",
        "mindformers",
        "--engine-config",
        CONFIG_PATH,
        "--host",
        POD_IP_REF,
        "--port",
        str(HTTP_PORT),
        *engine.args,
    ]
    env: list[dict[str, Any]] = []
    if engine.deterministic:
        # MindFormers' consistency switches: ordered reductions in HCCL and LCCL collectives.
        env += [env_value("HCCL_DETERMINISTIC", "true"), env_value("LCCL_DETERMINISTIC", "1")]
    env += [var.container_env() for var in engine.env]

    location = revision.model.location
    model: dict[str, Any] = {"uri": spec.model.uri}
    if location.scheme is UriScheme.HF:
        model["repository"] = location.authority
        if location.revision is not None:
            model["revision"] = location.revision
    else:
        model["path"] = revision.model.reference

    config: dict[str, Any] = {
        "engine": engine.kind.value,
        "revision": revision.revision,
        "image": revision.image,
        "servedModelName": spec.model.name,
        "model": model,
        "dtype": engine.dtype.value,
        "paramsDtype": engine.effective_params_dtype.value,
        "maxModelLen": engine.max_model_len,
        "tensorParallelSize": engine.tensor_parallel_size,
        "seed": engine.seed,
        "deterministic": engine.deterministic,
        "mindformers": {
            "seed": engine.seed,
            "context": {
                "mode": GRAPH_MODE,
                "device_target": "Ascend",
                "deterministic": "ON" if engine.deterministic else "OFF",
            },
            "parallel_config": _parallel_config(revision),
            "model_config": mindformers_model_config(revision),
        },
        "argv": ["infergate", *args],
        # What runs, never a secret: a Secret-backed variable is recorded by its reference.
        "env": pinned_env(env, engine.env),
    }
    if spec.layout != DEFAULT_TOPOLOGY:
        config["topology"] = spec.layout.to_kube()
    return EngineLaunch(command=["infergate"], args=args, env=env, engine_config=config)
