"""Each threshold against the bounds of its metric: pass, fail or inconclusive.

How a threshold is decided (every bound one-sided at `confidence`, default 0.95):

- `<=` limit: pass if the upper bound <= limit; fail if the lower bound > limit;
- `>=` limit: pass if the lower bound >= limit; fail if the upper bound < limit;
- `|<=|` limit (signed metrics, either direction is harm): pass if the interval lies
  within [-limit, limit]; fail if it lies wholly outside;
- a limit at the end of its range (a rate of 1, an error or KL of 0, a cosine of 1)
  cannot be certified by a bound: it is decided on what was observed, so any violation
  fails and none passes (the strict profile's bit-exactness);
- otherwise Inconclusive, naming the metric, its bounds and the limit.

A check the profile sets but that is switched off, or that needs what this check does
not measure (hidden states when hiddenStates.enabled is false, long prompts when the
profile requires none), is not part of the verdict, and the result says so.

Every message names the threshold key, the measured value, its bounds, the limit and the
worst prompts behind it. The profile's minimum evidence is checked here too
(`evidence_checks`); `verdict.decide` weighs the outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field
from pydantic.alias_generators import to_camel

from infergate.parity.metrics import Estimate, ParityMetrics, PromptSummary
from infergate.parity.profiles import LONG_KEYS
from infergate.parity.thresholds import Thresholds
from infergate.parity.wire import WireModel

WORST_LISTED = 5
"""Prompts named behind a failed check (and a hygiene finding)."""

Outcome = Literal["pass", "fail", "inconclusive", "unmeasured", "disabled", "not-required"]
Op = Literal[">=", "<=", "|<=|"]


class CheckResult(WireModel):
    """One threshold against its metric."""

    key: str
    label: str
    value: float | None
    threshold: float | None
    op: Op
    outcome: Outcome
    worst_prompts: list[str]
    message: str
    lower: float | None = Field(default=None, description="One-sided lower bound decided on.")
    upper: float | None = Field(default=None, description="One-sided upper bound decided on.")
    method: str | None = Field(default=None, description="How the bounds were found.")


@dataclass(frozen=True)
class _Check:
    field: str
    label: str
    op: Op
    metric: str
    """Key of ParityMetrics.estimates the check decides on."""
    worst: Callable[[Sequence[PromptSummary]], list[str]]


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


def _unexplained(prompts: Sequence[PromptSummary]) -> list[str]:
    bad = sorted(
        (p for p in prompts if p.fork_explained is False),
        key=lambda p: p.first_divergence or 0,
    )
    return [
        f"{p.prompt_id} (forks at {p.first_divergence}: {p.legitimacy_note})"
        for p in bad[:WORST_LISTED]
    ]


def _long(prompts: Sequence[PromptSummary]) -> list[str]:
    bad = [p for p in prompts if p.long_failures]
    return [f"{p.prompt_id} ({'; '.join(p.long_failures)})" for p in bad[:WORST_LISTED]]


def _longest(prompts: Sequence[PromptSummary]) -> list[str]:
    long = sorted((p for p in prompts if p.long), key=lambda p: -p.prompt_tokens)
    return [f"{p.prompt_id} ({p.prompt_tokens} tokens)" for p in long[:WORST_LISTED]]


_KL = _worst(lambda p: p.mean_kl, lambda p: f"mean KL {p.mean_kl:.3g}", highest=True)
_DELTA = _worst(
    lambda p: abs(p.target_logprob_delta) if p.target_logprob_delta is not None else None,
    lambda p: f"target logprob delta {p.target_logprob_delta:+.3g}",
    highest=True,
)
_NORM = _worst(
    lambda p: p.norm_abs_log_ratio,
    lambda p: f"|log norm ratio| {p.norm_abs_log_ratio:.3g}",
    highest=True,
)
_MAX_ABS = _worst(
    lambda p: p.hidden_max_abs_err, lambda p: f"max abs {p.hidden_max_abs_err:.3g}", highest=True
)
_REL = _worst(
    lambda p: p.hidden_rel_l2_p99, lambda p: f"relL2 P99 {p.hidden_rel_l2_p99:.3g}", highest=True
)
_COS_P1 = _worst(
    lambda p: p.hidden_cosine_p1, lambda p: f"cosine P1 {p.hidden_cosine_p1:.6f}", highest=False
)
_COS_MIN = _worst(
    lambda p: p.hidden_cosine_min, lambda p: f"cosine min {p.hidden_cosine_min:.6f}", highest=False
)
_SAME = _worst(
    lambda p: p.same_top_rate, lambda p: f"same top {p.same_top_rate:.4f}", highest=False
)

_CHECKS: tuple[_Check, ...] = (
    _Check("min_token_match_rate", "token match rate", ">=", "tokenMatchRate", _forked),
    _Check("min_token_agreement", "token agreement", ">=", "tokenAgreement", _forked),
    _Check("min_first_divergence_p10", "first unexplained divergence P10", ">=", "earlyForkRate",
           _unexplained),
    _Check("min_legitimate_divergence_rate", "legitimate divergence rate", ">=",
           "legitimateDivergenceRate", _unexplained),
    _Check("max_illegitimate_divergence_rate", "unexplained fork rate", "<=",
           "illegitimateDivergenceRate", _unexplained),
    _Check("max_mean_kl", "mean KL (nats)", "<=", "meanKl", _KL),
    _Check("max_kl_p99", "KL P99 (nats)", "<=", "klP99", _KL),
    _Check("min_same_top_rate", "same-top-token rate", ">=", "sameTopRate", _SAME),
    _Check("max_log_perplexity_ratio", "log perplexity ratio", "|<=|", "logPerplexityRatio",
           _DELTA),
    _Check("max_delta_p_mean", "mean delta-p", "|<=|", "deltaPMean", _DELTA),
    _Check("max_delta_p_rms", "delta-p RMS", "<=", "deltaPRms", _DELTA),
    _Check("max_hidden_norm_log_ratio", "hidden |log norm ratio|", "<=", "hiddenNormAbsLogRatio",
           _NORM),
    _Check("max_hidden_max_abs_err", "hidden max abs error", "<=", "hiddenMaxAbsErr", _MAX_ABS),
    _Check("max_hidden_mean_abs_err", "hidden mean abs error", "<=", "hiddenMeanAbsErr",
           _MAX_ABS),
    _Check("max_hidden_rel_l2_p99", "hidden relative L2 P99", "<=", "hiddenRelL2P99", _REL),
    _Check("min_hidden_cosine_p1", "hidden cosine P1", ">=", "hiddenCosineP1", _COS_P1),
    _Check("min_hidden_cosine", "hidden cosine min", ">=", "hiddenCosineMin", _COS_MIN),
    _Check("max_long_seq_divergence_rate", "long-sequence failure rate", "<=",
           "longSeqDivergenceRate", _long),
    _Check("max_long_to_short_kl_ratio", "KL ratio far / 0-1K, per long prompt", "<=",
           "longToShortKlRatio", _longest),
    _Check("max_long_same_top_drop", "same-top drop 0-1K -> 4K+, long prompts", "<=",
           "longSameTopDrop", _longest),
    _Check("max_long_to_short_hidden_ratio", "hidden relL2 ratio far / 0-1K, per long prompt",
           "<=", "longToShortHiddenRatio", _longest),
    _Check("max_decode_self_delta", "candidate decode vs own prefill, mean |logprob delta|",
           "<=", "decodeSelfDelta", lambda _: []),
    _Check("max_decode_excess", "decode minus prefill cross |logprob delta|", "<=",
           "decodeExcess", lambda _: []),
)  # fmt: skip

DECODE_KEYS: tuple[str, ...] = ("max_decode_self_delta", "max_decode_excess")
"""Thresholds judged on the decode path (`parity.decode`)."""

_EARLY_FORK_SHARE = 0.10
"""P10 >= L means at most 10% of prompts fork (unexplained) before L output tokens."""


def _key(field: str) -> str:
    return to_camel(field)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _at_range_end(check: _Check, limit: float) -> bool:
    """Whether a limit sits at the end of its metric's range (decided on what is observed)."""
    if check.op in {"<=", "|<=|"}:
        return limit == 0.0
    return limit == 1.0


