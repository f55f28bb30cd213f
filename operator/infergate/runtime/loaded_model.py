"""What every adapter backend knows of its model before an engine runs it.

The model directory's configuration (with the user's overrides), its tokenizer, the
compute dtype and the longest sequence served. Backends derive from `LoadedModel` and
add the engine: loading weights, decoding, scoring and the hidden-state probe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infergate.runtime.backend import check_dtype
from infergate.runtime.model_config import ModelConfig, load_model_config
from infergate.runtime.tokenizer import ModelTokenizer


class LoadedModel:
    """The engine-independent half of an `EngineBackend`."""

    def __init__(
        self,
        model_dir: Path,
        dtype: str,
        overrides: Mapping[str, float],
        max_model_len: int | None,
    ) -> None:
        self._dtype = check_dtype(dtype)
        self._config: ModelConfig = load_model_config(model_dir).with_overrides(overrides)
        longest = self._config.max_position_embeddings
        self._max_len = min(max_model_len or longest, longest)
        self._tokenizer = ModelTokenizer(model_dir)

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def max_model_len(self) -> int:
        return self._max_len

    @property
    def eos_token_id(self) -> int | None:
        return self._config.eos_token_id

    @property
    def config(self) -> ModelConfig:
        return self._config

    def effective_config(self) -> dict[str, Any]:
        return self._config.effective(self._dtype)

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(token_ids)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.token_text(token_id)
