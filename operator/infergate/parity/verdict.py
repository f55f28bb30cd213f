"""From measured metrics and thresholds to a verdict: Passed, Failed or Error.

- Error: the check could not measure (records incomplete or mismatched, a metric a
  threshold needs was not recorded, the baseline itself broken). Never promotes.
- Failed: something was measured past its threshold, a hygiene check failed, or a
  metric regressed against the last passing check beyond its confidence bound.
- Passed: everything measured, nothing past its limit.

Every reason names the threshold key, the measured value, the limit and the worst
prompts behind it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from infergate.parity.metrics import (
    HygieneFinding,
    ParityMetrics,
    ParityResult,
    PromptSummary,
    Rate,
)
from infergate.parity.stats import newcombe_difference, z_score
from infergate.parity.thresholds import RegressionTolerance, Thresholds

WORST_LISTED = 5


class VerdictStatus(StrEnum):
    PASSED = "Passed"
    FAILED = "Failed"
    ERROR = "Error"


Outcome = Literal["pass", "fail", "unmeasured", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class CheckResult(_Model):
    """One threshold against its metric."""

    key: str
    label: str
    value: float | None
    threshold: float
    op: Literal[">=", "<="]
    outcome: Outcome
    worst_prompts: list[str]
    message: str


class Regression(_Model):
    """One metric against the last passing check."""

    metric: str
    previous: float | None
    current: float | None
    bound: float | None
    allowed: float
    regressed: bool
    message: str


class Verdict(_Model):
    status: VerdictStatus
    reasons: list[str]
    checks: list[CheckResult]
    warnings: list[str]
    regressions: list[Regression]


@dataclass(frozen=True)
class _Check:
    field: str
    label: str
    op: Literal[">=", "<="]
    value: Callable[[ParityMetrics], float | None]
    worst: Callable[[Sequence[PromptSummary]], list[str]]
    skippable: bool = False
    """None means 'does not apply to this suite' (no long prompts), not 'not measured'."""


def _rate(rate: Rate | None) -> float | None:
    return None if rate is None else rate.value


def _legit(m: ParityMetrics) -> float | None:
    rate = m.tokens.legitimate_divergence_rate
    if rate is None:
        return None
    return 1.0 if rate.total == 0 else rate.value


def _worst(
    key: Callable[[PromptSummary], float | None],
    describe: Callable[[PromptSummary], str],
    *,
    highest: bool,
) -> Callable[[Sequence[PromptSummary]], list[str]]:
    def pick(prompts: Sequence[PromptSummary]) -> list[str]:
        scored = [(key(p), p) for p in prompts]
        kept = [(v, p) for v, p in scored if v is not None and math.isfinite(v)]
        kept.sort(key=lambda vp: vp[0], reverse=highest)
        return [f"{p.prompt_id} ({describe(p)})" for _, p in kept[:WORST_LISTED]]

    return pick


def _forked(prompts: Sequence[PromptSummary]) -> list[str]:
    diverged = sorted(
        (p for p in prompts if p.first_divergence is not None),
        key=lambda p: p.first_divergence or 0,
    )
    return [f"{p.prompt_id} (forks at {p.first_divergence})" for p in diverged[:WORST_LISTED]]


def _illegitimate(prompts: Sequence[PromptSummary]) -> list[str]:
    bad = [p for p in prompts if p.legitimate is False]
    return [f"{p.prompt_id} ({p.legitimacy_note})" for p in bad[:WORST_LISTED]]


def _long(prompts: Sequence[PromptSummary]) -> list[str]:
    bad = [p for p in prompts if p.long_failures]
    return [f"{p.prompt_id} ({'; '.join(p.long_failures)})" for p in bad[:WORST_LISTED]]


_CHECKS: tuple[_Check, ...] = (
    _Check("min_token_match_rate", "token match rate", ">=", lambda m: m.tokens.match_rate.value,
           _forked),
    _Check("min_token_agreement", "token agreement", ">=", lambda m: m.tokens.agreement.value,
           _forked),
    _Check("min_first_divergence_p10", "first divergence P10", ">=",
           lambda m: float(m.tokens.first_divergence.p10), _forked),
    _Check("min_legitimate_divergence_rate", "legitimate divergence rate", ">=", _legit,
           _illegitimate),
    _Check("max_mean_kl", "mean KL (nats)", "<=",
           lambda m: None if m.logprobs is None else m.logprobs.mean_kl.value,
           _worst(lambda p: p.mean_kl, lambda p: f"mean KL {p.mean_kl:.3g}", highest=True)),
    _Check("min_same_top_rate", "same-top-token rate", ">=",
           lambda m: None if m.logprobs is None else m.logprobs.same_top_rate.value,
           _worst(lambda p: p.same_top_rate, lambda p: f"same top {p.same_top_rate:.4f}",
                  highest=False)),
    _Check("max_hidden_max_abs_err", "hidden max abs error", "<=",
           lambda m: None if m.hidden is None else m.hidden.max_abs_err,
           _worst(lambda p: p.hidden_max_abs_err,
                  lambda p: f"max abs {p.hidden_max_abs_err:.3g}", highest=True)),
    _Check("max_hidden_mean_abs_err", "hidden mean abs error", "<=",
           lambda m: None if m.hidden is None else m.hidden.mean_abs_err.value,
           _worst(lambda p: p.hidden_max_abs_err,
                  lambda p: f"max abs {p.hidden_max_abs_err:.3g}", highest=True)),
    _Check("max_hidden_rel_l2_p99", "hidden relative L2 P99", "<=",
           lambda m: None if m.hidden is None else m.hidden.rel_l2_p99,
           _worst(lambda p: p.hidden_rel_l2_p99,
                  lambda p: f"relL2 P99 {p.hidden_rel_l2_p99:.3g}", highest=True)),
    _Check("min_hidden_cosine_p1", "hidden cosine P1", ">=",
           lambda m: None if m.hidden is None else m.hidden.cosine_p1,
           _worst(lambda p: p.hidden_cosine_p1,
                  lambda p: f"cosine P1 {p.hidden_cosine_p1:.6f}", highest=False)),
    _Check("max_long_seq_divergence_rate", "long-sequence divergence rate", "<=",
           lambda m: _rate(m.long_sequence.divergence_rate), _long, skippable=True),
    _Check("max_long_to_short_kl_ratio", "KL ratio 8K+ / 0-1K", "<=",
           lambda m: m.long_sequence.kl_ratio, _long, skippable=True),
    _Check("max_long_same_top_drop", "same-top drop 0-1K -> 8K+", "<=",
           lambda m: m.long_sequence.same_top_drop, _long, skippable=True),
)  # fmt: skip


def _key(field: str) -> str:
    return to_camel(field)


def evaluate_checks(
    metrics: ParityMetrics, prompts: Sequence[PromptSummary], thresholds: Thresholds
) -> list[CheckResult]:
    """Every threshold that is set, against its metric."""
    results = []
    for check in _CHECKS:
        limit = getattr(thresholds, check.field)
        if limit is None:
            continue
        value = check.value(metrics)
        key = _key(check.field)
        outcome: Outcome
        worst: list[str] = []
        if value is None:
            outcome = "skipped" if check.skippable else "unmeasured"
            why = (
                "does not apply (no long prompts or empty bucket)"
                if check.skippable
                else "was not measured (the records lack what it needs)"
            )
            message = f"{key}: {check.label} {why}"
        else:
            censored = (
                check.field == "min_first_divergence_p10"
                and metrics.tokens.first_divergence.p10_censored
            )
            # A censored P10 means fewer than 10% forked within what was generated.
            ok = censored or (value >= limit if check.op == ">=" else value <= limit)
            outcome = "pass" if ok else "fail"
            shown = ("≥ " if censored else "") + f"{value:.6g}"
            op = check.op if ok else ("<" if check.op == ">=" else ">")
            message = f"{key}: {check.label} {shown} {op} {limit:.6g}"
            if not ok:
                worst = check.worst(prompts)
                if worst:
                    message += f"; worst prompts: {', '.join(worst)}"
        results.append(
            CheckResult(
                key=key,
                label=check.label,
                value=value,
                threshold=limit,
                op=check.op,
                outcome=outcome,
                worst_prompts=worst,
                message=message,
            )
        )
    return results


def check_regression(
    current: ParityMetrics, previous: ParityMetrics, tolerance: RegressionTolerance
) -> list[Regression]:
    """Compare with the last passing check; a metric regresses only past its bound."""
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
        _, high = newcombe_difference(
            now.successes, now.total, before.successes, before.total, tolerance.confidence
        )
        regressed = high < -allowed
        found.append(Regression(
            metric=label, previous=before.value, current=now.value, bound=high, allowed=allowed,
            regressed=regressed,
            message=(f"{label} fell from {before.value:.4f} to {now.value:.4f}; the "
                     f"{tolerance.confidence:.0%} upper bound of the change is {high:+.4f}, "
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
    z = z_score(tolerance.confidence)
    for label, now_mean, before_mean, allowed in means:
        if allowed is None or now_mean is None or before_mean is None:
            continue
        if now_mean.value is None or before_mean.value is None:
            continue
        increase = now_mean.value - before_mean.value
        spread = math.hypot(now_mean.stderr or math.inf, before_mean.stderr or 0.0)
        low = increase - z * spread if math.isfinite(spread) else -math.inf
        found.append(Regression(
            metric=label, previous=before_mean.value, current=now_mean.value,
            bound=low if math.isfinite(low) else None, allowed=allowed, regressed=low > allowed,
            message=(f"{label} rose from {before_mean.value:.4g} to {now_mean.value:.4g}; the "
                     f"{tolerance.confidence:.0%} lower bound of the rise is "
                     f"{low:+.4g}, allowed +{allowed:.4g}"),
        ))  # fmt: skip
    return found


def decide(
    result: ParityResult,
    warn: Thresholds | None = None,
    previous: ParityMetrics | None = None,
    tolerance: RegressionTolerance | None = None,
) -> Verdict:
    """The verdict of a measured result against its thresholds (and the last passing one)."""
    checks = evaluate_checks(result.metrics, result.prompts, result.thresholds)
    regressions = (
        check_regression(result.metrics, previous, tolerance or RegressionTolerance())
        if previous is not None
        else []
    )
    hygiene_error = [h for h in result.hygiene if h.severity == "Error"]
    hygiene_fail = [h for h in result.hygiene if h.severity == "Failed"]
    failed = [c for c in checks if c.outcome == "fail"]
    unmeasured = [c for c in checks if c.outcome == "unmeasured"]
    regressed = [r for r in regressions if r.regressed]

    if result.errors or hygiene_error:
        status = VerdictStatus.ERROR
        reasons = list(result.errors) + [_hygiene_reason(h) for h in hygiene_error]
    elif failed or hygiene_fail or regressed:
        status = VerdictStatus.FAILED
        reasons = (
            [_hygiene_reason(h) for h in hygiene_fail]
            + [c.message for c in failed]
            + [f"regression: {r.message}" for r in regressed]
        )
    elif unmeasured:
        status = VerdictStatus.ERROR
        reasons = [c.message for c in unmeasured]
    else:
        status = VerdictStatus.PASSED
        reasons = []
    warnings = []
    if warn is not None:
        blocking = {c.key for c in failed}
        warnings = [
            c.message.replace(": ", " (warn): ", 1)
            for c in evaluate_checks(result.metrics, result.prompts, warn)
            if c.outcome == "fail" and c.key not in blocking
        ]
    return Verdict(
        status=status, reasons=reasons, checks=checks, warnings=warnings, regressions=regressions
    )


def _hygiene_reason(finding: HygieneFinding) -> str:
    ids = finding.prompt_ids
    where = f" in prompts {', '.join(ids[:WORST_LISTED])}" if ids else ""
    more = f" and {len(ids) - WORST_LISTED} more" if len(ids) > WORST_LISTED else ""
    return f"hygiene {finding.check.value} ({finding.side}): {finding.detail}{where}{more}"
