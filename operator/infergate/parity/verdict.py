"""From measured metrics and thresholds to a verdict: Passed, Failed, Inconclusive or Error.

- Error: the check could not measure (records incomplete or mismatched, a metric a
  threshold needs was not recorded, the baseline itself broken, the two sides not given
  the same suite or sampling). Never promotes.
- Failed: a hygiene check failed (a fingerprint differs, prompt ids differ, NaN, ...),
  a metric is significantly past its threshold (the confidence bound on the good side
  is past the limit), or a metric regressed against a comparable passing check beyond
  its bound.
- Inconclusive: not enough evidence. The suite is below the profile's minimum evidence
  (prompts, long prompts, scored steps), a metric's confidence interval straddles its
  limit, what a side ran could not be verified (no fingerprints, where the check
  requires them), no limit fails on the check's own positive control (`control`: the
  suite could not tell a known small harm from noise, so its pass would prove nothing),
  or the profile needs a calibration of the model's own noise that is not kept. Never
  promotes; the reasons say what more is needed.
- Passed: everything decided, every bound on the bad side within its limit.

How each threshold is decided on its confidence bounds: `checks`; the regression test
against the last passing check: `regression`. A check the profile sets but that is
switched off, or that needs what this check does not measure, is not part of the
verdict, and the verdict says so.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from infergate.parity.checks import WORST_LISTED, CheckResult, evaluate_checks, evidence_checks
from infergate.parity.control import control_reason
from infergate.parity.metrics import HygieneFinding, ParityMetrics, ParityResult
from infergate.parity.regression import Regression, check_regression, regression_comparable
from infergate.parity.thresholds import DEFAULT_CONFIDENCE, RegressionTolerance, Thresholds
from infergate.parity.wire import WireModel


class VerdictStatus(StrEnum):
    PASSED = "Passed"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class Verdict(WireModel):
    status: VerdictStatus
    reasons: list[str]
    checks: list[CheckResult]
    warnings: list[str]
    regressions: list[Regression]
    excluded: list[str] = Field(
        default_factory=list,
        description="Checks the profile sets that are not part of this verdict, and why; and "
        "why no regression test ran.",
    )
    confidence: float = DEFAULT_CONFIDENCE


def decide(
    result: ParityResult,
    warn: Thresholds | None = None,
    previous: ParityMetrics | None = None,
    tolerance: RegressionTolerance | None = None,
) -> Verdict:
    """The verdict of a measured result against its thresholds (and the last passing one)."""
    metrics = result.metrics
    checks = evaluate_checks(metrics, result.prompts, result.thresholds, result.disabled)
    evidence = evidence_checks(metrics, result.thresholds)
    excluded = [c.message for c in checks if c.outcome in ("disabled", "not-required")]
    regressions: list[Regression] = []
    if previous is not None:
        why_not = regression_comparable(metrics, previous)
        if why_not is None:
            regressions = check_regression(
                metrics, previous, tolerance or RegressionTolerance(), result.thresholds
            )
        else:
            excluded.append(why_not)
    hygiene_error = [h for h in result.hygiene if h.severity == "Error"]
    hygiene_fail = [h for h in result.hygiene if h.severity == "Failed"]
    failed = [c for c in checks if c.outcome == "fail"]
    unmeasured = [c for c in checks if c.outcome == "unmeasured"]
    inconclusive = [c for c in checks if c.outcome == "inconclusive"]
    short = [c for c in evidence if c.outcome == "inconclusive"]
    unproven = unproven_reasons(result)
    regressed = [r for r in regressions if r.regressed]

    # An invalid comparison (prompts missing, different suites) proves nothing either way:
    # Error. A proven failure stands even where other checks could not be measured (an fp16
    # overflow leaves NaN scores and hidden states: the NaN fails hygiene, the metrics built
    # on them are unmeasured); a check that could not be measured never passes.
    if result.errors or hygiene_error:
        status = VerdictStatus.ERROR
        reasons = (
            list(result.errors)
            + [_hygiene_reason(h) for h in hygiene_error]
            + [c.message for c in unmeasured]
        )
    elif failed or hygiene_fail or regressed:
        status = VerdictStatus.FAILED
        reasons = (
            [_hygiene_reason(h) for h in hygiene_fail]
            + [c.message for c in failed]
            + [f"regression: {r.message}" for r in regressed]
            + [c.message for c in unmeasured]
        )
    elif unmeasured:
        status = VerdictStatus.ERROR
        reasons = [c.message for c in unmeasured]
    elif short or inconclusive or result.unverified or unproven:
        status = VerdictStatus.INCONCLUSIVE
        reasons = list(result.unverified)
        if short:
            reasons.append("not enough evidence: " + "; ".join(c.message for c in short))
        reasons += [c.message for c in inconclusive]
        reasons += list(unproven.values())
    else:
        status = VerdictStatus.PASSED
        reasons = []
    warnings = []
    if warn is not None:
        blocking = {c.key for c in failed}
        warnings = [
            c.message.replace(": ", " (warn): ", 1)
            for c in evaluate_checks(metrics, result.prompts, warn)
            if c.outcome == "fail" and c.key not in blocking
        ]
    return Verdict(
        status=status,
        reasons=reasons,
        checks=evidence + checks,
        warnings=warnings,
        regressions=regressions,
        excluded=excluded,
        confidence=metrics.confidence,
    )


def unproven_reasons(result: ParityResult) -> dict[str, str]:
    """What keeps a clean comparison from passing besides its checks, by what it concerns:
    a suite too weak to see its own positive control ("control"), a calibration the
    profile needs that is not kept ("calibration")."""
    found = {
        "control": None if result.control is None else control_reason(result.control),
        "calibration": None if result.calibration is None else result.calibration.inconclusive,
    }
    return {what: why for what, why in found.items() if why}


def _hygiene_reason(finding: HygieneFinding) -> str:
    ids = finding.prompt_ids
    where = f" in prompts {', '.join(ids[:WORST_LISTED])}" if ids else ""
    more = f" and {len(ids) - WORST_LISTED} more" if len(ids) > WORST_LISTED else ""
    return f"hygiene {finding.check.value} ({finding.side}): {finding.detail}{where}{more}"
