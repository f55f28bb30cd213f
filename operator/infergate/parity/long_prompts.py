"""Long prompts, each judged on its own positions: its farthest bucket against its 0-1K one.

A rope or long-context error grows with position, so a long prompt (of
`long_prompt_tokens`+ tokens) is compared with itself: its KL, same-top rate and hidden
relative L2 at its farthest position bucket against its first (0-1K). Each long prompt
gets its ratios and its own failures (`long_prompt`); the suite gets the share of long
prompts failing and paired per-prompt bounds on the ratios (`long_estimates`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from infergate.parity.hidden import PromptHidden
from infergate.parity.logprob_suite import PromptLogprobs
from infergate.parity.metrics import Estimate, LongPrompt, LongSequenceMetrics, PromptSummary, Rate
from infergate.parity.stats import per_prompt_bounds
from infergate.parity.thresholds import Thresholds

DEFAULT_LONG_PROMPT_TOKENS = 8192
KL_RATIO_FLOOR = 1e-9
"""Nats added to both buckets' mean KL before the long/short ratio, so 0/0 reads as 1."""
HIDDEN_RATIO_FLOOR = 1e-9
"""Relative L2 added to both buckets' mean before the long/short hidden ratio."""
_SHORT = 0
"""Index of the 0-1K bucket in POSITION_BUCKETS."""


def ratio_floor(allowance: float | None, limit: float | None, minimum: float) -> float:
    """What both buckets get before a far / near ratio: allowance / (limit - 1).

    With that floor f, (far + f) / (near + f) > limit exactly when
    far > limit * near + allowance: a long prompt degrades when its far positions grow past
    `limit` times its near ones by more than the profile allows at any position
    (`allowance`: maxMeanKl for KL, maxHiddenRelL2P99 for hidden states). Growth that stays
    inside the allowance is not a long-context signal: on the trained fixture every change,
    benign ones included, grows a prompt's own KL 1.2-3.7x from 0-1K to 8K+ (bf16 vs fp32
    3.1x, AVX2 kernels 2.7x at KLs of 1e-6..8e-5; experiments/GATE_BENCH.md, "Long
    prompts"), while a rope error grows it by orders of magnitude; at Qwen2.5-7B shape bf16
    noise is flat with position (experiments/RESULTS.md). Two runs of one bf16 config on
    CPU gave 8K+ / 0-1K KLs of ~2e-7 / ~1e-9 nats (a bare ratio of 179: prefill and decode
    take different kernels), which this floor also keeps out.
    """
    if allowance is None or limit is None or limit <= 1.0:
        return minimum
    return max(minimum, allowance / (limit - 1.0))


def _kl_ratio_floor(thresholds: Thresholds) -> float:
    return ratio_floor(
        thresholds.max_mean_kl, thresholds.max_long_to_short_kl_ratio, KL_RATIO_FLOOR
    )


def _hidden_ratio_floor(thresholds: Thresholds) -> float:
    return ratio_floor(
        thresholds.max_hidden_rel_l2_p99,
        thresholds.max_long_to_short_hidden_ratio,
        HIDDEN_RATIO_FLOOR,
    )


def long_prompt(
    summary: PromptSummary,
    folded: PromptLogprobs | None,
    hidden: PromptHidden | None,
    thresholds: Thresholds,
) -> LongPrompt:
    """A long prompt's own positions: its farthest bucket against its 0-1K bucket."""
    short_kl = far_kl = short_same = far_same = short_rel = far_rel = None
    ratio = hidden_ratio = None
    if folded is not None:
        far = _farthest(folded.bucket_kl_steps)
        if far is not None:
            short_kl = float(folded.bucket_kl[_SHORT] / folded.bucket_kl_steps[_SHORT])
            far_kl = float(folded.bucket_kl[far] / folded.bucket_kl_steps[far])
            floor = _kl_ratio_floor(thresholds)
            ratio = (far_kl + floor) / (short_kl + floor)
        far = _farthest(folded.bucket_same_total)
        if far is not None:
            short_same = float(folded.bucket_same[_SHORT] / folded.bucket_same_total[_SHORT])
            far_same = float(folded.bucket_same[far] / folded.bucket_same_total[far])
    if hidden is not None and hidden.bucket_tokens.size:
        far = _farthest(hidden.bucket_tokens)
        if far is not None:
            short_rel = float(hidden.bucket_rel_l2[_SHORT] / hidden.bucket_tokens[_SHORT])
            far_rel = float(hidden.bucket_rel_l2[far] / hidden.bucket_tokens[far])
            floor = _hidden_ratio_floor(thresholds)
            hidden_ratio = (far_rel + floor) / (short_rel + floor)
    return LongPrompt(
        prompt_id=summary.prompt_id,
        tokens=summary.prompt_tokens,
        short_kl=short_kl,
        far_kl=far_kl,
        kl_ratio=ratio,
        short_same_top=short_same,
        far_same_top=far_same,
        short_rel_l2=short_rel,
        far_rel_l2=far_rel,
        hidden_ratio=hidden_ratio,
        failures=_long_failures(summary, thresholds),
    )


