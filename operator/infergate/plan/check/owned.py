"""A ParityCheck as the InferenceDeployment that asked for it sees it (pure).

The rollout judges a canary by its check, and the drift watch the stable revision by
its runs; both read the same small record of a check, `ObservedCheck`, kept by the
deployment's kopf index (`observe_check` makes it from a watched body). Whether a verdict
counts is bound to what the operator asked for: the spec digest it stamped on the check
(`ANNOTATION_SPEC_DIGEST`), the generation the verdict judged, and for a suite read from a
ConfigMap the content digest the spec pins (`plan.check.stamp`) and the verdict judged.
Which object counts at all is the rollout's and the drift watch's to say: the uid the
operator recorded when it created it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from infergate.api.enums import CheckPhase, VerdictOutcome
from infergate.jsontypes import JSONMap
from infergate.plan.check.status import spec_digest
from infergate.plan.metadata import parse_time
from infergate.plan.ownership import controller_uid
from infergate.plan.phases import CHECK_TERMINAL_PHASES, check_phase
from infergate.render.labels import LABEL_CHECK_PURPOSE, PURPOSE_DRIFT

# Stamped on a ParityCheck the operator creates: sha256 of the spec it asked for, which a
# verdict must carry back (verdict.specDigest) to count.
ANNOTATION_SPEC_DIGEST = "infergate.io/spec-digest"


@dataclass(frozen=True)
class ObservedCheck:
    """A ParityCheck named like a canary's check, whoever made it, and how far it got."""

    name: str
    uid: str
    owner_uid: str | None
    generation: int | None
    created: datetime | None
    spec_baseline: str | None
    """spec.baseline.revision."""
    spec_candidate: str | None
    """spec.candidate.revision."""
    digest: str
    """sha256 of its spec as it is now."""
    stamped_digest: str | None
    """The infergate.io/spec-digest the operator stamped when it made it."""
    phase: CheckPhase | None
    outcome: VerdictOutcome | None
    passed: bool | None
    summary: str | None
    status_baseline: str | None = None
    """status.baselineRevision: the revision the baseline resolved to."""
    status_candidate: str | None = None
    verdict_digest: str | None = None
    """verdict.specDigest: the spec the verdict judged."""
    verdict_generation: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    completion_time: datetime | None = None
    purpose: str | None = None
    """The infergate.io/check-purpose label: `drift` for a drift watch's run, else unset."""
    spec_golden: str | None = None
    """spec.baseline.golden.revision: the golden record it compares with."""
    golden_entries: tuple[str, ...] = ()
    """status.golden.entries when its records were stored (a Passed check of two revisions)."""
    suite_config_map: str | None = None
    """spec.suite.configMapRef.name: the ConfigMap its suite is read from (None: inline)."""
    suite_digest: str | None = None
    """spec.suite.digest: the content of that suite it was made for."""
    verdict_suite_digest: str | None = None
    """verdict.suiteDigest: the content of the suite the verdict judged."""

    @property
    def drift(self) -> bool:
        """A drift watch's run (never a canary's check)."""
        return self.purpose == PURPOSE_DRIFT

    @property
    def terminal(self) -> bool:
        """A verdict: the check will not change any more."""
        return self.phase in CHECK_TERMINAL_PHASES

    @property
    def candidate_revision(self) -> str | None:
        return self.spec_candidate

    def binding_problems(self) -> list[str]:
        """Why its verdict is not bound to the spec the operator made it with (empty: it is):
        the spec changed since, or the verdict judged another spec or generation."""
        problems = []
        if self.stamped_digest is None or self.stamped_digest != self.digest:
            problems.append("its spec is not the one the operator created it with")
        if self.verdict_digest != self.digest:
            problems.append("the verdict was given for another spec")
        if self.verdict_generation is None or self.verdict_generation != self.generation:
            problems.append(
                f"the verdict judged generation {self.verdict_generation}, the check is at "
                f"{self.generation}"
            )
        if self.suite_config_map is not None and self.suite_digest is None:
            problems.append(
                f"its suite (ConfigMap {self.suite_config_map}) is not pinned by a content "
                "digest (spec.suite.digest), so the prompts it judged are not known"
            )
        elif self.suite_digest is not None and self.verdict_suite_digest != self.suite_digest:
            problems.append(
                f"the verdict judged suite content {self.verdict_suite_digest}, not the "
                f"{self.suite_digest} the check was made for"
            )
        return problems


def observe_check(body: JSONMap) -> ObservedCheck:
    """Any ParityCheck, as the rollout sees it."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    verdict = status.get("verdict") or {}
    metrics = status.get("metrics") or {}
    golden = status.get("golden") or {}
    generation = metadata.get("generation")
    verdict_generation = verdict.get("generation")
    suite = spec.get("suite") or {}
    return ObservedCheck(
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid") or ""),
        owner_uid=controller_uid(body),
        generation=generation if isinstance(generation, int) else None,
        created=parse_time(metadata.get("creationTimestamp")),
        spec_baseline=(spec.get("baseline") or {}).get("revision"),
        spec_candidate=(spec.get("candidate") or {}).get("revision"),
        digest=spec_digest(spec),
        stamped_digest=(metadata.get("annotations") or {}).get(ANNOTATION_SPEC_DIGEST),
        phase=check_phase(status.get("phase")),
        outcome=_outcome(verdict.get("outcome")),
        passed=verdict.get("passed") if isinstance(verdict.get("passed"), bool) else None,
        summary=verdict.get("summary"),
        status_baseline=status.get("baselineRevision"),
        status_candidate=status.get("candidateRevision"),
        verdict_digest=verdict.get("specDigest"),
        verdict_generation=verdict_generation if isinstance(verdict_generation, int) else None,
        metrics={str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        completion_time=parse_time(status.get("completionTime")),
        purpose=(metadata.get("labels") or {}).get(LABEL_CHECK_PURPOSE),
        spec_golden=((spec.get("baseline") or {}).get("golden") or {}).get("revision"),
        golden_entries=tuple(str(e) for e in golden.get("entries") or [])
        if golden.get("stored") is True
        else (),
        suite_config_map=(suite.get("configMapRef") or {}).get("name"),
        suite_digest=suite.get("digest"),
        verdict_suite_digest=verdict.get("suiteDigest"),
    )


def _outcome(value: object) -> VerdictOutcome | None:
    try:
        return VerdictOutcome(str(value))
    except ValueError:
        return None
