"""The model's tokenizer through the `tokenizers` library (both engine venvs have it).

Both adapters tokenize with the same `tokenizer.json` and the same rules as vLLM's
OpenAI server: a completion's text prompt gets the tokenizer's special tokens (its
post-processor, plus a BOS or EOS where tokenizer_config.json sets add_bos_token or
add_eos_token, as transformers adds them); a chat is rendered with the model's chat
template (transformers' `apply_chat_template`, as vLLM renders it) and tokenized without
adding special tokens again; decoding skips special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infergate.runtime.backend import BackendError
from infergate.runtime.fingerprints import chat_template


class ModelTokenizer:
    """Encode and decode with `model_dir/tokenizer.json`; render chats with its template."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise BackendError(f"model: {model_dir} has no tokenizer.json")
        self._dir = model_dir
        self._tokenizer: Any = Tokenizer.from_file(str(path))
        config_path = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = {}
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        self._bos = self._special_id(config, "bos_token") if config.get("add_bos_token") else None
        self._eos = self._special_id(config, "eos_token") if config.get("add_eos_token") else None
        self._template = chat_template(model_dir)
        self._renderer: Any = None

    def _special_id(self, config: Mapping[str, Any], key: str) -> int | None:
        value = config.get(key)
        name = value.get("content") if isinstance(value, Mapping) else value
        if not isinstance(name, str):
            return None
        found = self._tokenizer.token_to_id(name)
        return None if found is None else int(found)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        encoded = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        ids: list[int] = list(encoded.ids)
        if add_special_tokens:
            if self._bos is not None and (not ids or ids[0] != self._bos):
                ids.insert(0, self._bos)
            if self._eos is not None and (not ids or ids[-1] != self._eos):
                ids.append(self._eos)
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(token_ids), skip_special_tokens=True)
        return text

    def token_text(self, token_id: int) -> str:
        text: str = self._tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The chat as the model's template renders it (what vLLM's chat endpoint does)."""
        if self._template is None:
            raise BackendError(
                f"messages: the model at {self._dir} has no chat template "
                "(chat_template.jinja or tokenizer_config.json chat_template); send text instead"
            )
        if self._renderer is None:
            from transformers import PreTrainedTokenizerFast

            self._renderer = PreTrainedTokenizerFast(
                tokenizer_file=str(self._dir / "tokenizer.json")
            )
        text: str = self._renderer.apply_chat_template(
            [dict(m) for m in messages],
            chat_template=self._template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
        return text
