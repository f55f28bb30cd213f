"""From a parity result and its verdict to the ParityCheck status (pure).

The runner writes what it measured; the controller writes `Error` when the runner
could not (a crash, a deadline, an unreachable endpoint). Both build their status
through this module, so a check reads the same whoever ended it:

- `phase`: Passed, Failed or Error; never Passed without a measured verdict;
- `verdict.reasons`: one entry per limit passed or thing not measured, naming the
  metric, its value, the limit, the comparison and the worst prompts;
- `metrics`: the headline figures (finite values only: JSON has no NaN);
- `conditions`: Complete, Passed, Failed and Error, shaped like metav1.Condition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from infergate.api.check_status import Comparison, VerdictReason
from infergate.api.check_status import Verdict as StatusVerdict
from infergate.api.common import Condition, ConfigMapKeyReference
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.parity.metrics import HygieneFinding, ParityMetrics, ParityResult
from infergate.parity.verdict import CheckResult, Verdict, VerdictStatus

TERMINAL_PHASES = frozenset({CheckPhase.PASSED, CheckPhase.FAILED, CheckPhase.ERROR})

# Condition types and reasons (one CamelCase word each).
COND_COMPLETE = "Complete"
COND_PASSED = "Passed"
COND_FAILED = "Failed"
COND_ERROR = "Error"
COND_RUNNER_ERROR = "RunnerError"
REASON_PASSED = "ParityPassed"
REASON_FAILED = "ParityFailed"
REASON_MEASUREMENT = "CouldNotMeasure"
REASON_PENDING = "WaitingForSides"
REASON_RUNNING = "RunnerRunning"
REASON_RECOVERED = "Recovered"
REASON_DEADLINE = "DeadlineExceeded"
REASON_RUNNER_FAILED = "RunnerFailed"
REASON_SIDE_UNREACHABLE = "SideUnreachable"
REASON_INVALID = "InvalidCheck"

_MESSAGE_MAX = 32768
_REASON_PROMPTS_MAX = 100
_OUTCOMES = {
    VerdictStatus.PASSED: (CheckPhase.PASSED, VerdictOutcome.PASSED),
    VerdictStatus.FAILED: (CheckPhase.FAILED, VerdictOutcome.FAILED),
    VerdictStatus.ERROR: (CheckPhase.ERROR, VerdictOutcome.ERROR),
    # Until the controller and planner treat CheckPhase.INCONCLUSIVE as terminal, an
    # Inconclusive verdict ends the check in phase Error with outcome Inconclusive (which
    # plan.rollout.verdict_of already reads as Inconclusive: never promoted).
    VerdictStatus.INCONCLUSIVE: (CheckPhase.ERROR, VerdictOutcome.INCONCLUSIVE),
}


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def is_terminal(phase: str | None) -> bool:
    return phase in {p.value for p in TERMINAL_PHASES}


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int | None,
    at: datetime,
) -> list[dict[str, Any]]:
    """`conditions` with one condition set; lastTransitionTime moves only when status flips."""
    previous = next((c for c in conditions if c.get("type") == type_), None)
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message[:_MESSAGE_MAX],
        observed_generation=generation,
        last_transition_time=at,
    ).to_kube()
    if previous is not None and previous.get("status") == status.value:
        new["lastTransitionTime"] = previous.get("lastTransitionTime", new["lastTransitionTime"])
    return [dict(c) for c in conditions if c.get("type") != type_] + [new]


def terminal_conditions(
    conditions: Sequence[Mapping[str, Any]],
    phase: CheckPhase,
    reason: str,
    message: str,
    *,
    generation: int | None,
    at: datetime,
) -> list[dict[str, Any]]:
    """Complete=True plus Passed/Failed/Error set to say which one this check ended in."""
    out = set_condition(
        conditions, COND_COMPLETE, ConditionStatus.TRUE, reason, message,
        generation=generation, at=at,
    )  # fmt: skip
    for type_, matches in (
        (COND_PASSED, phase is CheckPhase.PASSED),
        (COND_FAILED, phase is CheckPhase.FAILED),
        (COND_ERROR, phase is CheckPhase.ERROR),
    ):
        status = ConditionStatus.TRUE if matches else ConditionStatus.FALSE
        out = set_condition(
            out, type_, status, reason, message if matches else f"check ended {phase.value}",
            generation=generation, at=at,
        )  # fmt: skip
    runner_failed = any(
        c.get("type") == COND_RUNNER_ERROR and c.get("status") == "True" for c in out
    )
    if runner_failed and phase is not CheckPhase.ERROR:
        out = set_condition(
            out, COND_RUNNER_ERROR, ConditionStatus.FALSE, REASON_RECOVERED,
            "a later runner attempt completed the check",
            generation=generation, at=at,
        )  # fmt: skip
    return out


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
            VerdictReason(metric="measurement", message=e[:_MESSAGE_MAX]) for e in result.errors
        ] + [_hygiene_reason(h) for h in hygiene_errors]
    if verdict.status is VerdictStatus.ERROR:
        return [_check_reason(c) for c in verdict.checks if c.outcome == "unmeasured"]
    if verdict.status is VerdictStatus.PASSED:
        return []
    if verdict.status is VerdictStatus.INCONCLUSIVE:
        return [VerdictReason(metric="evidence", message=r[:_MESSAGE_MAX]) for r in verdict.reasons]
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
        message=f"hygiene {finding.check.value} ({finding.side}): {finding.detail}"[:_MESSAGE_MAX],
    )


def _check_reason(check: CheckResult) -> VerdictReason:
    value = check.value if check.value is not None and math.isfinite(check.value) else None
    return VerdictReason(
        metric=check.key,
        value=value,
        threshold=check.threshold,
        comparison=_comparison(check.op),
        prompts=_prompt_ids(check.worst_prompts),
        message=check.message[:_MESSAGE_MAX],
    )


def verdict_status(
    result: ParityResult,
    verdict: Verdict,
    *,
    profile: str,
    report: ConfigMapKeyReference | None,
    conditions: Sequence[Mapping[str, Any]],
    generation: int | None,
    at: datetime,
) -> dict[str, Any]:
    """The status fields the runner writes once it has a verdict."""
    phase, outcome = _OUTCOMES[verdict.status]
    reasons = verdict_reasons(result, verdict)
    summary = _summary(verdict, result, profile)
    status = StatusVerdict(
        passed=verdict.status is VerdictStatus.PASSED,
        outcome=outcome,
        summary=summary,
        reasons=reasons,
        warnings=[w[:4096] for w in verdict.warnings[:64]],
    )
    reason = {
        CheckPhase.PASSED: REASON_PASSED,
        CheckPhase.FAILED: REASON_FAILED,
        CheckPhase.ERROR: REASON_MEASUREMENT,
    }[phase]
    message = summary if not verdict.reasons else f"{summary}: " + "; ".join(verdict.reasons)
    fields: dict[str, Any] = {
        "phase": phase.value,
        "profile": profile,
        "completionTime": _time(at),
        "metrics": headline_metrics(result.metrics),
        "verdict": status.to_kube(),
        "conditions": terminal_conditions(
            conditions, phase, reason, message, generation=generation, at=at
        ),
    }
    if report is not None:
        fields["reportRef"] = report.to_kube()
    return fields


def error_status(
    message: str,
    reason: str,
    *,
    conditions: Sequence[Mapping[str, Any]],
    generation: int | None,
    at: datetime,
    metric: str = "runner",
) -> dict[str, Any]:
    """The status of a check that ended without a measured verdict: Error, never Passed."""
    verdict = StatusVerdict(
        passed=False,
        outcome=VerdictOutcome.ERROR,
        summary=f"Error: {message}"[:_MESSAGE_MAX],
        reasons=[VerdictReason(metric=metric, message=message[:_MESSAGE_MAX])],
    )
    return {
        "phase": CheckPhase.ERROR.value,
        "completionTime": _time(at),
        "verdict": verdict.to_kube(),
        "conditions": terminal_conditions(
            conditions, CheckPhase.ERROR, reason, message, generation=generation, at=at
        ),
    }


def runner_error_conditions(
    conditions: Sequence[Mapping[str, Any]],
    reason: str,
    message: str,
    *,
    generation: int | None,
    at: datetime,
) -> list[dict[str, Any]]:
    """Conditions after a runner attempt failed in a way a retry may fix."""
    return set_condition(
        conditions, COND_RUNNER_ERROR, ConditionStatus.TRUE, reason, message,
        generation=generation, at=at,
    )  # fmt: skip


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


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