def _decide(check: _Check, limit: float, estimate: Estimate) -> Outcome:  # noqa: PLR0911
    value, low, high = estimate.value, estimate.lower, estimate.upper
    if value is None:
        return "inconclusive"
    if _at_range_end(check, limit):
        ok = abs(value) <= limit if check.op != ">=" else value >= limit
        return "pass" if ok else "fail"
    if check.op == "<=":
        if high is not None and high <= limit:
            return "pass"
        return "fail" if low is not None and low > limit else "inconclusive"
    if check.op == ">=":
        if low is not None and low >= limit:
            return "pass"
        return "fail" if high is not None and high < limit else "inconclusive"
    if low is not None and high is not None and -limit <= low and high <= limit:
        return "pass"
    if (low is not None and low > limit) or (high is not None and high < -limit):
        return "fail"
    return "inconclusive"


def evaluate_checks(
    metrics: ParityMetrics,
    prompts: Sequence[PromptSummary],
    thresholds: Thresholds,
    disabled: dict[str, str] | None = None,
) -> list[CheckResult]:
    """Every threshold that is set, against the bounds of its metric; disabled ones listed."""
    confidence = metrics.confidence
    results: list[CheckResult] = []
    disabled = dict(disabled or {})
    long_prompts = metrics.long_sequence.prompts
    for check in _CHECKS:
        key = _key(check.field)
        limit = getattr(thresholds, check.field)
        if limit is None:
            if key in disabled:
                results.append(_excluded(check, key, "disabled", disabled[key]))
            continue
        if check.field in LONG_KEYS and long_prompts == 0:
            results.append(_no_long(check, key, limit, thresholds))
            continue
        if check.field == "min_first_divergence_p10":
            results.append(_p10(check, key, limit, metrics, prompts=prompts, confidence=confidence))
            continue
        estimate = metrics.estimates.get(check.metric)
        if check.field in DECODE_KEYS and (estimate is None or estimate.value is None):
            results.append(_no_decode(check, key, limit, thresholds))
            continue
        if estimate is None or (estimate.value is None and estimate.evidence == 0):
            results.append(
                CheckResult(
                    key=key, label=check.label, value=None, threshold=limit, op=check.op,
                    outcome="unmeasured", worst_prompts=[],
                    message=f"{key}: {check.label} was not measured (the records lack what it "
                    "needs)",
                )
            )  # fmt: skip
            continue
        outcome = _decide(check, limit, estimate)
        results.append(
            _result(
                check, key, limit, estimate, outcome=outcome, prompts=prompts,
                confidence=confidence,
            )
        )  # fmt: skip
    return results


