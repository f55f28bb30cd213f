"""The suite's logprob metrics: each prompt's steps folded into totals, then estimates.

`LogprobAccumulator.add` takes one prompt's per-position measures (`logprobs.StepLogprobs`)
and keeps only per-prompt sums, so a suite of any length costs a few numbers per prompt;
`finalize` gives `LogprobMetrics` and `estimates` the bounds each threshold decides on,
clustered by prompt (positions within a prompt are correlated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.parity.logprobs import StepLogprobs
from infergate.parity.metrics import (
    POSITION_BUCKETS,
    Estimate,
    LogprobMetrics,
    Mean,
    Rate,
    bucket_of,
)
from infergate.parity.prompt_bounds import (
    clustered_bounds,
    clustered_error,
    clustered_quantile_bounds,
    clustered_rate_bounds,
)

_BUCKETS = len(POSITION_BUCKETS)


@dataclass
class PromptLogprobs:
    """One prompt's folded measures (all its positions, and per position bucket)."""

    kl_steps: int
    mean_kl: float | None
    same_top_rate: float | None
    target_logprob_delta: float | None
    bucket_kl: NDArray[np.float64]
    bucket_kl_steps: NDArray[np.int64]
    bucket_same: NDArray[np.int64]
    bucket_same_total: NDArray[np.int64]


