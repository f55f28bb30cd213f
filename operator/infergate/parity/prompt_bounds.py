"""One-sided bounds of suite metrics with the prompt as the unit: what thresholds decide on.

Positions of one prompt are correlated, and a suite's prompts are far from equal in
length (the default suite's 4 long prompts carry most of its scored positions). A mean
weighted by positions then rests on a handful of prompts while a t quantile would count
all of them: its "95%" bound missed 14-28% of the time in simulation. So every suite
metric here weighs each prompt the same (each contributes its own mean, rate or share),
and its degrees of freedom are the number of prompts (Kish's effective number of clusters
under equal weights):

- means (KL, logprob deltas, hidden errors): the mean of per-prompt means; bounds the
  wider of Student's t with (prompts - 1) df and a studentized bootstrap over prompts,
  which corrects for the right skew of per-prompt means (a t bound alone under-covers
  on the high side when a few prompts carry large values);
- rates over positions (same-top, token agreement): the mean of per-prompt rates, a Wilson
  bound at the effective number of positions p(1 - p) / var (Korn and Graubard 1998,
  Survey Methodology 24:193), with t (prompts - 1 df) in place of z when the spread between
  prompts sets that number; Wilson keeps a rate of exactly 1 from reading as certain;
- quantiles (KL P99, hidden relative L2 P99, cosine P1): the quantile of the mixture of
  the prompts' own distributions, each prompt weighing the same, bounded by inverting the
  rate bound above on each prompt's share of positions beyond a value: the q-quantile is at
  most x when the share of positions above x is bounded under 1 - q.

experiments/BOUND_COVERAGE.md has the simulated coverage of each bound before and after
(tests/unit/parity/test_bound_coverage.py keeps it). Fixed seeds: the same data always gives
the same bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from infergate.parity.stats import one_sided_z, student_t_quantile

BOOTSTRAP_SEED = 20261202
"""Fixed seed of the bootstrap over prompts: the same record always gets the same bound."""
BOOTSTRAP_RESAMPLES = 999
MIN_BOOTSTRAP_PROMPTS = 10
"""Fewer prompts give too few distinct resamples to estimate a 5% tail; t alone then."""


def prompt_means(sums: Sequence[float], counts: Sequence[int]) -> NDArray[np.float64]:
    """Each prompt's own mean (sum / count), for the prompts with any count."""
    s = np.asarray(sums, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    keep = n > 0
    return s[keep] / n[keep]


def clustered_mean(sums: Sequence[float], counts: Sequence[int]) -> tuple[float | None, float]:
    """The mean of per-prompt means and its standard error over prompts (inf for one)."""
    means = prompt_means(sums, counts)
    if means.size == 0:
        return (None, math.inf)
    mean = float(means.mean())
    if means.size < 2:
        return (mean, math.inf)
    return (mean, float(means.std(ddof=1)) / math.sqrt(means.size))


@dataclass(frozen=True)
class ClusteredEstimate:
    """A mean over prompts with one-sided bounds; bounds are None without evidence."""

    value: float | None
    stderr: float | None
    clusters: int
    count: int
    lower: float | None
    upper: float | None


def clustered_error(sums: Sequence[float], counts: Sequence[int]) -> ClusteredEstimate:
    """The mean of per-prompt means (sums[i] / counts[i]) and its standard error over
    prompts, without bounds (lower and upper None): what a suite's `Mean` or step `Rate`
    keeps, at no bootstrap's cost. A single prompt has no error (None)."""
    n = np.asarray(counts, dtype=np.int64)
    mean, stderr = clustered_mean(sums, counts)
    if mean is None:
        return ClusteredEstimate(None, None, 0, 0, None, None)
    error = stderr if math.isfinite(stderr) else None  # inf: a single prompt
    return ClusteredEstimate(mean, error, int((n > 0).sum()), int(n[n > 0].sum()), None, None)


def clustered_bounds(
    sums: Sequence[float], counts: Sequence[int], confidence: float
) -> ClusteredEstimate:
    """The mean of per-prompt means (sums[i] / counts[i]) with one-sided bounds.

    A single prompt gives no bound (None). A standard error of exactly 0 (every prompt
    agrees) gives bounds equal to the mean: no spread was observed, so none is invented.
    """
    found = clustered_error(sums, counts)
    if found.value is None or found.stderr is None:
        return found
    low, high = _mean_bounds(prompt_means(sums, counts), found.value, found.stderr, confidence)
    return replace(found, lower=low, upper=high)


def _mean_bounds(
    means: NDArray[np.float64], mean: float, stderr: float, confidence: float
) -> tuple[float, float]:
    """The wider of the t bounds and the studentized-bootstrap bounds, each one-sided."""
    if stderr == 0.0:
        return (mean, mean)
    t = student_t_quantile(confidence, means.size - 1)
    low, high = mean - t * stderr, mean + t * stderr
    if means.size < MIN_BOOTSTRAP_PROMPTS:
        return (low, high)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = means[rng.integers(0, means.size, (BOOTSTRAP_RESAMPLES, means.size))]
    spread = drawn.std(axis=1, ddof=1)
    # A resample of one repeated prompt has no spread to studentize by; it says nothing.
    usable = spread > 0
    studentized = (drawn.mean(axis=1)[usable] - mean) / (spread[usable] / math.sqrt(means.size))
    if studentized.size == 0:
        return (low, high)
    below = float(np.quantile(studentized, 1.0 - confidence, method="lower"))
    above = float(np.quantile(studentized, confidence, method="higher"))
    # No resample's mean leaves the range of the prompt means. Where nearly every prompt
    # agrees (decode deltas of identical engines: all 0 but one or two), a resample's
    # spread is rounding-sized and its studentized value enormous; held to that range, the
    # bootstrap bound stays one the resamples could reach (the t bound is kept as it is).
    lowest, highest = float(means.min()), float(means.max())
    boot_low = max(mean - above * stderr, lowest)
    boot_high = min(mean - below * stderr, highest)
    return (min(low, boot_low), max(high, boot_high))


def per_prompt_bounds(values: Sequence[float], confidence: float) -> ClusteredEstimate:
    """Mean of one value per prompt (each prompt weighs the same) with one-sided bounds."""
    finite = [v for v in values if math.isfinite(v)]
    return clustered_bounds(finite, [1] * len(finite), confidence)


# -- rates -------------------------------------------------------------------------------


def wilson_at(p: float, n: float, multiplier: float) -> tuple[float, float]:
    """Wilson score bounds of a rate p over n (possibly fractional) trials, `multiplier`
    standard errors out (z, or t where the variance was estimated)."""
    if n <= 0.0:
        return (0.0, 1.0)
    m2 = multiplier * multiplier
    denom = 1.0 + m2 / n
    centre = (p + m2 / (2.0 * n)) / denom
    half = multiplier * math.sqrt(max(p * (1.0 - p), 0.0) / n + m2 / (4.0 * n * n)) / denom
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return (low, high)


def _rate_bounds(
    rates: NDArray[np.float64], totals: NDArray[np.float64], confidence: float
) -> tuple[float, float, float]:
    """(mean rate, lower, upper) of per-prompt rates over `totals` positions each.

    The effective number of positions is p(1 - p) over the variance of the mean between
    prompts, never more than the positions an equal-weight mean rests on
    (prompts^2 / sum(1 / positions), the binomial case). Where the spread between prompts
    sets it, its variance was estimated with (prompts - 1) df, so t replaces z.
    """
    k = rates.size
    p = float(rates.mean())
    ceiling = float(k * k / np.sum(1.0 / totals))
    variance = float(rates.var(ddof=1)) / k
    if variance > 0.0 and p * (1.0 - p) / variance < ceiling:
        return (p, *wilson_at(p, p * (1.0 - p) / variance, student_t_quantile(confidence, k - 1)))
    return (p, *wilson_at(p, ceiling, one_sided_z(confidence)))


def clustered_rate_bounds(
    successes: Sequence[int], totals: Sequence[int], confidence: float
) -> tuple[float | None, float, float]:
    """A rate over positions, each prompt weighing the same: (value, lower, upper).

    With one prompt there is no spread to judge the clustering by: (value, 0, 1).
    """
    hits = np.asarray(successes, dtype=np.float64)
    n = np.asarray(totals, dtype=np.float64)
    keep = n > 0
    if not keep.any():
        return (None, 0.0, 1.0)
    rates = hits[keep] / n[keep]
    if rates.size < 2:
        return (float(rates[0]), 0.0, 1.0)
    value, low, high = _rate_bounds(rates, n[keep], confidence)
    if rates.size < MIN_BOOTSTRAP_PROMPTS:
        return (value, low, high)
    # Per-prompt miss rates are right-skewed (most prompts near 0, a few far off): the
    # studentized bootstrap catches what the symmetric effective-n bound misses.
    stderr = float(rates.std(ddof=1)) / math.sqrt(rates.size)
    b_low, b_high = _mean_bounds(rates, value, stderr, confidence)
    return (value, max(0.0, min(low, b_low)), min(1.0, max(high, b_high)))


# -- quantiles ---------------------------------------------------------------------------


def clustered_quantile_bounds(
    parts: Sequence[NDArray[np.floating]], q: float, confidence: float
) -> tuple[float | None, float | None, float | None]:
    """The q-quantile of the prompts' values, each prompt weighing the same, and its bounds.

    `parts[i]` holds prompt i's values (non-finite ones are dropped). The quantile is the
    smallest value x whose mean share of each prompt's values above x is at most 1 - q;
    the upper bound is the smallest x where the upper bound of that share is (the quantile
    is then at most x at `confidence`), the lower bound the smallest x where its lower
    bound is. Returns (value, lower, upper); bounds are None with fewer than two prompts,
    and the upper one is None when no observed value can bound the quantile (too few
    positions for the share's bound to reach 1 - q).
    """
    kept = [np.asarray(p, dtype=np.float64) for p in parts]
    kept = [p[np.isfinite(p)] for p in kept]
    kept = [p for p in kept if p.size]
    if not kept:
        return (None, None, None)
    pooled = np.concatenate(kept)
    owner = np.concatenate([np.full(p.size, i, np.intp) for i, p in enumerate(kept)])
    order = np.argsort(pooled, kind="stable")
    pooled, owner = pooled[order], owner[order]
    values = np.unique(pooled)
    totals = np.asarray([p.size for p in kept], dtype=np.float64)
    tail = 1.0 - q

    def above(x: float) -> NDArray[np.float64]:
        start = int(np.searchsorted(pooled, x, side="right"))
        return np.bincount(owner[start:], minlength=len(kept)) / totals

    value = _first(values, lambda x: float(above(x).mean()) <= tail)
    if len(kept) < 2:
        return (value, None, None)
    low = _first(values, lambda x: _rate_bounds(above(x), totals, confidence)[1] <= tail)
    high = _first(values, lambda x: _rate_bounds(above(x), totals, confidence)[2] <= tail)
    if value is None or low is None:
        return (value, low, high)
    return (value, min(low, value), None if high is None else max(high, value))


def _first(values: NDArray[np.float64], holds: Callable[[float], bool]) -> float | None:
    """The smallest of the sorted `values` where `holds` (true from some value on), or None."""
    lo, hi = 0, values.size
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(float(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo]) if lo < values.size else None
