"""The suite's token metrics: each prompt's greedy comparison folded into rates and bounds.

`token_metrics` gives what the report and status show (match rate, agreement, the
first-divergence survival curve, the legitimate share of forks); `token_estimates` gives
what the token thresholds decide on, each with its one-sided bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infergate.parity.metrics import (
    Estimate,
    FirstDivergence,
    Rate,
    SurvivalPoint,
    TokenMetrics,
)
from infergate.parity.prompt_bounds import clustered_rate_bounds
from infergate.parity.stats import kaplan_meier
from infergate.parity.tokens import TokenComparison


def token_metrics(tokens: Sequence[TokenComparison]) -> TokenMetrics:
    """Match rate, agreement, first divergence and forks over the suite's prompts."""
    diverged = [t for t in tokens if not t.identical]
    curve = kaplan_meier([t.first_divergence for t in tokens], [t.agreed for t in tokens])
    median, median_censored = curve.quantile(0.5)
    p10, p10_censored = curve.quantile(0.1)
    judged = [t.legitimate for t in diverged]
    legit = None
    if None not in judged:
        legit = Rate.of(sum(1 for j in judged if j), len(judged))
    gaps = np.asarray([t.logprob_gap for t in diverged if t.logprob_gap is not None])
    return TokenMetrics(
        match_rate=Rate.of(len(tokens) - len(diverged), len(tokens)),
        agreement=Rate.over_steps([t.agreed for t in tokens], [t.length for t in tokens]),
        first_divergence=FirstDivergence(
            prompts=len(tokens),
            diverged=len(diverged),
            median=median,
            median_censored=median_censored,
            p10=p10,
            p10_censored=p10_censored,
            horizon=curve.horizon,
            survival=[
                SurvivalPoint(position=p, surviving=s)
                for p, s in zip(curve.positions, curve.surviving, strict=True)
            ],
        ),
        legitimate_divergence_rate=legit,
        divergence_logprob_gap_median=float(np.median(gaps)) if gaps.size else None,
        divergence_logprob_gap_max=float(gaps.max()) if gaps.size else None,
    )


def token_estimates(
    tokens: Sequence[TokenComparison], confidence: float, early_limit: float | None
) -> dict[str, Estimate]:
    """What the token thresholds decide on; `early_limit`: minFirstDivergenceP10, if set."""
    c = confidence
    n = len(tokens)
    out: dict[str, Estimate] = {}
    matched = sum(1 for t in tokens if t.identical)
    out["tokenMatchRate"] = Estimate.wilson(matched, n, c, "prompts")
    value, low, high = clustered_rate_bounds(
        [t.agreed for t in tokens], [t.length for t in tokens], c
    )
    out["tokenAgreement"] = Estimate(
        value=value, lower=low, upper=high, evidence=sum(t.length for t in tokens),
        unit="steps", method="prompt rates",
    )  # fmt: skip
    unexplained = sum(1 for t in tokens if not t.identical and t.legitimate is not True)
    out["illegitimateDivergenceRate"] = Estimate.wilson(unexplained, n, c, "prompts")
    diverged = [t for t in tokens if not t.identical]
    if diverged:
        out["legitimateDivergenceRate"] = Estimate.wilson(
            sum(1 for t in diverged if t.legitimate is True), len(diverged), c, "prompts"
        )
    else:
        out["legitimateDivergenceRate"] = Estimate(
            value=1.0, lower=1.0, upper=1.0, evidence=0, unit="prompts",
            method="no forks to judge",
        )  # fmt: skip
    if early_limit is not None:
        out["earlyForkRate"] = _early_fork_rate(tokens, early_limit, c)
    return out


def _early_fork_rate(
    tokens: Sequence[TokenComparison], limit: float, confidence: float
) -> Estimate:
    """The share of prompts forking unexplained before `limit` output tokens, among those
    observed that far (a prompt that stopped earlier without forking says nothing)."""
    early, observed = 0, 0
    for t in tokens:
        fork = t.first_divergence
        if fork is not None and fork < limit and t.legitimate is not True:
            early += 1
            observed += 1
        elif fork is not None and fork < limit:
            observed += 1  # an explained early fork: observed, not counted
        elif t.length >= limit or (fork is not None and fork >= limit):
            observed += 1
    return Estimate.wilson(early, observed, confidence, "prompts")
