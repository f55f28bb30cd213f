"""The long-prompt same-top rule passes a benign change at the evidence minimum and fails
a harmful one: 4 long prompts of 8.6K tokens (1,024 positions at 0-1K, 4,096 at 4-8K and
450 at 8K+), same-top rate 0.985 at 0-1K."""

from __future__ import annotations

import numpy as np
import pytest

from infergate.parity.logprob_suite import PromptLogprobs
from infergate.parity.long_prompts import long_estimates, long_metrics, long_prompt
from infergate.parity.metrics import PromptSummary
from infergate.parity.profiles import PROFILES
from infergate.parity.prompt_bounds import per_prompt_bounds
from infergate.parity.thresholds import ProfileName

LIMIT = PROFILES[ProfileName.DTYPE_CHANGE].block.max_long_same_top_drop
NEAR, MIDDLE, FAR = 1024, 4096, 450
NEAR_HITS = 1009  # 0.9854
MIDDLE_HITS = 4036  # 0.9854: no change at 4-8K
BENIGN_FAR_HITS = (449, 446, 441, 439)
"""8K+ rates whose drops from 0-1K are -0.0124, -0.0058, +0.0054, +0.0098: mean -0.0008,
spread 0.0102, as the float16-against-float32 long prompts' (-0.0008, spread 0.0099)."""


def _long(pid: str, middle_hits: int, far_hits: int) -> PromptSummary:
    return PromptSummary(
        prompt_id=pid, prompt_tokens=8666, baseline_output_tokens=8, candidate_output_tokens=8,
        first_divergence=None, legitimate=None, legitimacy_note="", logprob_gap=None,
        kl_steps=NEAR + MIDDLE + FAR, mean_kl=1e-6, same_top_rate=None, hidden_tokens=0,
        hidden_max_abs_err=None, hidden_rel_l2_p99=None, hidden_cosine_p1=None,
        hidden_cosine_min=None, target_logprob_delta=None, norm_abs_log_ratio=None,
        fork_explained=None,
    )  # fmt: skip


def _folded(middle_hits: int, far_hits: int) -> PromptLogprobs:
    totals = np.asarray([NEAR, 0, MIDDLE, FAR], np.int64)
    return PromptLogprobs(
        kl_steps=int(totals.sum()), mean_kl=1e-6, same_top_rate=None, target_logprob_delta=None,
        bucket_kl=totals * 1e-6, bucket_kl_steps=totals,
        bucket_same=np.asarray([NEAR_HITS, 0, middle_hits, far_hits], np.int64),
        bucket_same_total=totals,
    )  # fmt: skip


def _drop(middle: list[int], far: list[int]) -> tuple[float, float, float]:
    thresholds = PROFILES[ProfileName.DTYPE_CHANGE].block
    long = [
        long_prompt(_long(f"long-{i}", m, f), _folded(m, f), None, thresholds)
        for i, (m, f) in enumerate(zip(middle, far, strict=True))
    ]
    found = long_estimates(long_metrics(long, 8192), 0.95, hidden_compared=False)
    estimate = found["longSameTopDrop"]
    assert estimate.value is not None
    assert estimate.lower is not None
    assert estimate.upper is not None
    return (estimate.value, estimate.lower, estimate.upper)


def test_a_benign_change_passes_at_four_long_prompts() -> None:
    # The 8K+ drops alone, one number per long prompt, cannot decide it (3 df).
    drops = [NEAR_HITS / NEAR - f / FAR for f in BENIGN_FAR_HITS]
    paired = per_prompt_bounds(drops, 0.95)
    assert paired.value == pytest.approx(-0.0008, abs=1e-4)
    assert paired.upper is not None
    assert paired.upper > LIMIT
    value, _, upper = _drop([MIDDLE_HITS] * 4, list(BENIGN_FAR_HITS))
    assert abs(value) < 1e-3
    assert upper <= LIMIT  # Passed


def test_a_three_point_drop_on_the_long_prompts_fails() -> None:
    rate = NEAR_HITS / NEAR - 0.03
    middle, far = round(MIDDLE * rate), round(FAR * rate)
    value, lower, _ = _drop([middle] * 4, [far] * 4)
    assert value == pytest.approx(0.03, abs=1e-3)
    assert lower > LIMIT  # Failed
