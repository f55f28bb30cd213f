"""vLLM on NVIDIA GPU: `vllm serve` with every numeric setting given as an explicit flag."""

from __future__ import annotations

import json
from typing import Any

from infergate.api.model_uri import UriScheme
from infergate.render.launch import HTTP_PORT, POD_IP_REF, EngineLaunch, RevisionInput, env_value

# vLLM's default cap; parity requests up to 20 top logprobs per step.
MAX_LOGPROBS = 20


def vllm_launch(revision: RevisionInput) -> EngineLaunch:
    """The `vllm serve` command line and its pinned configuration record."""
    spec = revision.spec
    engine = spec.engine
    args = [
        "serve",
        revision.model.reference,
        "--served-model-name",
        spec.model.name,
        "--dtype",
        engine.dtype.value,
        "--max-model-len",
        str(engine.max_model_len),
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--seed",
        str(engine.seed),
        # Sampling defaults come from vLLM and the request only: a generation_config.json
        # shipped with the weights must not change sampling silently.
        "--generation-config",
        "vllm",
        "--max-logprobs",
        str(MAX_LOGPROBS),
        "--host",
        POD_IP_REF,
        "--port",
        str(HTTP_PORT),
    ]
    location = revision.model.location
    if location.scheme is UriScheme.HF and location.revision is not None:
        args += ["--revision", location.revision]
    if location.scheme is UriScheme.S3:
        args += ["--load-format", "runai_streamer"]
    if engine.config:
        args += ["--hf-overrides", json.dumps(engine.config, sort_keys=True, separators=(",", ":"))]
    args += list(engine.args)

    env: list[dict[str, Any]] = []
    if engine.deterministic:
        # Batch-invariant kernels: a prompt's logprobs do not depend on its batch.
        env.append(env_value("VLLM_BATCH_INVARIANT", "1"))
    env += [env_value(var.name, var.value) for var in engine.env]

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
        "env": {item["name"]: item["value"] for item in env},
    }
    return EngineLaunch(command=["vllm"], args=args, env=env, engine_config=config)