def _long_failures(summary: PromptSummary, t: Thresholds) -> list[str]:
    """Why a long prompt fails on its own: an unexplained early fork or its own metrics."""
    failures = []
    fork = summary.first_divergence
    early = t.min_first_divergence_p10
    if fork is not None and summary.fork_explained is False and (early is None or fork < early):
        failures.append(f"unexplained fork at output token {fork} ({summary.legitimacy_note})")
    if t.max_mean_kl is not None and (summary.mean_kl or 0.0) > t.max_mean_kl:
        failures.append(f"mean KL {summary.mean_kl:.3g} > {t.max_mean_kl:.3g}")
    rel = summary.hidden_rel_l2_p99
    if t.max_hidden_rel_l2_p99 is not None and rel is not None and rel > t.max_hidden_rel_l2_p99:
        failures.append(f"hidden relL2 P99 {rel:.3g} > {t.max_hidden_rel_l2_p99:.3g}")
    cos = summary.hidden_cosine_p1
    if t.min_hidden_cosine_p1 is not None and cos is not None and cos < t.min_hidden_cosine_p1:
        failures.append(f"hidden cosine P1 {cos:.6g} < {t.min_hidden_cosine_p1:.6g}")
    return failures


def _farthest(counts: NDArray[np.int64]) -> int | None:
    """The last non-empty bucket past 0-1K, when 0-1K itself has data; else None."""
    if counts.size == 0 or counts[_SHORT] == 0:
        return None
    filled = np.flatnonzero(counts[1:] > 0)
    return None if filled.size == 0 else int(filled[-1]) + 1


def long_metrics(long: Sequence[LongPrompt], min_prompt_tokens: int) -> LongSequenceMetrics:
    """The suite's long prompts: how many fail, and the geometric means of their ratios."""
    diverged = [p.prompt_id for p in long if p.failures]
    ratios = [math.log(p.kl_ratio) for p in long if p.kl_ratio is not None]
    drops = [
        p.short_same_top - p.far_same_top
        for p in long
        if p.short_same_top is not None and p.far_same_top is not None
    ]
    hidden = [math.log(p.hidden_ratio) for p in long if p.hidden_ratio is not None]
    return LongSequenceMetrics(
        min_prompt_tokens=min_prompt_tokens,
        prompts=len(long),
        divergence_rate=Rate.of(len(diverged), len(long)) if long else None,
        diverged_prompts=diverged,
        kl_ratio=math.exp(sum(ratios) / len(ratios)) if ratios else None,
        same_top_drop=sum(drops) / len(drops) if drops else None,
        hidden_ratio=math.exp(sum(hidden) / len(hidden)) if hidden else None,
        per_prompt=list(long),
    )


def long_estimates(
    metrics: LongSequenceMetrics, confidence: float, *, hidden_compared: bool
) -> dict[str, Estimate]:
    """What the long-prompt thresholds decide on; the hidden ratio only where hidden states
    were compared (`hidden_compared`) or some long prompt has one."""
    c = confidence
    long = metrics.per_prompt
    if not long:
        return {}
    out = {"longSeqDivergenceRate": Estimate.wilson(len(metrics.diverged_prompts), len(long), c,
                                                    "long prompts")}  # fmt: skip

    def paired(values: list[float], log: bool) -> Estimate:
        found = per_prompt_bounds(values, c)
        convert = math.exp if log else float
        return Estimate(
            value=None if found.value is None else convert(found.value),
            lower=None if found.lower is None else convert(found.lower),
            upper=None if found.upper is None else convert(found.upper),
            evidence=found.count, unit="long prompts", method="paired-t",
        )  # fmt: skip

    out["longToShortKlRatio"] = paired(
        [math.log(p.kl_ratio) for p in long if p.kl_ratio is not None], log=True
    )
    out["longSameTopDrop"] = paired(
        [
            p.short_same_top - p.far_same_top
            for p in long
            if p.short_same_top is not None and p.far_same_top is not None
        ],
        log=False,
    )
    hidden = [math.log(p.hidden_ratio) for p in long if p.hidden_ratio is not None]
    if hidden or hidden_compared:
        out["longToShortHiddenRatio"] = paired(hidden, log=True)
    return out
