"""The comparison holds one prompt pair at a time, whatever the suite size."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np

from infergate.parity.compare import compare_sources
from infergate.parity.control import LADDER
from infergate.parity.profiles import resolve_thresholds
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.parity.thresholds import ProfileName

from .builders import meta, top_k_for

TOKENS, HIDDEN = 1024, 256
PAIR_BYTES = 2 * TOKENS * HIDDEN * 4


class GeneratedRecord:
    """A record whose prompts are made on request and never kept (like a file reader)."""

    def __init__(self, prompts: int, drift: float) -> None:
        self.meta: RecordMeta = meta()
        self._ids = [f"p{i}" for i in range(prompts)]
        self._drift = drift

    @property
    def prompt_ids(self) -> list[str]:
        return list(self._ids)

    def get(self, prompt_id: str) -> PromptRecord:
        seed = int(prompt_id[1:])
        rng = np.random.default_rng(seed)
        hidden = rng.standard_normal((TOKENS, HIDDEN), dtype=np.float32)
        hidden *= np.float32(1 + self._drift)
        output = np.arange(16, dtype=np.int64) + seed
        return PromptRecord(
            prompt_id, np.arange(TOKENS), output, top_k_for(output), hidden_states=hidden
        )

    def __iter__(self) -> Iterator[PromptRecord]:
        for prompt_id in self._ids:
            yield self.get(prompt_id)


def _peak(prompts: int, *, control: bool = False) -> int:
    thresholds = resolve_thresholds(ProfileName.BF16_KERNEL)
    tracemalloc.start()
    try:
        result = compare_sources(
            GeneratedRecord(prompts, 0.0),
            GeneratedRecord(prompts, 1e-3),
            thresholds,
            control=control,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.metrics.hidden is not None
    assert result.metrics.hidden.tokens == prompts * TOKENS
    return peak


def test_peak_memory_stays_near_one_pair_as_the_suite_grows() -> None:
    small, large = _peak(2), _peak(24)
    assert large < 4 * PAIR_BYTES
    # Twelve times the prompts: only the per-token summaries (24 bytes a token) grow.
    assert large - small < 24 * 22 * TOKENS + PAIR_BYTES // 2


def test_the_positive_control_adds_per_token_summaries_only() -> None:
    # The control scores the baseline against len(LADDER) scaled copies of itself, one
    # prompt at a time: one more record in flight, and each copy's per-token summaries.
    small, large = _peak(2, control=True), _peak(24, control=True)
    assert small < 4 * PAIR_BYTES
    comparisons = 1 + len(LADDER)
    assert large - small < comparisons * 3 * 24 * 22 * TOKENS
