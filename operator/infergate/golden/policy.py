"""How much of the hidden states a golden record keeps: the size policy and its budget.

Pure. Hidden states dominate a record's size (8K positions x 3584 x float32 is 117 MB
per prompt at Qwen2.5-7B's shape), so the user chooses per suite:

- `none`: tokens, top-k logprobs and teacher-forced scores only;
- `summary`: plus, per position, the hidden vector's L2 norm and a fixed random
  projection of it (`infergate.golden.summary`): relative L2 error, cosine and norm
  ratio against a later run stay measurable at a fraction of the size;
- `full`: plus the full hidden states, as the record format keeps them.

`maxBytes` bounds one side's record of one suite. Prompts are stored in suite order;
a prompt whose hidden states in the chosen form no longer fit falls back to the next
smaller form (full, then summary, then none), so the budget is never exceeded and the
entry says which prompts kept what. A record whose tokens and logprobs alone do not
fit is refused (`GoldenBudgetError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from infergate.golden.errors import GoldenBudgetError, GoldenConfigError
from infergate.golden.settings import (
    MIN_BYTES,
    SKETCH_DIMS_DEFAULT,
    SKETCH_DIMS_MAX,
    SKETCH_DIMS_MIN,
    HiddenStatesPolicy,
)
from infergate.parity.record import PromptRecord

FILE_OVERHEAD: Final = 4096
"""Bytes allowed per stored file for its safetensors header and metadata (prompt text and
tags live in the header); measured headers of the fixture's records are under 2 KiB."""

_SMALLER: Final = {
    HiddenStatesPolicy.FULL: HiddenStatesPolicy.SUMMARY,
    HiddenStatesPolicy.SUMMARY: HiddenStatesPolicy.NONE,
}


@dataclass(frozen=True)
class StoragePolicy:
    """The user's size policy for one side's record of one suite."""

    hidden_states: HiddenStatesPolicy = HiddenStatesPolicy.SUMMARY
    max_bytes: int = 100 * 2**20
    sketch_dims: int = SKETCH_DIMS_DEFAULT

    def __post_init__(self) -> None:
        if self.max_bytes < MIN_BYTES:
            raise GoldenConfigError(
                f"maxBytes: {self.max_bytes} is too small; give at least {MIN_BYTES} (1Mi)"
            )
        if not SKETCH_DIMS_MIN <= self.sketch_dims <= SKETCH_DIMS_MAX:
            raise GoldenConfigError(
                f"sketchDimensions: {self.sketch_dims} is not allowed; give "
                f"{SKETCH_DIMS_MIN}..{SKETCH_DIMS_MAX}"
            )


def base_bytes(prompt: PromptRecord) -> int:
    """Data bytes of a prompt's record without hidden states (tokens, logprobs, scores)."""
    total = 8 * (prompt.prompt_token_ids.size + prompt.output_token_ids.size)
    total += 16 * prompt.top_logprobs.token_ids.size
    forced = prompt.teacher_forced
    if forced is not None:
        total += 16 * forced.token_ids.size + 16 * forced.top.token_ids.size
    return total + FILE_OVERHEAD


def hidden_bytes(form: HiddenStatesPolicy, positions: int, hidden_size: int, dims: int) -> int:
    """Bytes that `positions` hidden vectors take in `form` (float32, one file each)."""
    if form is HiddenStatesPolicy.FULL:
        return 4 * positions * hidden_size
    if form is HiddenStatesPolicy.SUMMARY:
        return 4 * positions * (dims + 1) + FILE_OVERHEAD
    return 0


def choose_hidden_form(
    policy: StoragePolicy,
    remaining: int,
    prompt_base: int,
    positions: int,
    hidden_size: int,
) -> HiddenStatesPolicy:
    """The largest form, at most the policy's, in which this prompt still fits the budget.

    `remaining` is the budget left before this prompt; raises `GoldenBudgetError` when
    even the prompt's tokens and logprobs do not fit.
    """
    if prompt_base > remaining:
        raise GoldenBudgetError(
            f"maxBytes {policy.max_bytes}: the record's tokens and logprobs alone need more "
            f"({prompt_base} bytes for this prompt, {remaining} left); raise maxBytes or "
            "shorten the suite"
        )
    form = policy.hidden_states if positions > 0 else HiddenStatesPolicy.NONE
    while form is not HiddenStatesPolicy.NONE:
        need = prompt_base + hidden_bytes(form, positions, hidden_size, policy.sketch_dims)
        if need <= remaining:
            return form
        form = _SMALLER[form]
    return form


def own_sequence_rows(own: Sequence[int], probed: Sequence[int], rows: int) -> int:
    """How many leading hidden-state rows lie on a side's own sequence.

    A candidate's hidden states are taken on the baseline's sequence (prompt plus the
    baseline's output). As a golden record of the candidate's own revision only the rows
    before the two sequences fork describe it; the rest are cut.
    """
    shared = 0
    for mine, theirs in zip(own, probed, strict=False):
        if mine != theirs:
            break
        shared += 1
    return min(shared, rows)


def propose_policy(
    prompts: Sequence[tuple[int, int]], hidden_size: int, max_bytes: int
) -> StoragePolicy:
    """The richest policy under which a whole suite fits `max_bytes` per side.

    `prompts`: (base bytes, hidden positions) per prompt, e.g. from `base_bytes` and the
    prompt's token count. Full if everything fits; else summaries with the most
    projection dims (a power of two, 8..1024) that fit; else none. Raises
    `GoldenBudgetError` when not even the tokens and logprobs fit.
    """
    overhead = FILE_OVERHEAD * 2 + 512 * len(prompts)
    base = sum(b for b, _ in prompts) + overhead
    positions = sum(p for _, p in prompts)
    if base > max_bytes:
        raise GoldenBudgetError(
            f"maxBytes {max_bytes}: the suite's tokens and logprobs alone take {base} bytes"
        )
    if base + 4 * positions * hidden_size <= max_bytes:
        return StoragePolicy(HiddenStatesPolicy.FULL, max_bytes)
    dims = SKETCH_DIMS_MAX
    while dims >= SKETCH_DIMS_MIN:
        need = base + sum(
            hidden_bytes(HiddenStatesPolicy.SUMMARY, p, hidden_size, dims) for _, p in prompts
        )
        if need <= max_bytes:
            return StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes, sketch_dims=dims)
        dims //= 2
    return StoragePolicy(HiddenStatesPolicy.NONE, max_bytes)
