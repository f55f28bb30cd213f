"""What one side of a parity check produced for a suite, in memory.

A `ParityRecord` on disk (see `infergate.recordio`) is a `RecordMeta` plus one
`PromptRecord` per prompt. Dense things are numpy arrays:

- token ids are int64 vectors;
- top-k logprobs are two [steps, k] arrays (ids and logprobs), each row sorted by
  logprob, best first; rows with fewer than k candidates are padded with id -1 and
  logprob -inf;
- hidden states are float32 [tokens, hidden]: row i is the last-layer hidden state at
  sequence position i (position 0 is the first prompt token).

Teacher forcing: a side scored along the reference sequence (the baseline's prompt ids
plus its output). At position i it sees the reference tokens before i and reports its
logprob of the reference token at i and its own top-k there. The candidate scored this
way gives both distributions over the same context at every position, so KL is defined
after a fork too; the baseline scored on its own sequence gives its side through the
same prefill kernels (not the decode kernels of generation). Scoring may start inside
the prompt (`start`, a sequence position): a long prompt's own positions then measure
every position bucket on the same text.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field, field_validator

from infergate.parity.wire import WIRE_CONFIG

PAD_TOKEN_ID = -1
"""Token id that pads a top-k row holding fewer than k candidates."""


class ParityInputError(ValueError):
    """Two records cannot be compared as given (the check could not measure)."""


class RecordMeta(BaseModel):
    """Who produced a record, with what numerics, on which suite."""

    model_config = WIRE_CONFIG

    engine: str = Field(description="Engine kind, e.g. vllm, mindformers, transformers.")
    engine_version: str = Field(description="Engine version string as the engine reports it.")
    dtype: str = Field(description="Compute dtype: float32, float16 or bfloat16.")
    config_hash: str = Field(description="Revision hash of the engine configuration.")
    model: str = Field(description="Served model name.")
    suite: str = Field(description="Name of the prompt suite both sides ran.")
    effective_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The numeric configuration pinned for the engine (JSON values); keys on "
        "one side only are noted, shared keys must agree.",
    )
    fingerprints: dict[str, Any] = Field(
        default_factory=dict,
        description="What this side actually ran, by dotted key (see parity.fingerprints): "
        "tokenizer.*, chat_template.*, generation_config.*, weights.*, model_config.*, "
        "versions.*, sampling.*, suite.*. Compared key by key: a difference the profile does "
        "not expect, or a key on one side only, fails.",
    )
    created: datetime = Field(
        default_factory=lambda: datetime.now(UTC), description="When the record was made (UTC)."
    )

    @field_validator("created")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError(f"created: {value.isoformat()} has no time zone; give UTC")
        return value


def _int_vector(name: str, value: Any) -> NDArray[np.int64]:
    array = np.asarray(value, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {array.shape}")
    return array


@dataclass(frozen=True, eq=False)
class TopLogprobs:
    """Top-k candidates at each generated step: ids and logprobs, each [steps, k]."""

    token_ids: NDArray[np.int64]
    logprobs: NDArray[np.float64]

    def __post_init__(self) -> None:
        ids = np.asarray(self.token_ids, dtype=np.int64)
        logprobs = np.asarray(self.logprobs, dtype=np.float64)
        if ids.ndim == 1 and ids.size == 0:
            ids = ids.reshape(0, 0)
        if logprobs.ndim == 1 and logprobs.size == 0:
            logprobs = logprobs.reshape(0, 0)
        if ids.ndim != 2 or ids.shape != logprobs.shape:
            raise ValueError(
                f"top_logprobs: token_ids {ids.shape} and logprobs {logprobs.shape} must both "
                "be [steps, k]"
            )
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "logprobs", logprobs)

    @property
    def steps(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def k(self) -> int:
        return int(self.token_ids.shape[1])

    @classmethod
    def empty(cls, steps: int = 0) -> TopLogprobs:
        """No logprobs recorded (k = 0) for `steps` steps."""
        return cls(np.zeros((steps, 0), np.int64), np.zeros((steps, 0), np.float64))

    @classmethod
    def from_pairs(
        cls, steps: Sequence[Sequence[tuple[int, float]]], k: int | None = None
    ) -> TopLogprobs:
        """From per-step lists of (token_id, logprob), as engines return them in JSON."""
        width = k if k is not None else max((len(step) for step in steps), default=0)
        ids = np.full((len(steps), width), PAD_TOKEN_ID, np.int64)
        logprobs = np.full((len(steps), width), -math.inf, np.float64)
        for row, step in enumerate(steps):
            ranked = sorted(step, key=lambda pair: pair[1], reverse=True)[:width]
            for col, (token_id, logprob) in enumerate(ranked):
                ids[row, col] = token_id
                logprobs[row, col] = logprob
        return cls(ids, logprobs)

    def to_pairs(self) -> list[list[tuple[int, float]]]:
        """Per-step lists of (token_id, logprob), padding left out."""
        return [
            [(int(i), float(lp)) for i, lp in zip(ids, lps, strict=True) if i != PAD_TOKEN_ID]
            for ids, lps in zip(self.token_ids, self.logprobs, strict=True)
        ]


@dataclass(frozen=True, eq=False)
class TeacherForced:
    """This side scored along the reference sequence, position by position.

    `token_ids[t]` is the reference token at sequence position `start + t`,
    `target_logprobs[t]` this side's logprob of it given the reference before it, `top`
    this side's own top-k there. `start` None means the first generated position (the
    prompt's length), as records without prompt scoring have it. `full_logprobs`, when
    the engine gave them, are this side's whole next-token distributions (float32
    [m, vocab]) at the last m scored positions, for KL over the full vocabulary.
    """

    token_ids: NDArray[np.int64]
    target_logprobs: NDArray[np.float64]
    top: TopLogprobs
    start: int | None = None
    full_logprobs: NDArray[np.float32] | None = None

    def __post_init__(self) -> None:
        ids = _int_vector("teacher_forced.token_ids", self.token_ids)
        target = np.asarray(self.target_logprobs, dtype=np.float64)
        if target.shape != ids.shape or self.top.steps != ids.shape[0]:
            raise ValueError(
                f"teacher_forced: token_ids {ids.shape}, target_logprobs {target.shape} and "
                f"top ({self.top.steps} steps) must cover the same steps"
            )
        if self.start is not None and self.start < 1:
            raise ValueError(
                f"teacher_forced.start: {self.start}; position 0 has no context to score"
            )
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "target_logprobs", target)
        if self.full_logprobs is not None:
            full = np.asarray(self.full_logprobs, dtype=np.float32)
            if full.ndim != 2 or full.shape[0] > ids.shape[0]:
                raise ValueError(
                    f"teacher_forced.full_logprobs: shape {full.shape} must be [m, vocab] "
                    f"with m <= {ids.shape[0]} scored positions"
                )
            object.__setattr__(self, "full_logprobs", full)

    def first_position(self, prompt_tokens: int) -> int:
        """Sequence position of `token_ids[0]` for a prompt of `prompt_tokens` tokens."""
        return prompt_tokens if self.start is None else self.start


@dataclass(frozen=True, eq=False)
class PromptRecord:
    """What one side produced for one prompt of the suite."""

    prompt_id: str
    prompt_token_ids: NDArray[np.int64]
    output_token_ids: NDArray[np.int64]
    top_logprobs: TopLogprobs = field(default_factory=TopLogprobs.empty)
    teacher_forced: TeacherForced | None = None
    hidden_states: NDArray[np.float32] | None = None
    output_text: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    logit_scale: NDArray[np.float64] | None = None
    """Magnitude of the chosen token's raw logit at each generated step, where the engine
    reports it (our adapters do): the fork tau scales the dtype's rounding step by it."""

    def __post_init__(self) -> None:
        if not self.prompt_id:
            raise ValueError("prompt_id: must be a non-empty string")
        prompt = _int_vector("prompt_token_ids", self.prompt_token_ids)
        output = _int_vector("output_token_ids", self.output_token_ids)
        object.__setattr__(self, "prompt_token_ids", prompt)
        object.__setattr__(self, "output_token_ids", output)
        top = self.top_logprobs
        if top.k == 0 and top.steps != output.shape[0]:
            top = TopLogprobs.empty(output.shape[0])
            object.__setattr__(self, "top_logprobs", top)
        if top.steps != output.shape[0]:
            raise ValueError(
                f"prompt {self.prompt_id!r}: top_logprobs has {top.steps} steps, output_token_ids "
                f"has {output.shape[0]} tokens; they must be equal"
            )
        if self.hidden_states is not None:
            hidden = np.asarray(self.hidden_states)
            if hidden.ndim != 2 or not np.issubdtype(hidden.dtype, np.floating):
                raise ValueError(
                    f"prompt {self.prompt_id!r}: hidden_states must be a floating [tokens, "
                    f"hidden] array, got {hidden.dtype} of shape {hidden.shape}"
                )
            object.__setattr__(self, "hidden_states", hidden.astype(np.float32, copy=False))
        if self.logit_scale is not None:
            scale = np.asarray(self.logit_scale, dtype=np.float64)
            if scale.shape != output.shape:
                raise ValueError(
                    f"prompt {self.prompt_id!r}: logit_scale has shape {scale.shape}, "
                    f"output_token_ids {output.shape}; they must be equal"
                )
            object.__setattr__(self, "logit_scale", scale)
        object.__setattr__(self, "tags", dict(self.tags))


class ParityRecord:
    """A whole record in memory (small suites, tests); on disk see `infergate.recordio`.

    Offers the same reading interface as `RecordReader`: `meta`, `prompt_ids`, `get`,
    and iteration in suite order.
    """

    def __init__(self, meta: RecordMeta, prompts: Sequence[PromptRecord]) -> None:
        self.meta = meta
        self._prompts: dict[str, PromptRecord] = {}
        for prompt in prompts:
            if prompt.prompt_id in self._prompts:
                raise ValueError(f"prompt_id: {prompt.prompt_id!r} appears twice; ids are unique")
            self._prompts[prompt.prompt_id] = prompt

    @property
    def prompt_ids(self) -> list[str]:
        return list(self._prompts)

    def __len__(self) -> int:
        return len(self._prompts)

    def __iter__(self) -> Iterator[PromptRecord]:
        return iter(self._prompts.values())

    def get(self, prompt_id: str) -> PromptRecord:
        try:
            return self._prompts[prompt_id]
        except KeyError:
            raise KeyError(f"no prompt {prompt_id!r} in this record") from None