@dataclass
class LogprobAccumulator:
    """Folds per-prompt measures into suite totals, keeping per-prompt sums for the bounds."""

    kl_sums: list[float] = field(default_factory=list)
    kl_counts: list[int] = field(default_factory=list)
    kl_values: list[NDArray[np.float64]] = field(default_factory=list)
    same: list[int] = field(default_factory=list)
    same_totals: list[int] = field(default_factory=list)
    delta_sums: list[float] = field(default_factory=list)
    delta_counts: list[int] = field(default_factory=list)
    dp_sums: list[float] = field(default_factory=list)
    dp_squares: list[float] = field(default_factory=list)
    dp_counts: list[int] = field(default_factory=list)
    strata: list[str] = field(default_factory=list)
    """Each prompt's stratum (short, long, chat), in the order prompts were added."""
    dp_max_abs: float = 0.0
    covered_sum: float = 0.0
    covered_count: int = 0
    forced_prompts: int = 0
    generated_steps: int = 0
    prompt_steps: int = 0
    full_steps: int = 0
    bucket_kl: NDArray[np.float64] = field(default_factory=lambda: np.zeros(_BUCKETS))
    bucket_steps: NDArray[np.int64] = field(default_factory=lambda: np.zeros(_BUCKETS, np.int64))
    bucket_same: NDArray[np.int64] = field(default_factory=lambda: np.zeros(_BUCKETS, np.int64))
    bucket_same_total: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(_BUCKETS, np.int64)
    )

    def add(self, steps: StepLogprobs, stratum: str = "short") -> PromptLogprobs:
        """Fold one prompt in; returns its own figures (per bucket too)."""
        self.strata.append(stratum)
        kl_ok = ~np.isnan(steps.kl)
        kl = steps.kl[kl_ok]
        self.kl_sums.append(float(kl.sum()))
        self.kl_counts.append(int(kl.shape[0]))
        self.kl_values.append(kl)
        same = int(steps.same_top.sum())
        measured = int(steps.same_top_measured.sum())
        self.same.append(same)
        self.same_totals.append(measured)
        delta = (
            steps.target_delta[~np.isnan(steps.target_delta)] if steps.target_delta.size else kl[:0]
        )
        self.delta_sums.append(float(delta.sum()))
        self.delta_counts.append(int(delta.shape[0]))
        dp = steps.delta_p[~np.isnan(steps.delta_p)]
        self.dp_sums.append(float(dp.sum()))
        self.dp_squares.append(float((dp * dp).sum()))
        self.dp_counts.append(int(dp.shape[0]))
        if dp.size:
            self.dp_max_abs = max(self.dp_max_abs, float(np.abs(dp).max()))
        covered = steps.covered_mass[kl_ok] if steps.covered_mass.size else kl[:0]
        self.covered_sum += float(covered.sum())
        self.covered_count += int(covered.shape[0])
        self.forced_prompts += int(steps.teacher_forced)
        generated = steps.generated[kl_ok] if steps.generated.size else np.ones(kl.size, np.bool_)
        self.generated_steps += int(generated.sum())
        self.prompt_steps += int((~generated).sum())
        self.full_steps += int(steps.full_vocab[kl_ok].sum()) if steps.full_vocab.size else 0
        buckets = bucket_of(steps.positions)
        b_kl = np.bincount(buckets[kl_ok], weights=kl, minlength=_BUCKETS).astype(np.float64)
        b_steps = np.bincount(buckets[kl_ok], minlength=_BUCKETS).astype(np.int64)
        b_same = np.bincount(buckets[steps.same_top], minlength=_BUCKETS).astype(np.int64)
        b_total = np.bincount(buckets[steps.same_top_measured], minlength=_BUCKETS).astype(np.int64)
        self.bucket_kl += b_kl
        self.bucket_steps += b_steps
        self.bucket_same += b_same
        self.bucket_same_total += b_total
        return PromptLogprobs(
            kl_steps=int(kl.shape[0]),
            mean_kl=float(kl.mean()) if kl.size else None,
            same_top_rate=same / measured if measured else None,
            target_logprob_delta=float(delta.mean()) if delta.size else None,
            bucket_kl=b_kl,
            bucket_kl_steps=b_steps,
            bucket_same=b_same,
            bucket_same_total=b_total,
        )

    @property
    def scored_steps(self) -> int:
        return sum(self.kl_counts)

    def finalize(self) -> LogprobMetrics | None:
        """Suite metrics; None when no step of any prompt could be measured."""
        if sum(self.kl_counts) == 0 and sum(self.same_totals) == 0:
            return None
        kl = np.concatenate(self.kl_values) if self.kl_values else np.zeros(0)
        mean_kl = _mean(self.kl_sums, self.kl_counts)
        dp_total = sum(self.dp_counts)
        dp_mean = sum(self.dp_sums) / dp_total if dp_total else None
        dp_rms = math.sqrt(sum(self.dp_squares) / dp_total) if dp_total else None
        delta = _mean(self.delta_sums, self.delta_counts)
        return LogprobMetrics(
            steps=int(kl.shape[0]),
            teacher_forced_prompts=self.forced_prompts,
            mean_kl=mean_kl,
            kl_p99=float(np.quantile(kl, 0.99, method="higher")) if kl.size else None,
            kl_max=float(kl.max()) if kl.size else None,
            same_top_rate=Rate.over_steps(self.same, self.same_totals),
            delta_p_mean=dp_mean,
            delta_p_rms=dp_rms,
            delta_p_max_abs=self.dp_max_abs if dp_total else None,
            generated_steps=self.generated_steps,
            prompt_steps=self.prompt_steps,
            full_vocab_steps=self.full_steps,
            covered_mass=self.covered_sum / self.covered_count if self.covered_count else None,
            target_logprob_delta=delta if delta.count else None,
        )

    def estimates(self, confidence: float) -> dict[str, Estimate]:
        """What the logprob thresholds decide on, with one-sided bounds at `confidence`."""
        steps = sum(self.kl_counts)
        out: dict[str, Estimate] = {}
        kl = clustered_bounds(self.kl_sums, self.kl_counts, confidence)
        out["meanKl"] = _estimate(kl.value, kl.lower, kl.upper, steps, "steps", "prompt means")
        p99, low, high = clustered_quantile_bounds(self.kl_values, 0.99, confidence)
        out["klP99"] = _estimate(p99, low, high, steps, "steps", "prompt shares")
        value, low, high = clustered_rate_bounds(self.same, self.same_totals, confidence)
        out["sameTopRate"] = _estimate(
            value, low, high, sum(self.same_totals), "steps", "prompt rates"
        )
        # The log perplexity ratio is log(PPL_candidate / PPL_baseline): minus the mean delta.
        delta = clustered_bounds(self.delta_sums, self.delta_counts, confidence)
        out["logPerplexityRatio"] = _estimate(
            None if delta.value is None else 0.0 - delta.value,
            None if delta.upper is None else 0.0 - delta.upper,
            None if delta.lower is None else 0.0 - delta.lower,
            delta.count, "steps", "prompt means",
        )  # fmt: skip
        dp = clustered_bounds(self.dp_sums, self.dp_counts, confidence)
        out["deltaPMean"] = _estimate(
            dp.value, dp.lower, dp.upper, dp.count, "steps", "prompt means"
        )
        square = clustered_bounds(self.dp_squares, self.dp_counts, confidence)
        out["deltaPRms"] = _estimate(
            _sqrt(square.value), _sqrt(square.lower), _sqrt(square.upper),
            square.count, "steps", "prompt means",
        )  # fmt: skip
        return out

    def stratum_estimates(self, confidence: float) -> dict[str, dict[str, Estimate]]:
        """Mean KL and same-top rate of each stratum's prompts alone, with the same
        prompt-clustered bounds as the suite's: how each kind of prompt (short text, long
        text, chats through each side's template) fares on its own."""
        out: dict[str, dict[str, Estimate]] = {}
        for stratum in sorted(set(self.strata)):
            rows = [i for i, s in enumerate(self.strata) if s == stratum]
            counts = [self.kl_counts[i] for i in rows]
            kl = clustered_bounds([self.kl_sums[i] for i in rows], counts, confidence)
            totals = [self.same_totals[i] for i in rows]
            value, low, high = clustered_rate_bounds(
                [self.same[i] for i in rows], totals, confidence
            )
            out[stratum] = {
                "meanKl": _estimate(
                    kl.value, kl.lower, kl.upper, kl.clusters, "prompts", "prompt means"
                ),
                "sameTopRate": _estimate(value, low, high, len(rows), "prompts", "prompt rates"),
            }
        return out

    def bucket(self, index: int) -> dict[str, Any]:
        """KL and same-top fields of one POSITION_BUCKETS entry, as BucketMetrics updates."""
        steps = int(self.bucket_steps[index])
        same_total = int(self.bucket_same_total[index])
        return {
            "kl_steps": steps,
            "mean_kl": float(self.bucket_kl[index]) / steps if steps else None,
            "same_top_rate": int(self.bucket_same[index]) / same_total if same_total else None,
        }


def _mean(sums: list[float], counts: list[int]) -> Mean:
    estimate = clustered_error(sums, counts)
    return Mean(
        value=estimate.value,
        stderr=estimate.stderr,
        count=estimate.count,
        clusters=estimate.clusters,
    )


def _estimate(  # noqa: PLR0917 - one row of the estimates table, in its column order
    value: float | None,
    lower: float | None,
    upper: float | None,
    evidence: int,
    unit: str,
    method: str,
) -> Estimate:
    return Estimate(
        value=value, lower=lower, upper=upper, evidence=evidence, unit=unit, method=method
    )


def _sqrt(value: float | None) -> float | None:
    return None if value is None else math.sqrt(max(value, 0.0))
