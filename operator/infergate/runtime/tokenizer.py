"""The model's tokenizer through the `tokenizers` library (both engine venvs have it).

Both adapters tokenize with the same `tokenizer.json` and the same rules as vLLM's
completions endpoint: no special tokens added to a text prompt, special tokens skipped
when decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infergate.runtime.backend import BackendError


class ModelTokenizer:
    """Encode and decode with `model_dir/tokenizer.json`."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise BackendError(f"model: {model_dir} has no tokenizer.json")
        self._tokenizer: Any = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(token_ids), skip_special_tokens=True)
        return text

    def token_text(self, token_id: int) -> str:
        text: str = self._tokenizer.decode([token_id], skip_special_tokens=False)
        return text
