"""The runner's report of a verdict: what the core measured, as the check's status says it.

`judgement` turns a parity result and its verdict into the plain `Judgement` that
`infergate.plan.check.status` writes: the headline metrics (finite values only: JSON
has no NaN), one structured reason per limit passed, evidence missing or thing not
measured, and a summary line. Pure, but it reads the numeric core's types, so it
lives with the runner: the operator never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from infergate.api.check_status import Comparison, VerdictReason
from infergate.api.enums import CheckPhase
from infergate.parity.checks import CheckResult
from infergate.parity.metrics import HygieneFinding, ParityMetrics, ParityResult
from infergate.parity.verdict import Verdict, VerdictStatus, unproven_reasons
from infergate.plan.check.status import MESSAGE_MAX, Judgement

_REASON_PROMPTS_MAX = 100


def judgement(result: ParityResult, verdict: Verdict, profile: str) -> Judgement:
    """What the check's status says about this verdict."""
    summary = _summary(verdict, result, profile)
    detail = summary if not verdict.reasons else f"{summary}: " + "; ".join(verdict.reasons)
    return Judgement(
        phase=CheckPhase(verdict.status.value),
        summary=summary,
        reasons=verdict_reasons(result, verdict),
        detail=detail,
        profile=profile,
        metrics=headline_metrics(result.metrics),
        warnings=list(verdict.warnings),
    )


def headline_metrics(metrics: ParityMetrics) -> dict[str, float]:
    """The suite-level figures shown in status (finite values only), by camelCase name."""
    tokens, logprobs, hidden, long = (
        metrics.tokens,
        metrics.logprobs,
        metrics.hidden,
        metrics.long_sequence,
    )
    fd = tokens.first_divergence
    values: dict[str, float | int | None] = {
        "prompts": metrics.prompts,
        "tokenMatchRate": tokens.match_rate.value,
        "tokenMatchRateLow": tokens.match_rate.low,
        "tokenAgreement": tokens.agreement.value,
        "divergedPrompts": fd.diverged,
        "firstDivergenceMedian": fd.median,
        "firstDivergenceP10": fd.p10,
        "legitimateDivergenceRate": (
            tokens.legitimate_divergence_rate.value if tokens.legitimate_divergence_rate else None
        ),
        "divergenceLogprobGapMax": tokens.divergence_logprob_gap_max,
    }
    if logprobs is not None:
        values |= {
            "meanKl": logprobs.mean_kl.value,
            "klP99": logprobs.kl_p99,
            "klMax": logprobs.kl_max,
            "sameTopRate": logprobs.same_top_rate.value,
            "deltaPRms": logprobs.delta_p_rms,
            "teacherForcedSteps": logprobs.steps,
        }
    if hidden is not None:
        values |= {
            "hiddenTokens": hidden.tokens,
            "hiddenMaxAbsErr": hidden.max_abs_err,
            "hiddenMeanAbsErr": hidden.mean_abs_err.value,
            "hiddenRelL2Mean": hidden.rel_l2.value,
            "hiddenRelL2P99": hidden.rel_l2_p99,
            "hiddenCosineMean": hidden.cosine.value,
            "hiddenCosineP1": hidden.cosine_p1,
            "hiddenCosineMin": hidden.cosine_min,
        }
    if long.prompts:
        values |= {
            "longPrompts": long.prompts,
            "longSeqDivergenceRate": long.divergence_rate.value if long.divergence_rate else None,
            "longToShortKlRatio": long.kl_ratio,
            "longSameTopDrop": long.same_top_drop,
        }
    return {
        key: float(value)
        for key, value in values.items()
        if value is not None and math.isfinite(float(value))
    }


def _prompt_ids(worst: Iterable[str]) -> list[str]:
    # Worst-prompt entries read "<id> (<why>)"; prompt ids never contain spaces.
    return [entry.split(" (", 1)[0] for entry in worst][:_REASON_PROMPTS_MAX]


def _comparison(op: str) -> Comparison:
    return Comparison.AT_LEAST if op == ">=" else Comparison.AT_MOST


def verdict_reasons(result: ParityResult, verdict: Verdict) -> list[VerdictReason]:
    """The structured reasons behind a verdict, in the order `parity.verdict.decide` gives."""
    hygiene_errors = [h for h in result.hygiene if h.severity == "Error"]
    if verdict.status is VerdictStatus.ERROR and (result.errors or hygiene_errors):
        return [
            VerdictReason(metric="measurement", message=e[:MESSAGE_MAX]) for e in result.errors
        ] + [_hygiene_reason(h) for h in hygiene_errors]
    if verdict.status is VerdictStatus.ERROR:
        return [_check_reason(c) for c in verdict.checks if c.outcome == "unmeasured"]
    if verdict.status is VerdictStatus.PASSED:
        return []
    if verdict.status is VerdictStatus.INCONCLUSIVE:
        # What more is needed: what could not be verified (a side without fingerprints),
        # the evidence short of the profile's minimum, then each metric whose confidence
        # interval straddles its limit.
        unverified = [
            VerdictReason(metric="fingerprints", message=u[:MESSAGE_MAX]) for u in result.unverified
        ]
        # Then what else keeps a clean comparison from passing (an unseen positive
        # control, a missing calibration), as `decide` found it.
        return (
            unverified
            + [_check_reason(c) for c in verdict.checks if c.outcome == "inconclusive"]
            + [
                VerdictReason(metric=metric, message=message[:MESSAGE_MAX])
                for metric, message in unproven_reasons(result).items()
            ]
        )
    reasons = [_hygiene_reason(h) for h in result.hygiene if h.severity == "Failed"]
    reasons += [_check_reason(c) for c in verdict.checks if c.outcome == "fail"]
    reasons += [
        VerdictReason(
            metric=f"regression.{r.metric}",
            value=r.current,
            threshold=r.allowed,
            message=f"regression: {r.message}",
        )
        for r in verdict.regressions
        if r.regressed
    ]
    return reasons


def _hygiene_reason(finding: HygieneFinding) -> VerdictReason:
    return VerdictReason(
        metric=f"hygiene.{finding.check.value}",
        prompts=finding.prompt_ids[:_REASON_PROMPTS_MAX],
        message=f"hygiene {finding.check.value} ({finding.side}): {finding.detail}"[:MESSAGE_MAX],
    )


def _check_reason(check: CheckResult) -> VerdictReason:
    value = check.value if check.value is not None and math.isfinite(check.value) else None
    return VerdictReason(
        metric=check.key,
        value=value,
        threshold=check.threshold,
        comparison=_comparison(check.op),
        prompts=_prompt_ids(check.worst_prompts),
        message=check.message[:MESSAGE_MAX],
    )


def _summary(verdict: Verdict, result: ParityResult, profile: str) -> str:
    m = result.metrics
    parts = [f"{verdict.status.value} under profile {profile}: {m.prompts} prompts"]
    if m.tokens.match_rate.value is not None:
        parts.append(f"token match {m.tokens.match_rate.value:.3f}")
    if m.logprobs is not None and m.logprobs.mean_kl.value is not None:
        parts.append(f"mean KL {m.logprobs.mean_kl.value:.3g}")
    if m.hidden is not None and m.hidden.cosine_p1 is not None:
        parts.append(f"hidden cosine P1 {m.hidden.cosine_p1:.6f}")
    return ", ".join(parts)
