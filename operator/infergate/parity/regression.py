"""Against the last passing check: does a metric worsen past its allowance, with confidence?

Only checks of the same suite content digest and sampling are compared
(`regression_comparable`). A rate regresses when the upper confidence bound of its change
is below minus its allowance; a mean when the lower bound of its rise is above it. Rates
over prompts take the Newcombe interval of the difference; means and rates over steps a
t bound from the two prompt-clustered standard errors, on the values those errors belong
to: each prompt's mean or rate weighing the same. A rate over steps compares its mean of
per-prompt rates, not its pooled share: the pooled share rests on the few long prompts
that carry most steps, so the prompt-mean error understated its change and the "95%"
bound held 81.6% of the time in simulation (experiments/BOUND_COVERAGE.md).
"""

from __future__ import annotations

import math

from infergate.parity.metrics import Mean, ParityMetrics, Rate
from infergate.parity.profiles import resolve_regression
from infergate.parity.stats import newcombe_difference, one_sided_z, student_t_quantile
from infergate.parity.thresholds import RegressionTolerance, Thresholds
from infergate.parity.wire import WireModel


class Regression(WireModel):
    """One metric against the last passing check."""

    metric: str
    previous: float | None
    current: float | None
    bound: float | None
    allowed: float
    regressed: bool
    message: str


def regression_comparable(current: ParityMetrics, previous: ParityMetrics) -> str | None:
    """Why the two checks cannot be compared for regression; None when they can."""
    if not previous.run or not current.run:
        return (
            "no regression test: the suite content digest and sampling of "
            f"{'the previous check' if not previous.run else 'this check'} are not recorded"
        )
    if previous.run != current.run:
        changed = sorted(
            k for k in previous.run.keys() | current.run.keys()
            if previous.run.get(k) != current.run.get(k)
        )  # fmt: skip
        return (
            "no regression test: the last passing check ran another suite or sampling "
            f"({', '.join(changed)})"
        )
    return None


def check_regression(
    current: ParityMetrics,
    previous: ParityMetrics,
    tolerance: RegressionTolerance,
    thresholds: Thresholds | None = None,
) -> list[Regression]:
    """Compare with the last passing check; a metric regresses only past its bound.

    Allowances not set in `tolerance` derive from `thresholds` (resolve_regression); an
    allowance that stays None skips its metric.
    """
    tolerance = resolve_regression(thresholds or Thresholds(), tolerance)
    confidence = tolerance.confidence
    found: list[Regression] = []
    rates = (
        ("token match rate", current.tokens.match_rate, previous.tokens.match_rate,
         tolerance.max_token_match_rate_drop),
        ("token agreement", current.tokens.agreement, previous.tokens.agreement,
         tolerance.max_token_agreement_drop),
        ("same-top-token rate",
         None if current.logprobs is None else current.logprobs.same_top_rate,
         None if previous.logprobs is None else previous.logprobs.same_top_rate,
         tolerance.max_same_top_rate_drop),
    )  # fmt: skip
    for label, now, before, allowed in rates:
        if allowed is None or now is None or before is None or not now.total or not before.total:
            continue
        was, is_now = _compared(before), _compared(now)
        high = rate_change_upper(now, before, confidence)
        if high is None or was is None or is_now is None:
            found.append(Regression(
                metric=label, previous=was, current=is_now, bound=None, allowed=allowed,
                regressed=False,
                message=(f"{label}: no bound (the last passing check did not keep its mean "
                         "of per-prompt rates), not judged"),
            ))  # fmt: skip
            continue
        found.append(Regression(
            metric=label, previous=was, current=is_now, bound=high, allowed=allowed,
            regressed=high < -allowed,
            message=(f"{label} went from {was:.4f} to {is_now:.4f}{_weighing(now)}; the "
                     f"{confidence:.0%} upper bound of the change is {high:+.4f}, "
                     f"allowed -{allowed:.4g}"),
        ))  # fmt: skip
    means = (
        ("mean KL",
         None if current.logprobs is None else current.logprobs.mean_kl,
         None if previous.logprobs is None else previous.logprobs.mean_kl,
         tolerance.max_mean_kl_increase),
        ("hidden relative L2 mean",
         None if current.hidden is None else current.hidden.rel_l2,
         None if previous.hidden is None else previous.hidden.rel_l2,
         tolerance.max_hidden_rel_l2_increase),
    )  # fmt: skip
    for label, now_mean, before_mean, allowed in means:
        if allowed is None or now_mean is None or before_mean is None:
            continue
        if now_mean.value is None or before_mean.value is None:
            continue
        increase = now_mean.value - before_mean.value
        low = mean_change_lower(now_mean, before_mean, confidence)
        if low is None:
            found.append(Regression(
                metric=label, previous=before_mean.value, current=now_mean.value, bound=None,
                allowed=allowed, regressed=False,
                message=(f"{label} went from {before_mean.value:.4g} to {now_mean.value:.4g}; "
                         "no bound (a check rests on a single prompt), not judged"),
            ))  # fmt: skip
            continue
        found.append(Regression(
            metric=label, previous=before_mean.value, current=now_mean.value, bound=low,
            allowed=allowed, regressed=low > allowed,
            message=(f"{label} rose from {before_mean.value:.4g} to {now_mean.value:.4g} "
                     f"({increase:+.4g}); the {confidence:.0%} lower bound of the rise is "
                     f"{low:+.4g}, allowed +{allowed:.4g}"),
        ))  # fmt: skip
    return found


def rate_change_upper(now: Rate, before: Rate, confidence: float) -> float | None:
    """One-sided upper bound of now - before.

    Rates over steps (a prompt-clustered error on either side): the change of the means of
    per-prompt rates, t from the two errors; None when a side lacks that mean (a record
    made before it was kept). Rates over prompts: Newcombe's interval of the difference.
    """
    if now.stderr is not None or before.stderr is not None:
        if (
            now.stderr is None or before.stderr is None
            or now.prompt_mean is None or before.prompt_mean is None
        ):  # fmt: skip
            return None
        spread = math.hypot(now.stderr, before.stderr)
        return (now.prompt_mean - before.prompt_mean) + _quantile(now, before, confidence) * spread
    _, high = newcombe_difference(
        now.successes, now.total, before.successes, before.total, 2.0 * confidence - 1.0
    )
    return high


def _compared(rate: Rate) -> float | None:
    """The value a rate's change is judged on: its prompt mean where it is over steps."""
    return rate.value if rate.stderr is None else rate.prompt_mean


def _weighing(rate: Rate) -> str:
    return "" if rate.stderr is None else " (mean of per-prompt rates)"


def mean_change_lower(now: Mean, before: Mean, confidence: float) -> float | None:
    """One-sided lower bound of now - before from the two prompt-clustered errors.

    A standard error of exactly 0 (every prompt agreed) is 0, not unknown; None (a single
    prompt) leaves the change without a bound.
    """
    if now.value is None or before.value is None or now.stderr is None or before.stderr is None:
        return None
    spread = math.hypot(now.stderr, before.stderr)
    return (now.value - before.value) - _quantile(now, before, confidence) * spread


def _quantile(now: Mean | Rate, before: Mean | Rate, confidence: float) -> float:
    clusters = [c for c in (now.clusters, before.clusters) if c]
    if not clusters or min(clusters) < 2:
        return one_sided_z(confidence)
    return student_t_quantile(confidence, min(clusters) - 1)
