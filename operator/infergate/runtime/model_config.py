"""The numeric configuration of a Hugging Face-layout Qwen2/Llama model directory.

Read from `config.json` without any engine, so every engine reports its effective
configuration with the same keys: the hygiene check compares these dictionaries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from infergate.runtime.backend import BackendError


@dataclass(frozen=True)
class ModelConfig:
    """What the engines need to build the model and what the hygiene check compares."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    eos_token_id: int | None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def with_overrides(self, overrides: Mapping[str, float]) -> ModelConfig:
        """A copy with `--config` overrides (keys of backend.CONFIG_KEYS) applied."""
        unknown = sorted(set(overrides) - {"rms_norm_eps", "rope_theta"})
        if unknown:
            raise BackendError(
                f"--config: unknown key {unknown[0]!r}; allowed: rms_norm_eps, rope_theta"
            )
        return replace(
            self,
            rms_norm_eps=float(overrides.get("rms_norm_eps", self.rms_norm_eps)),
            rope_theta=float(overrides.get("rope_theta", self.rope_theta)),
        )

    def effective(self, dtype: str) -> dict[str, Any]:
        """The effective numeric configuration as JSON values, dtype included."""
        return {"dtype": dtype, **asdict(self)}


def _rope_theta(data: Mapping[str, Any]) -> float:
    # transformers 5 keeps the rope base in rope_parameters; older files in rope_theta.
    params = data.get("rope_parameters")
    if isinstance(params, Mapping) and "rope_theta" in params:
        return float(params["rope_theta"])
    if "rope_theta" in data:
        return float(data["rope_theta"])
    return 10000.0


def load_model_config(model_dir: Path) -> ModelConfig:
    """Read `model_dir/config.json`; errors name the file and the missing field."""
    path = model_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackendError(f"model: {model_dir} has no config.json") from exc
    architectures = data.get("architectures") or ["?"]
    try:
        heads = int(data["num_attention_heads"])
        eos = data.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        return ModelConfig(
            architecture=str(architectures[0]),
            vocab_size=int(data["vocab_size"]),
            hidden_size=int(data["hidden_size"]),
            intermediate_size=int(data["intermediate_size"]),
            num_hidden_layers=int(data["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(data.get("num_key_value_heads") or heads),
            max_position_embeddings=int(data["max_position_embeddings"]),
            rms_norm_eps=float(data["rms_norm_eps"]),
            rope_theta=_rope_theta(data),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            eos_token_id=None if eos is None else int(eos),
        )
    except KeyError as exc:
        raise BackendError(f"{path}: required field {exc.args[0]!r} is missing") from exc