def _result(
    check: _Check,
    key: str,
    limit: float,
    estimate: Estimate,
    *,
    outcome: Outcome,
    prompts: Sequence[PromptSummary],
    confidence: float,
) -> CheckResult:
    value = estimate.value
    level = f"{confidence:.0%}"
    bound_text = ""
    if estimate.method == "observed" or _at_range_end(check, limit):
        bound_text = " (as observed)"
    elif estimate.lower is not None or estimate.upper is not None:
        bound_text = (
            f" ({level} bounds {_num(estimate.lower)} .. {_num(estimate.upper)}, "
            f"{estimate.method} over {estimate.evidence} {estimate.unit})"
        )
    else:
        bound_text = f" (no bound: {estimate.evidence} {estimate.unit})"
    shown = check.op.replace("|<=|", "|x| <=")
    if value is None:
        message = f"{key}: {check.label} has no value yet ({estimate.evidence} {estimate.unit})"
    elif outcome == "pass":
        message = f"{key}: {check.label} {value:.6g}{bound_text} {shown} {limit:.6g}"
    elif outcome == "fail":
        past = {">=": "<", "<=": ">", "|<=|": "outside ±"}[check.op]
        message = f"{key}: {check.label} {value:.6g}{bound_text} {past} {limit:.6g}"
    else:
        message = (
            f"{key}: {check.label} {value:.6g}{bound_text} straddles the limit {limit:.6g}; "
            "more prompts would decide"
        )
    worst: list[str] = []
    if outcome == "fail" and value is not None:
        worst = check.worst(prompts)
        if worst:
            message += f"; worst prompts: {', '.join(worst)}"
    return CheckResult(
        key=key, label=check.label, value=value, threshold=limit, op=check.op, outcome=outcome,
        worst_prompts=worst, message=message, lower=estimate.lower, upper=estimate.upper,
        method=estimate.method,
    )  # fmt: skip


