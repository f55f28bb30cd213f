"""Coverage of the same-top rate bound when a few prompts hold every miss.

`bound_coverage.py` draws each prompt's miss rate from one Beta (mean 1.5%, concentration
20): misses are spread over most prompts. The gate bench's benign bf16-vs-fp32 row is
shaped otherwise: 66 of its 68 prompts miss at most 0.4% of their positions and two
prompts that end at an eos after 11 and 12 positions hold one miss each (rates 1/11, 1/12).
This script simulates that shape, a mixture:

- each prompt is tie-prone with probability 5%: its miss rate Beta, mean 8%, concentration
  10; otherwise Beta, mean 0.05%, concentration 50;
- 64 short prompts of 64 scored positions and 4 long ones of 8,000 (the bench suite's
  shape), each position a Bernoulli draw at its prompt's rate;

and reports, at one-sided 95%, the coverage of the gate's rate bound
(`prompt_bounds.clustered_rate_bounds`: Wilson at the effective number of positions,
widened by a studentized bootstrap over prompts) and of one alternative, the same Wilson
bound widened by a BCa bootstrap (`scipy.stats.bootstrap`) instead, on this shape and on
`bound_coverage.py`'s. A bound covers when it lies at or below the true mean rate.

    PYTHONPATH=operator .venv/bin/python experiments/clumped_rates.py [replicates]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy import stats  # type: ignore[import-untyped]  # dev-only cross-check library

from infergate.parity.prompt_bounds import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    clustered_rate_bounds,
    wilson_at,
)
from infergate.parity.stats import one_sided_z, student_t_quantile

CONFIDENCE = 0.95
PRONE, PRONE_MISS, QUIET_MISS = 0.05, 0.08, 0.0005
BENCH_COUNTS = np.array([64] * 64 + [8000] * 4)
SPREAD_COUNTS = np.array([60] * 34 + [1020] * 4)
"""bound_coverage.py's suite: 34 short prompts x 60 positions, 4 long x 1,020."""

Draw = tuple[NDArray[np.int64], NDArray[np.int64], float]


def clumped(rng: np.random.Generator) -> Draw:
    prone = rng.random(BENCH_COUNTS.size) < PRONE
    miss = np.where(
        prone,
        rng.beta(PRONE_MISS * 10, (1 - PRONE_MISS) * 10, BENCH_COUNTS.size),
        rng.beta(QUIET_MISS * 50, (1 - QUIET_MISS) * 50, BENCH_COUNTS.size),
    )
    truth = 1.0 - (PRONE * PRONE_MISS + (1 - PRONE) * QUIET_MISS)
    return rng.binomial(BENCH_COUNTS, 1.0 - miss), BENCH_COUNTS, truth


def spread(rng: np.random.Generator) -> Draw:
    mean, concentration = 0.015, 20.0
    miss = rng.beta(mean * concentration, (1 - mean) * concentration, SPREAD_COUNTS.size)
    return rng.binomial(SPREAD_COUNTS, 1.0 - miss), SPREAD_COUNTS, 1.0 - mean


def gate_lower(hits: NDArray[np.int64], counts: NDArray[np.int64]) -> float:
    return clustered_rate_bounds(hits.tolist(), counts.tolist(), CONFIDENCE)[1]


def bca_lower(hits: NDArray[np.int64], counts: NDArray[np.int64]) -> float:
    """Wilson at the effective number of positions, widened by BCa instead."""
    rates = hits / counts
    k, p = rates.size, float(rates.mean())
    ceiling = float(k * k / np.sum(1.0 / counts))
    variance = float(rates.var(ddof=1)) / k
    if variance > 0.0 and p * (1.0 - p) / variance < ceiling:
        low = wilson_at(p, p * (1.0 - p) / variance, student_t_quantile(CONFIDENCE, k - 1))[0]
    else:
        low = wilson_at(p, ceiling, one_sided_z(CONFIDENCE))[0]
    if np.all(rates == rates[0]):
        return low
    boot = stats.bootstrap(
        (rates,), np.mean, confidence_level=2 * CONFIDENCE - 1, method="BCa",
        n_resamples=BOOTSTRAP_RESAMPLES, random_state=np.random.default_rng(BOOTSTRAP_SEED),
    )  # fmt: skip
    return min(low, float(boot.confidence_interval.low))


def coverage(
    draw: Callable[[np.random.Generator], Draw], bound: Callable[..., float], n: int
) -> float:
    rng = np.random.default_rng(20261207)
    covered = 0
    for _ in range(n):
        hits, counts, truth = draw(rng)
        covered += bound(hits, counts) <= truth
    return covered / n


def clears(short: int, limit: float, suites: int) -> tuple[float, float]:
    """On the clumped shape with `short` short prompts: the median gate lower bound, and
    the share of suites whose bound clears `limit` (how many prompts decide the row)."""
    counts = np.array([64] * short + [8000] * 4)
    rng = np.random.default_rng(1)
    lows = []
    for _ in range(suites):
        prone = rng.random(counts.size) < PRONE
        miss = np.where(
            prone,
            rng.beta(PRONE_MISS * 10, (1 - PRONE_MISS) * 10, counts.size),
            rng.beta(QUIET_MISS * 50, (1 - QUIET_MISS) * 50, counts.size),
        )
        lows.append(gate_lower(rng.binomial(counts, 1.0 - miss), counts))
    found = np.asarray(lows)
    return float(np.median(found)), float(np.mean(found > limit))


def main(replicates: int) -> None:
    say = sys.stdout.write
    say(f"{replicates} replicates, one-sided {CONFIDENCE:.0%}\n")
    for shape, draw in (("clumped (bench row's shape)", clumped), ("spread", spread)):
        for name, bound in (("gate (studentized)", gate_lower), ("BCa instead", bca_lower)):
            say(f"{shape:<30} {name:<20} {coverage(draw, bound, replicates):.1%}\n")
    for short in (64, 128, 256):
        median, share = clears(short, 0.985, 200)
        say(f"clumped, {short} short prompts: median bound {median:.4f}, ")
        say(f"clears 0.985 in {share:.1%}\n")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
