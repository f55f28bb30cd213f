"""Synthetic records with known properties, for the parity tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.parity.record import (
    ParityRecord,
    PromptRecord,
    RecordMeta,
    TeacherForced,
    TopLogprobs,
)

VOCAB = 1000
TOP_K = 5


def meta(**overrides: Any) -> RecordMeta:
    fields: dict[str, Any] = {
        "engine": "vllm",
        "engine_version": "0.32.0",
        "dtype": "bfloat16",
        "config_hash": "rev-a",
        "model": "tiny-qwen",
        "suite": "smoke",
        "effective_config": {"rms_norm_eps": 1e-6, "rope_theta": 1e6, "dtype": "bfloat16"},
    }
    fields.update(overrides)
    return RecordMeta(**fields)


TOP_PROBS = (0.9, 0.05, 0.02, 0.01, 0.005)
"""A confident next-token distribution: 1.5% of the mass left in the tail."""
NEAR_TIE = (0.46, 0.44, 0.05, 0.02, 0.01)
"""A near tie at a fork: the two best tokens 0.044 nat apart."""


def top_k_for(output: NDArray[np.int64]) -> TopLogprobs:
    """Top-k rows where each output token is first with probability 0.9."""
    logprobs = np.log(TOP_PROBS)
    rows = [
        [((token + j) % VOCAB, float(logprobs[j])) for j in range(TOP_K)]
        for token in output.tolist()
    ]
    return TopLogprobs.from_pairs(rows)


def prompt(
    prompt_id: str,
    *,
    prompt_tokens: int = 12,
    output_tokens: int = 24,
    hidden: int | None = 16,
    seed: int = 0,
) -> PromptRecord:
    rng = np.random.default_rng(seed)
    output = rng.integers(0, VOCAB, output_tokens)
    # No accidental collapse: consecutive tokens differ.
    output[1:] = np.where(output[1:] == output[:-1], (output[1:] + 1) % VOCAB, output[1:])
    states = None
    if hidden is not None:
        states = rng.standard_normal((prompt_tokens, hidden)).astype(np.float32) + 0.5
    return PromptRecord(
        prompt_id=prompt_id,
        prompt_token_ids=rng.integers(0, VOCAB, prompt_tokens),
        output_token_ids=output,
        top_logprobs=top_k_for(output),
        hidden_states=states,
        output_text=f"text of {prompt_id}",
    )


def suite(n: int = 6, **kwargs: Any) -> list[PromptRecord]:
    return [prompt(f"p{i}", seed=i, **kwargs) for i in range(n)]


def record(prompts: Sequence[PromptRecord], **meta_overrides: Any) -> ParityRecord:
    return ParityRecord(meta(**meta_overrides), prompts)


def replace(p: PromptRecord, **changes: Any) -> PromptRecord:
    fields = {
        "prompt_id": p.prompt_id,
        "prompt_token_ids": p.prompt_token_ids,
        "output_token_ids": p.output_token_ids,
        "top_logprobs": p.top_logprobs,
        "teacher_forced": p.teacher_forced,
        "hidden_states": p.hidden_states,
        "output_text": p.output_text,
        "tags": p.tags,
    }
    fields.update(changes)
    return PromptRecord(**fields)


def fork_pair(
    p: PromptRecord, at: int, legitimate: bool = True
) -> tuple[PromptRecord, PromptRecord]:
    """(baseline, candidate) of one prompt whose greedy outputs fork at output index `at`.

    A legitimate fork is a near tie that flips: the baseline prefers its token to the
    runner-up by 0.044 nat and the candidate the other way round. An illegitimate fork
    picks a token outside the baseline's top-k.
    """
    tie = np.log(NEAR_TIE)
    base_top = top_k_for(p.output_token_ids)
    base_lps = base_top.logprobs.copy()
    base_lps[at] = tie
    baseline = replace(p, top_logprobs=TopLogprobs(base_top.token_ids, base_lps))
    output = p.output_token_ids.copy()
    runner_up = int(base_top.token_ids[at, 1])
    output[at] = runner_up if legitimate else (runner_up + 500) % VOCAB
    output[at + 1 :] = (output[at + 1 :] + 7) % VOCAB
    top = top_k_for(output)
    ids, lps = top.token_ids.copy(), top.logprobs.copy()
    ids[at, 1] = int(p.output_token_ids[at])
    lps[at] = tie
    candidate = replace(p, output_token_ids=output, top_logprobs=TopLogprobs(ids, lps))
    return baseline, candidate


def teacher_forced_on(baseline: PromptRecord, shift: float = 0.0) -> TeacherForced:
    """The candidate scored on the baseline's tokens, its logprobs moved by `shift` on top-1."""
    top = baseline.top_logprobs
    lps = top.logprobs.copy()
    lps[:, 0] += shift
    return TeacherForced(
        token_ids=baseline.output_token_ids,
        target_logprobs=lps[:, 0],
        top=TopLogprobs(top.token_ids, lps),
    )
