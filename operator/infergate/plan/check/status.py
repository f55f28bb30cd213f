"""A ParityCheck's status fields, whoever ends the check (pure).

The runner writes what it measured; the controller writes `Error` when the runner
could not (a crash, a deadline, an unreachable side). Both build their fields here,
so a check reads the same whoever ended it:

- `phase`: Passed, Failed, Inconclusive or Error; never Passed without a measured,
  bound verdict (`verdict.passed`, `verdict.outcome`, `verdict.specDigest`,
  `verdict.generation` all say the same);
- `verdict.reasons`: one entry per limit passed, evidence missing or thing not
  measured, naming the metric, its value, the limit and the prompts;
- `conditions`: Complete plus exactly one of Passed, Failed, Inconclusive and Error;
  Ready, Reconciling and Stalled read off them (`plan.readiness`) on every write.

Only plain data comes in: the numeric core turns its result into a `Judgement`
(`infergate.parity.summary`), so the operator never imports it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infergate.api.check_status import Verdict, VerdictReason
from infergate.api.common import Condition, ConfigMapKeyReference
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.jsontypes import JSON
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate, from_kube, set_condition, to_kube
from infergate.plan.phases import CHECK_PHASE_CONDITION, CHECK_TERMINAL_PHASES
from infergate.plan.readiness import check_readiness
from infergate.render.revision import canonical_json

MESSAGE_MAX = 32768
_WARNINGS_MAX = 64
_WARNING_MAX = 4096
_ENDED_REASON = {
    CheckPhase.PASSED: reasons.CHECK_PARITY_PASSED,
    CheckPhase.FAILED: reasons.CHECK_PARITY_FAILED,
    CheckPhase.INCONCLUSIVE: reasons.CHECK_NOT_ENOUGH_EVIDENCE,
    CheckPhase.ERROR: reasons.CHECK_COULD_NOT_MEASURE,
}


def spec_digest(spec: Mapping[str, Any]) -> str:
    """sha256 of a ParityCheck spec as canonical JSON: what a verdict is bound to."""
    return hashlib.sha256(canonical_json(dict(spec)).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Binding:
    """What a verdict judged: the check's spec and generation, the revisions it compared."""

    spec_digest: str
    generation: int | None
    baseline_revision: str | None = None
    candidate_revision: str | None = None
    suite_digest: str | None = None
    """The content digest of the suite it measured (None: no suite)."""


@dataclass(frozen=True)
class Judgement:
    """A measured verdict as plain data (from `infergate.parity.summary`)."""

    phase: CheckPhase
    """Passed, Failed or Inconclusive when measured; Error when the core could not measure."""
    summary: str
    reasons: Sequence[VerdictReason]
    detail: str
    """The condition message: the summary and every reason, for people."""
    profile: str
    metrics: Mapping[str, float] = field(default_factory=dict)
    warnings: Sequence[str] = ()


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def stamp(at: datetime) -> str:
    """An RFC 3339 timestamp as the API server writes it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_conditions(
    status: Mapping[str, Any],
    updates: Sequence[ConditionUpdate],
    *,
    generation: int | None,
    at: datetime,
) -> list[JSON]:
    """The check's conditions (as its status holds them) with `updates` applied."""
    conditions: list[Condition] = from_kube(status.get("conditions") or [])
    for update in updates:
        conditions = set_condition(conditions, update, generation=generation, now=at)
    for update in check_readiness(conditions).updates():
        conditions = set_condition(conditions, update, generation=generation, now=at)
    return to_kube(conditions)


def terminal_updates(phase: CheckPhase, reason: str, message: str) -> list[ConditionUpdate]:
    """Complete=True, the condition of `phase` True and the other verdicts False."""
    updates = [ConditionUpdate(reasons.CHECK_COMPLETE, ConditionStatus.TRUE, reason, message)]
    for each, type_ in CHECK_PHASE_CONDITION.items():
        matches = each is phase
        updates.append(
            ConditionUpdate(
                type_,
                ConditionStatus.TRUE if matches else ConditionStatus.FALSE,
                reason,
                message if matches else f"check ended {phase.value}",
            )
        )
    return updates


def _recovered(status: Mapping[str, Any], phase: CheckPhase) -> list[ConditionUpdate]:
    """A runner attempt failed earlier but a later one measured: say it recovered."""
    failed = any(
        c.get("type") == reasons.CHECK_RUNNER_ERROR and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not failed or phase is CheckPhase.ERROR:
        return []
    return [
        ConditionUpdate(
            reasons.CHECK_RUNNER_ERROR,
            ConditionStatus.FALSE,
            reasons.CHECK_RECOVERED,
            "a later runner attempt completed the check",
        )
    ]


def verdict_status(
    judgement: Judgement,
    binding: Binding,
    *,
    status: Mapping[str, Any],
    report: ConfigMapKeyReference | None,
    at: datetime,
) -> JSON:
    """The status fields the runner writes once it has a verdict."""
    if judgement.phase not in CHECK_TERMINAL_PHASES:
        raise ValueError(f"a verdict ends a check; {judgement.phase.value} does not")
    phase = judgement.phase
    verdict = Verdict(
        passed=phase is CheckPhase.PASSED,
        outcome=VerdictOutcome(phase.value),
        summary=judgement.summary[:MESSAGE_MAX],
        reasons=list(judgement.reasons),
        warnings=[w[:_WARNING_MAX] for w in judgement.warnings[:_WARNINGS_MAX]],
        spec_digest=binding.spec_digest,
        generation=binding.generation,
        suite_digest=binding.suite_digest,
    )
    updates = terminal_updates(phase, _ENDED_REASON[phase], judgement.detail[:MESSAGE_MAX])
    fields: JSON = {
        "phase": phase.value,
        "profile": judgement.profile,
        "completionTime": stamp(at),
        "metrics": dict(judgement.metrics),
        "verdict": verdict.to_kube(),
        "conditions": check_conditions(
            status, [*updates, *_recovered(status, phase)], generation=binding.generation, at=at
        ),
    }
    for key, value in (
        ("baselineRevision", binding.baseline_revision),
        ("candidateRevision", binding.candidate_revision),
    ):
        if value is not None:
            fields[key] = value
    if report is not None:
        fields["reportRef"] = report.to_kube()
    return fields


def error_status(
    message: str,
    reason: str,
    *,
    status: Mapping[str, Any],
    generation: int | None,
    at: datetime,
    metric: str = "runner",
    phase: CheckPhase = CheckPhase.ERROR,
) -> JSON:
    """The status of a check that ended without a measured verdict: Error (or Inconclusive,
    when what is missing is evidence the check asks for), never Passed."""
    verdict = Verdict(
        passed=False,
        outcome=VerdictOutcome(phase.value),
        summary=f"{phase.value}: {message}"[:MESSAGE_MAX],
        reasons=[VerdictReason(metric=metric, message=message[:MESSAGE_MAX])],
        generation=generation,
    )
    return {
        "phase": phase.value,
        "completionTime": stamp(at),
        "verdict": verdict.to_kube(),
        "conditions": check_conditions(
            status,
            terminal_updates(phase, reason, message),
            generation=generation,
            at=at,
        ),
    }


def runner_error_conditions(
    status: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    generation: int | None,
    at: datetime,
) -> list[JSON]:
    """Conditions after a runner attempt failed in a way a retry may fix."""
    update = ConditionUpdate(reasons.CHECK_RUNNER_ERROR, ConditionStatus.TRUE, reason, message)
    return check_conditions(status, [update], generation=generation, at=at)
