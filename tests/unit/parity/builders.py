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


SIDE_FINGERPRINTS = {"weights.digest": "0123456789abcdef", "tokenizer.digest": "fedcba9876543210"}
"""The fingerprints a side reports of itself in these tests: the same on every side."""


def meta(**overrides: Any) -> RecordMeta:
    fields: dict[str, Any] = {
        "engine": "vllm",
        "engine_version": "0.32.0",
        "dtype": "bfloat16",
        "config_hash": "rev-a",
        "model": "tiny-qwen",
        "suite": "smoke",
        "effective_config": {"rms_norm_eps": 1e-6, "rope_theta": 1e6, "dtype": "bfloat16"},
        # What a side reports of itself (a check requires it, spec.fingerprints: Required).
        "fingerprints": dict(SIDE_FINGERPRINTS),
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


# -- scored suites: both sides teacher-forced along the baseline's sequence --------------------

RUN = {
    "suite.digest": "suite-0",
    "sampling.max_tokens": 24,
    "sampling.temperature": 0.0,
    "sampling.top_logprobs": 5,
    "sampling.seed": 42,
}
"""Run fingerprints both sides of a scored check share (what makes checks comparable)."""


def scores_along(p: PromptRecord, shift: float = 0.0, start: int = 1) -> TeacherForced:
    """A side's scores of p's sequence from `start`, each reference token first at 0.9.

    `shift` is added to every score of the reference token (top-1 and target): a
    constant logprob shift.
    """
    sequence = np.concatenate([p.prompt_token_ids, p.output_token_ids])[start:]
    top = top_k_for(sequence)
    lps = top.logprobs.copy()
    lps[:, 0] += shift
    return TeacherForced(
        token_ids=sequence,
        target_logprobs=lps[:, 0].copy(),
        top=TopLogprobs(top.token_ids, lps),
        start=start,
    )


def scored(p: PromptRecord) -> PromptRecord:
    """The baseline's record of p, scored along its own sequence from position 1."""
    return replace(p, teacher_forced=scores_along(p))


def candidate_of(p: PromptRecord, shift: float = 0.0) -> PromptRecord:
    """The candidate's record of p: same outputs, scored along p's sequence, shifted."""
    return replace(p, teacher_forced=scores_along(p, shift=shift))


def long_prompt(prompt_id: str, tokens: int = 8300, seed: int = 0) -> PromptRecord:
    """A long prompt (8K+ by default) with hidden states over its whole sequence."""
    return prompt(prompt_id, prompt_tokens=tokens, output_tokens=8, hidden=8, seed=seed)


def scored_suite(
    n: int = 32, long: int = 4, prompt_tokens: int = 120, output_tokens: int = 24
) -> list[PromptRecord]:
    """n short prompts and `long` long ones, scored from position 1 (meets bf16 evidence)."""
    short = [
        scored(prompt(f"p{i}", prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=i))
        for i in range(n)
    ]
    return short + [scored(long_prompt(f"long{i}", seed=100 + i)) for i in range(long)]


def scored_record(prompts: Sequence[PromptRecord], **meta_overrides: Any) -> ParityRecord:
    fingerprints = {**SIDE_FINGERPRINTS, **RUN}
    fingerprints.update(meta_overrides.pop("fingerprints", {}))
    return ParityRecord(meta(fingerprints=fingerprints, **meta_overrides), prompts)
