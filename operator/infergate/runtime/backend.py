"""What an engine must do for the adapter server: the `EngineBackend` interface.

The server (`infergate.runtime.server`) speaks HTTP; a backend runs the model. Two
backends implement this: MindFormers on MindSpore (`mindformers_backend`) and the
transformers reference on PyTorch (`transformers_backend`). Everything crossing this
boundary is plain Python or numpy, so the server never imports an engine.

Logprobs follow vLLM: the engine's logits are cast to float32 and log-softmaxed there,
whatever the compute dtype.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

ALLOWED_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")

CONFIG_KEYS: tuple[str, ...] = ("rms_norm_eps", "rope_theta")
"""Numeric configuration a user may pin or override (`--config key=value`)."""

PROMPT_LOGPROB_CHUNK = 512
"""Positions whose next-token distributions are computed at once when scoring a sequence:
memory stays at chunk x vocab floats whatever the sequence length (8K positions of a
152K vocabulary would be 5 GB at once)."""


class BackendError(Exception):
    """An engine backend cannot do what was asked; the message says why and what is allowed."""


@dataclass(frozen=True)
class GreedyOutput:
    """A greedy continuation and, at every step, the top-k of the next-token distribution.

    `top_ids`/`top_logprobs` are [steps, k] (k may be 0); `chosen_logprobs[t]` is the
    logprob of `token_ids[t]`.
    """

    token_ids: list[int]
    chosen_logprobs: list[float]
    top_ids: NDArray[np.int64]
    top_logprobs: NDArray[np.float32]
    finish_reason: str
    logit_scale: list[float] | None = None
    """|raw logit| of each chosen token (the fork tau scales the dtype's rounding step by it)."""


class EngineBackend(Protocol):
    """A loaded model that the adapter server can drive. Calls are never concurrent."""

    @property
    def engine(self) -> str:
        """Engine kind: mindformers or transformers."""

    @property
    def engine_version(self) -> str:
        """The engine's version string, e.g. "mindformers 1.9.0 / mindspore 2.9.0"."""

    @property
    def dtype(self) -> str:
        """Compute dtype, one of ALLOWED_DTYPES."""

    @property
    def max_model_len(self) -> int:
        """Longest sequence (prompt plus output) the backend accepts."""

    @property
    def eos_token_id(self) -> int | None:
        """Token that ends a generation unless ignore_eos is set."""

    def effective_config(self) -> dict[str, Any]:
        """The numeric configuration actually loaded (JSON values), for hygiene checks."""

    def fingerprints(self) -> dict[str, Any]:
        """What this engine runs (tokenizer, template, generation config, weights, config,
        versions), as `infergate.parity.fingerprints` keys."""

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special tokens as the tokenizer adds them by default."""

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        """A chat rendered by the model's template, generation prompt added."""

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`."""

    def token_text(self, token_id: int) -> str:
        """One token's text as it would be decoded on its own."""

    def generate_greedy(
        self, prompt: Sequence[int], max_tokens: int, top_k: int, *, ignore_eos: bool
    ) -> GreedyOutput:
        """Greedy decoding of up to `max_tokens` tokens after `prompt`."""

    def prompt_logprobs(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        """Next-token logprobs [len - 1, vocab]: row i scores position i + 1 given 0..i."""

    def prompt_logprob_chunks(
        self, token_ids: Sequence[int], first_row: int = 0, chunk: int = PROMPT_LOGPROB_CHUNK
    ) -> Iterator[tuple[int, NDArray[np.float32]]]:
        """The rows of `prompt_logprobs` from `first_row` on, `chunk` rows at a time, as
        (index of the first row, rows): one forward pass, bounded memory."""

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        """Last-layer hidden states (after the final norm) [len, hidden], as float32."""


def parse_config_overrides(pairs: Sequence[str]) -> dict[str, float]:
    """`key=value` strings into numeric overrides; keys must be in CONFIG_KEYS."""
    overrides: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BackendError(f"--config: {pair!r} is not key=value")
        if key not in CONFIG_KEYS:
            raise BackendError(f"--config: unknown key {key!r}; allowed: {', '.join(CONFIG_KEYS)}")
        try:
            overrides[key] = float(value)
        except ValueError as exc:
            raise BackendError(f"--config: {key}={value!r} is not a number") from exc
    return overrides


def check_dtype(dtype: str) -> str:
    if dtype not in ALLOWED_DTYPES:
        raise BackendError(f"dtype: {dtype!r} is not allowed; allowed: {', '.join(ALLOWED_DTYPES)}")
    return dtype


def top_k_rows(
    logprobs: NDArray[np.float32], k: int
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Best-first top-k ids and logprobs of each row of [rows, vocab] (ties: lower id first)."""
    rows = logprobs.shape[0]
    if k <= 0:
        return np.zeros((rows, 0), np.int64), np.zeros((rows, 0), np.float32)
    # A stable sort on the negated values keeps the lower id first among equals, as argmax does.
    order = np.argsort(-logprobs, axis=-1, kind="stable")[:, :k]
    return order.astype(np.int64), np.take_along_axis(logprobs, order, axis=-1)


def log_softmax(logits: NDArray[np.floating[Any]]) -> NDArray[np.float32]:
    """Row-wise log-softmax in float32 of [rows, vocab] logits of any float dtype."""
    values = np.asarray(logits, dtype=np.float32)
    shifted = values - values.max(axis=-1, keepdims=True)
    out: NDArray[np.float32] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


class GreedyLoop:
    """Bookkeeping of a greedy decode, fed one next-token logprob row per step."""

    def __init__(self, max_tokens: int, top_k: int, eos_token_id: int | None) -> None:
        self._max_tokens = max_tokens
        self._top_k = top_k
        self._eos = eos_token_id
        self._tokens: list[int] = []
        self._chosen: list[float] = []
        self._top_ids: list[NDArray[np.int64]] = []
        self._top_lps: list[NDArray[np.float32]] = []
        self._scale: list[float] = []
        self._finish = "length"

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def push(
        self,
        row: NDArray[np.float32],
        *,
        ignore_eos: bool,
        logits: NDArray[np.floating[Any]] | None = None,
    ) -> bool:
        """Take the argmax of `row` (logprobs); True while decoding should go on.

        `logits`, the raw row before the softmax, records the chosen token's magnitude.
        """
        token = int(np.argmax(row))
        self._tokens.append(token)
        self._chosen.append(float(row[token]))
        if logits is not None:
            self._scale.append(abs(float(logits[token])))
        ids, lps = top_k_rows(row[None, :], self._top_k)
        self._top_ids.append(ids[0])
        self._top_lps.append(lps[0])
        if not ignore_eos and self._eos is not None and token == self._eos:
            self._finish = "stop"
            return False
        return len(self._tokens) < self._max_tokens

    def result(self) -> GreedyOutput:
        k = self._top_k
        steps = len(self._tokens)
        return GreedyOutput(
            token_ids=list(self._tokens),
            chosen_logprobs=list(self._chosen),
            top_ids=np.stack(self._top_ids) if steps else np.zeros((0, k), np.int64),
            top_logprobs=np.stack(self._top_lps) if steps else np.zeros((0, k), np.float32),
            finish_reason=self._finish,
            logit_scale=list(self._scale) if len(self._scale) == steps and steps else None,
        )
