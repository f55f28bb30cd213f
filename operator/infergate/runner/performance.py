"""Performance beside numerics: paired runs in, relative changes with bounds and a phase out.

Pure. Each repeat drove both sides with the same requests at the same moment, so each
gives one paired relative change per figure (the machine's noise of that moment hits
both sides alike). Over the repeats the mean change gets a one-sided Student t
confidence bound each way; a limit is

- met (Passed) when the upper bound of the change is within it,
- broken (Failed) when the lower bound is past it,
- undecided (Inconclusive) otherwise: the runs disagree too much to say.

One run never decides: at least two repeats are required (`performance.repeats`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infergate.api.enums import CheckPhase
from infergate.api.load import PerformanceStatus, RelativeChange, SideFigures
from infergate.runner.load_drive import RunResult


@dataclass(frozen=True)
class Figures:
    """One side's figures of one run."""

    tokens_per_second: float
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.quantile(np.asarray(values, np.float64), q))


def figures(run: RunResult) -> Figures:
    """Throughput, TTFT and ITL percentiles of one side's run."""
    ttft = [a.ttft for a in run.answers if a.ttft is not None]
    itl = [gap for a in run.answers for gap in a.inter_token()]
    return Figures(
        tokens_per_second=run.output_tokens / run.seconds if run.seconds > 0 else 0.0,
        ttft_p50=_quantile(ttft, 0.5),
        ttft_p99=_quantile(ttft, 0.99),
        itl_p50=_quantile(itl, 0.5),
        itl_p99=_quantile(itl, 0.99),
    )


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's continued fraction of the regularized incomplete beta function."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-14:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: int) -> float:
    """The `p` quantile (0.5 < p < 1) of Student's t, by bisection on the CDF."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError(f"t quantile: p {p} must be in (0.5, 1) and df {df} at least 1")
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if student_t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def relative_change(
    changes: Sequence[float], confidence: float, limit: float | None
) -> RelativeChange:
    """The mean of per-repeat changes with its one-sided bounds (`confidence` each way)."""
    values = np.asarray(changes, np.float64)
    n = int(values.shape[0])
    if n < 2:
        raise ValueError("a performance limit is judged over at least two repeats")
    mean = float(values.mean())
    spread = float(values.std(ddof=1)) / math.sqrt(n)
    margin = student_t_quantile(confidence, n - 1) * spread
    return RelativeChange(mean=mean, low=mean - margin, high=mean + margin, limit=limit)


def judge_change(change: RelativeChange) -> CheckPhase:
    """Passed when the upper bound is within the limit, Failed when the lower bound is past
    it, Inconclusive in between (no limit: Passed)."""
    if change.limit is None or change.high <= change.limit:
        return CheckPhase.PASSED
    if change.low > change.limit:
        return CheckPhase.FAILED
    return CheckPhase.INCONCLUSIVE


def _ratio_increase(candidate: float | None, baseline: float | None) -> float | None:
    if candidate is None or baseline is None or baseline <= 0:
        return None
    return candidate / baseline - 1.0


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def side_figures(runs: Sequence[Figures]) -> SideFigures:
    """One side's figures as shown: means over its runs."""
    return SideFigures(
        output_tokens_per_second=_mean([r.tokens_per_second for r in runs]),
        ttft_p50_seconds=_mean([r.ttft_p50 for r in runs]),
        ttft_p99_seconds=_mean([r.ttft_p99 for r in runs]),
        itl_p50_seconds=_mean([r.itl_p50 for r in runs]),
        itl_p99_seconds=_mean([r.itl_p99 for r in runs]),
    )


@dataclass(frozen=True)
class Limits:
    """The limits of spec.performance (None: not limited)."""

    max_throughput_drop: float | None
    max_ttft_p99_increase: float | None
    max_itl_p99_increase: float | None
    confidence: float


def judge_performance(
    pairs: Sequence[tuple[Figures, Figures]], limits: Limits, concurrency: int
) -> PerformanceStatus:
    """The performance status of paired repeats ((baseline, candidate) figures each)."""
    drops = [
        1.0 - c.tokens_per_second / b.tokens_per_second for b, c in pairs if b.tokens_per_second > 0
    ]
    changes: dict[str, RelativeChange | None] = {}
    for key, values, limit in (
        ("throughput_drop", drops, limits.max_throughput_drop),
        (
            "ttft_p99_increase",
            [_ratio_increase(c.ttft_p99, b.ttft_p99) for b, c in pairs],
            limits.max_ttft_p99_increase,
        ),
        (
            "itl_p99_increase",
            [_ratio_increase(c.itl_p99, b.itl_p99) for b, c in pairs],
            limits.max_itl_p99_increase,
        ),
    ):
        known = [v for v in values if v is not None]
        if len(known) >= 2 and len(known) == len(pairs):
            changes[key] = relative_change(known, limits.confidence, limit)
        else:
            changes[key] = None
    phases: list[CheckPhase] = []
    for key, limit in (
        ("throughput_drop", limits.max_throughput_drop),
        ("ttft_p99_increase", limits.max_ttft_p99_increase),
        ("itl_p99_increase", limits.max_itl_p99_increase),
    ):
        change = changes[key]
        if limit is None:
            continue
        # A limit whose figure could not be measured on every repeat cannot be met.
        phases.append(CheckPhase.INCONCLUSIVE if change is None else judge_change(change))
    order = [CheckPhase.PASSED, CheckPhase.INCONCLUSIVE, CheckPhase.FAILED]
    phase = max(phases, key=order.index) if phases else CheckPhase.PASSED
    return PerformanceStatus(
        phase=phase,
        concurrency=concurrency,
        repeats=len(pairs),
        baseline=side_figures([b for b, _ in pairs]),
        candidate=side_figures([c for _, c in pairs]),
        throughput_drop=changes["throughput_drop"],
        ttft_p99_increase=changes["ttft_p99_increase"],
        itl_p99_increase=changes["itl_p99_increase"],
    )
