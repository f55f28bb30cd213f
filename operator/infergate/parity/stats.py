"""Small statistics the parity metrics need: rate intervals, survival curves, Student's t.

Wilson score bounds for rates over independent units, Newcombe's interval of a difference
of two rates, the Kaplan-Meier curve of first divergence, and Student's t (CDF and
quantile, checked against scipy in the tests). How a suite metric is bounded with the
prompt as the unit is `prompt_bounds`. All pure functions of numbers; nothing here knows
about records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray


def z_score(confidence: float) -> float:
    """Two-sided standard normal quantile for a confidence level in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: {confidence} is outside (0, 1)")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def one_sided_z(confidence: float) -> float:
    """Standard normal quantile of a one-sided bound at `confidence` in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: {confidence} is outside (0, 1)")
    return NormalDist().inv_cdf(confidence)


def wilson_interval(successes: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate; (0, 1) when nothing was observed."""
    if total <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= total:
        raise ValueError(f"successes: {successes} is outside 0..{total}")
    z = z_score(confidence)
    p = successes / total
    denom = 1.0 + z * z / total
    centre = (p + z * z / (2.0 * total)) / denom
    half = z * math.sqrt(p * (1.0 - p) / total + z * z / (4.0 * total * total)) / denom
    # At p = 0 or 1 the formula's bound equals p exactly in real numbers; keep it so in floats.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == total else min(1.0, centre + half)
    return (low, high)


def wilson_bounds(successes: int, total: int, confidence: float) -> tuple[float, float]:
    """One-sided Wilson bounds (lower, upper), each holding at `confidence`.

    A one-sided bound at level c is one end of the two-sided interval at level 2c - 1.
    """
    return wilson_interval(successes, total, 2.0 * confidence - 1.0)


def newcombe_difference(
    successes_a: int, total_a: int, successes_b: int, total_b: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Interval of the difference of two rates a - b (Newcombe 1998, method 10).

    Combines the two Wilson intervals; it keeps good coverage at rates near 0 or 1,
    where parity rates live, unlike the Wald interval.
    """
    p_a = successes_a / total_a if total_a else 0.0
    p_b = successes_b / total_b if total_b else 0.0
    low_a, high_a = wilson_interval(successes_a, total_a, confidence)
    low_b, high_b = wilson_interval(successes_b, total_b, confidence)
    diff = p_a - p_b
    low = diff - math.sqrt((p_a - low_a) ** 2 + (high_b - p_b) ** 2)
    high = diff + math.sqrt((high_a - p_a) ** 2 + (p_b - low_b) ** 2)
    return (max(-1.0, low), min(1.0, high))


def quantile(values: NDArray[np.floating], q: float) -> float | None:
    """The q-quantile (linear interpolation) of the finite values; None when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    return float(np.quantile(finite, q))


@dataclass(frozen=True)
class SurvivalCurve:
    """Kaplan-Meier share of prompts whose outputs still agree after t output tokens.

    `positions[j]` is an output position t and `surviving[j]` the estimated share of
    prompts whose first t tokens all agree, S(t), at each t where it changes (plus
    t = 0 and the last position observed). A prompt that diverges at index d agrees
    on tokens 0..d-1; a prompt whose outputs are identical over L tokens is censored
    at L: it is known to agree that far and no farther.
    """

    positions: tuple[int, ...]
    surviving: tuple[float, ...]
    horizon: int

    def at(self, position: int) -> float:
        """S(position): share still agreeing after `position` tokens."""
        index = int(np.searchsorted(np.asarray(self.positions), position, side="right")) - 1
        return self.surviving[max(index, 0)]

    def quantile(self, share: float) -> tuple[int, bool]:
        """First divergence index by which `share` of prompts have diverged.

        Returns (index, censored). When fewer than `share` diverged within what was
        observed, returns (horizon, True): the quantile lies at or beyond the horizon.
        """
        for position, surviving in zip(self.positions, self.surviving, strict=True):
            if position > 0 and 1.0 - surviving >= share - 1e-12:
                return (position - 1, False)
        return (self.horizon, True)


def kaplan_meier(divergences: Sequence[int | None], observed: Sequence[int]) -> SurvivalCurve:
    """Survival curve of first divergence.

    `divergences[i]` is prompt i's first divergence index, or None when its outputs
    agree throughout; `observed[i]` is then the number of tokens that agreed.
    """
    if len(divergences) != len(observed):
        raise ValueError(
            f"divergences ({len(divergences)}) and observed ({len(observed)}) differ in length"
        )
    events = np.asarray([d for d in divergences if d is not None], dtype=np.int64)
    censored = np.asarray(
        [o for d, o in zip(divergences, observed, strict=True) if d is None], dtype=np.int64
    )
    horizon = int(max(events.max(initial=0) + 1, censored.max(initial=0)))
    positions = [0]
    surviving = [1.0]
    share = 1.0
    for index in np.unique(events):
        at_risk = int((events >= index).sum() + (censored > index).sum())
        share *= 1.0 - float((events == index).sum()) / at_risk
        positions.append(int(index) + 1)
        surviving.append(share)
    if positions[-1] != horizon:
        positions.append(horizon)
        surviving.append(share)
    return SurvivalCurve(tuple(positions), tuple(surviving), horizon)


# -- Student's t -------------------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df: {df} must be positive")
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=1024)
def student_t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on the CDF, to 1e-12; remembered, as bounds
    over a quantile's candidate values ask for the same one many times)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p: {p} is outside (0, 1)")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if student_t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return 0.5 * (low + high)
