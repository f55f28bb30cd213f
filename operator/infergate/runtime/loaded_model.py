"""What every adapter backend knows of its model before an engine runs it.

The model directory's configuration (with the user's overrides), its tokenizer, the
compute dtype and the longest sequence served. Backends derive from `LoadedModel` and
add the engine: loading weights, decoding, scoring and the hidden-state probe.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.runtime.backend import PROMPT_LOGPROB_CHUNK, check_dtype
from infergate.runtime.fingerprints import model_fingerprints
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
        self._model_dir = model_dir
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

    @property
    def engine(self) -> str:
        raise NotImplementedError

    @property
    def engine_version(self) -> str:
        raise NotImplementedError

    def effective_config(self) -> dict[str, Any]:
        return self._config.effective(self._dtype)

    def fingerprints(self) -> dict[str, Any]:
        return model_fingerprints(
            self._model_dir,
            engine=self.engine,
            engine_version=self.engine_version,
            dtype=self._dtype,
            loaded_config=self._config.effective(self._dtype),
            encode=lambda text: self._tokenizer.encode(text, add_special_tokens=True),
        )

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        return self._tokenizer.render_chat(messages)

    def prompt_logprob_chunks(
        self, token_ids: Sequence[int], first_row: int = 0, chunk: int = PROMPT_LOGPROB_CHUNK
    ) -> Iterator[tuple[int, NDArray[np.float32]]]:
        raise NotImplementedError

    def prompt_logprobs(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        """All next-token rows at once (in-process use on short sequences)."""
        parts = [rows for _, rows in self.prompt_logprob_chunks(token_ids)]
        if not parts:
            return np.zeros((0, self._config.vocab_size), np.float32)
        return np.concatenate(parts)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(token_ids)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.token_text(token_id)
