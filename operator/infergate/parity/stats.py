"""Small statistics the parity metrics need: rate intervals, survival curves, clustered means.

All pure functions of numbers; nothing here knows about records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray


def z_score(confidence: float) -> float:
    """Two-sided standard normal quantile for a confidence level in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: {confidence} is outside (0, 1)")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


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


def clustered_mean(sums: Sequence[float], counts: Sequence[int]) -> tuple[float | None, float]:
    """Token-weighted mean over prompts and its prompt-clustered standard error.

    Tokens within one prompt are correlated, so the error is computed over prompts
    (a ratio estimator with cluster-robust variance), not over tokens.
    """
    s = np.asarray(sums, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    keep = n > 0
    s, n = s[keep], n[keep]
    total = float(n.sum())
    if total == 0.0:
        return (None, math.inf)
    mean = float(s.sum() / total)
    clusters = s.shape[0]
    if clusters < 2:
        return (mean, math.inf)
    residual = s - mean * n
    variance = float((residual * residual).sum()) / (total * total) * clusters / (clusters - 1)
    return (mean, math.sqrt(variance))


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