def _p10(
    check: _Check,
    key: str,
    limit: float,
    metrics: ParityMetrics,
    *,
    prompts: Sequence[PromptSummary],
    confidence: float,
) -> CheckResult:
    """P10 >= L, decided as: at most 10% of prompts fork (unexplained) before L tokens."""
    fd = metrics.tokens.first_divergence
    shown = f"{'≥ ' if fd.p10_censored else ''}{fd.p10}"
    rate = metrics.estimates.get("earlyForkRate")
    if rate is None or rate.value is None:
        return CheckResult(
            key=key, label=check.label, value=float(fd.p10), threshold=limit, op=">=",
            outcome="inconclusive", worst_prompts=[],
            message=f"{key}: no prompt was generated to {limit:g} output tokens; the 10th "
            "percentile of the first unexplained divergence cannot be judged (raise maxTokens)",
        )  # fmt: skip
    rule = _Check(check.field, check.label, "<=", check.metric, check.worst)
    outcome = _decide(rule, _EARLY_FORK_SHARE, rate)
    early = round((rate.value or 0.0) * rate.evidence)
    detail = (
        f"{early} of {rate.evidence} prompts fork unexplained before {limit:g} tokens "
        f"(share {confidence:.0%} bounds {_num(rate.lower)} .. {_num(rate.upper)} against "
        f"{_EARLY_FORK_SHARE:g})"
    )
    verb = {"pass": ">=", "fail": "<", "inconclusive": "straddles"}[outcome]
    message = f"{key}: {check.label} {shown} {verb} {limit:g}: {detail}"
    worst = check.worst(prompts) if outcome != "pass" else []
    if worst:
        message += f"; worst prompts: {', '.join(worst)}"
    return CheckResult(
        key=key, label=check.label, value=float(fd.p10), threshold=limit, op=">=",
        outcome=outcome, worst_prompts=worst, message=message, lower=rate.lower,
        upper=rate.upper, method="wilson (share forking early)",
    )  # fmt: skip


def _no_long(check: _Check, key: str, limit: float, thresholds: Thresholds) -> CheckResult:
    if thresholds.min_long_prompts == 0:
        return _excluded(
            check, key, "not-required",
            "no long prompts in the suite, and the profile requires none (minLongPrompts 0)",
            limit,
        )  # fmt: skip
    return CheckResult(
        key=key, label=check.label, value=None, threshold=limit, op=check.op,
        outcome="inconclusive", worst_prompts=[],
        message=f"{key}: {check.label} needs long prompts (of "
        f"{thresholds.long_prompt_tokens or 8192}+ tokens); the suite has none",
    )  # fmt: skip


def _no_decode(check: _Check, key: str, limit: float, thresholds: Thresholds) -> CheckResult:
    why = (
        "no decode evidence: no generated step before the first fork had its logprob in both "
        "sides' generation top-k and in the candidate's own prefill scoring"
    )
    if not thresholds.require_decode_evidence:
        return _excluded(
            check, key, "not-required", f"{why}, and the profile does not require it", limit
        )
    return CheckResult(
        key=key, label=check.label, value=None, threshold=limit, op=check.op,
        outcome="inconclusive", worst_prompts=[],
        message=f"{key}: {check.label} cannot be judged: {why} (requireDecodeEvidence)",
    )  # fmt: skip


def _excluded(
    check: _Check, key: str, outcome: Outcome, why: str, limit: float | None = None
) -> CheckResult:
    return CheckResult(
        key=key, label=check.label, value=None, threshold=limit,
        op=check.op, outcome=outcome, worst_prompts=[],
        message=f"{key}: {check.label} is not part of this verdict: {why}",
    )  # fmt: skip


def evidence_checks(metrics: ParityMetrics, thresholds: Thresholds) -> list[CheckResult]:
    """The profile's minimum evidence against what the comparison rests on."""
    evidence = metrics.evidence
    if evidence is None:
        return []
    long_tokens = thresholds.long_prompt_tokens or 8192
    rows = (
        ("min_prompts", "prompts compared", evidence.prompts, "prompts"),
        ("min_long_prompts", "long prompts compared", evidence.long_prompts,
         f"long prompts (of {long_tokens}+ tokens)"),
        ("min_scored_steps", "teacher-forced positions scored", evidence.scored_steps,
         "scored teacher-forced steps"),
    )  # fmt: skip
    out = []
    for field, label, have, unit in rows:
        need = getattr(thresholds, field)
        if need is None or need == 0:
            continue
        ok = have >= need
        out.append(
            CheckResult(
                key=_key(field), label=label, value=float(have), threshold=float(need), op=">=",
                outcome="pass" if ok else "inconclusive", worst_prompts=[],
                message=f"{have} of {need} {unit}" + ("" if ok else " needed"),
            )
        )  # fmt: skip
    return out
