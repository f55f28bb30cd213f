"""One check's verdict from several judgements (the suite, each load level, performance,
a shadow check's comparisons): the worst phase wins, every reason is kept (pure).

Worst first: Error (could not measure) over Failed (measured bad) over Inconclusive (too
little evidence) over Passed. Nothing here can turn a judgement into Passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infergate.api.check_status import VerdictReason
from infergate.api.enums import CheckPhase
from infergate.plan.check.status import MESSAGE_MAX, Judgement

SEVERITY = {
    CheckPhase.PASSED: 0,
    CheckPhase.INCONCLUSIVE: 1,
    CheckPhase.FAILED: 2,
    CheckPhase.ERROR: 3,
}


def worst(phases: Sequence[CheckPhase]) -> CheckPhase:
    """The most severe of measured phases (Error when there are none: nothing measured)."""
    if not phases:
        return CheckPhase.ERROR
    return max(phases, key=lambda p: SEVERITY.get(p, SEVERITY[CheckPhase.ERROR]))


def combined(
    main: Judgement,
    others: Sequence[tuple[str, Judgement]],
    *,
    metrics: Mapping[str, float] | None = None,
) -> Judgement:
    """`main` with the judgements of `others` (labelled, e.g. "load c=32") folded in."""
    phase = worst([main.phase, *(j.phase for _, j in others)])
    reasons = list(main.reasons)
    summaries = [main.summary]
    for label, judgement in others:
        summaries.append(f"{label}: {judgement.summary}")
        reasons += [
            r.model_copy(update={"message": f"{label}: {r.message or r.metric}"[:MESSAGE_MAX]})
            for r in judgement.reasons
        ]
    summary = "; ".join(summaries)
    if phase is not main.phase:
        summary = f"{phase.value}: {summary}"
    detail = summary
    if reasons:
        detail += ": " + "; ".join(r.message or r.metric for r in reasons)
    return Judgement(
        phase=phase,
        summary=summary[:MESSAGE_MAX],
        reasons=reasons[:256],
        detail=detail[:MESSAGE_MAX],
        profile=main.profile,
        metrics={**main.metrics, **(metrics or {})},
        warnings=[*main.warnings, *(w for _, j in others for w in j.warnings)][:64],
    )


def judged(
    phase: CheckPhase, summary: str, reasons: Sequence[VerdictReason], profile: str
) -> Judgement:
    """A judgement made outside the parity core (evidence, performance)."""
    detail = (
        summary
        if not reasons
        else f"{summary}: " + "; ".join(r.message or r.metric for r in reasons)
    )
    return Judgement(
        phase=phase,
        summary=summary[:MESSAGE_MAX],
        reasons=list(reasons),
        detail=detail[:MESSAGE_MAX],
        profile=profile,
    )
