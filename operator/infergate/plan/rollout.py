"""The rollout decision: which revisions run, at what size, and what happens to the canary.

Pure: the deployment's spec and status, its observed children and the time in;
a `RolloutDecision` out. Nothing here is remembered between calls: stable
revision and history come from status, revision identities from the children's
annotations, readiness from the Deployments, verdicts from the ParityChecks; so
a restarted operator decides exactly what the stopped one would have.

The steps, in order: manual requests (rollback-to, abort, promote), then the
canary's own progress (available? checked? deadline?), then sizes: stable at
spec.replicas, canary at canaryReplicas, previous stables kept until the new
stable is fully rolled out and then scaled to zero, everything else removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from infergate.api.deployment_status import InferenceDeploymentStatus, RevisionRecord
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.errors import SpecError
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.control import ManualRequests
from infergate.plan.desired import (
    Owner,
    desired_parity_check,
    parity_check_name,
    revision_of,
    spec_for_revision,
)
from infergate.plan.observed import (
    ANNOTATION_CANARY_STARTED,
    ANNOTATION_REVISION_SPEC,
    ANNOTATION_ROLE,
    Observed,
    ObservedCheck,
)
from infergate.render.images import resolved_image

ROLE_STABLE = "stable"
ROLE_CANARY = "canary"
ROLE_PENDING = "pending"
ROLE_RETIRED = "retired"


@dataclass(frozen=True)
class DeploymentState:
    """Everything a reconcile decides from."""

    owner: Owner
    generation: int
    spec: InferenceDeploymentSpec
    status: InferenceDeploymentStatus
    manual: ManualRequests
    observed: Observed
    now: datetime


@dataclass(frozen=True)
class KeptRevision:
    """A revision whose objects stay, at this size and role."""

    revision: str
    spec: InferenceDeploymentSpec
    replicas: int
    role: str


@dataclass(frozen=True)
class Outcome:
    """Something to count: a promotion, a rollback, or a parity verdict, with its reason."""

    kind: str  # "promotion" | "rollback" | "verdict"
    reason: str


@dataclass(frozen=True)
class Notice:
    """An Event that is not a condition change (an action, or a refused request)."""

    warning: bool
    reason: str
    message: str


@dataclass
class RolloutDecision:
    """What the reconcile should make true."""

    stable: str | None
    canary: str | None
    desired: str
    records: list[RevisionRecord]
    kept: list[KeptRevision]
    progressing: ConditionUpdate
    parity: ConditionUpdate | None
    check: ObservedCheck | None
    create_checks: list[dict[str, Any]] = field(default_factory=list)
    delete_checks: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    unschedulable: str | None = None


def _seconds(now: datetime) -> datetime:
    return now.replace(microsecond=0)


class _Rollout:
    """One decision in the making; methods are the steps, state is this call's only."""

    def __init__(self, state: DeploymentState) -> None:
        self.state = state
        self.spec = state.spec
        self.now = _seconds(state.now)
        self.observed = state.observed
        self.desired = revision_of(state.spec)
        self.records: dict[str, RevisionRecord] = {
            r.hash: r.model_copy(deep=True) for r in state.status.revisions
        }
        self.stable = state.status.stable_revision or self._stable_from_roles()
        self.canary: str | None = None
        self.progress: ConditionUpdate | None = None
        self.parity: ConditionUpdate | None = None
        self.check: ObservedCheck | None = None
        self.decision_checks: list[dict[str, Any]] = []
        self.delete_checks: list[str] = []
        self.outcomes: list[Outcome] = []
        self.notices: list[Notice] = []
        self.unschedulable: str | None = None

    # -- helpers -----------------------------------------------------------------

    def _stable_from_roles(self) -> str | None:
        # Status lost (restored from a backup without status, say): the Deployments say.
        for deployment in self.observed.deployments.values():
            if deployment.annotations.get(ANNOTATION_ROLE) == ROLE_STABLE:
                return deployment.revision
        return None

    def _record(self, revision: str) -> RevisionRecord:
        record = self.records.get(revision)
        if record is None:
            engine = self.spec.engine
            record = RevisionRecord(
                hash=revision,
                engine=engine.kind,
                dtype=engine.dtype,
                accelerator=self.spec.accelerator.kind,
                image=resolved_image(engine),
                created_at=self.now,
            )
            self.records[revision] = record
        return record

    def _revision_spec(self, revision: str) -> InferenceDeploymentSpec | None:
        if revision == self.desired:
            return self.spec
        annotation = None
        deployment = self.observed.deployments.get(revision)
        if deployment is not None:
            annotation = deployment.revision_spec
        if annotation is None:
            config_map = self.observed.config_maps.get(f"{self.state.owner.name}-{revision}")
            if config_map is not None:
                annotation = config_map.annotations.get(ANNOTATION_REVISION_SPEC)
        if annotation is None:
            return None
        try:
            return spec_for_revision(self.spec, annotation)
        except SpecError:
            return None

    def _ready(self, revision: str, replicas: int) -> bool:
        deployment = self.observed.deployments.get(revision)
        return (
            deployment is not None
            and deployment.spec_replicas == replicas
            and deployment.rolled_out
        )

    def _availability(self, revision: str) -> str:
        deployment = self.observed.deployments.get(revision)
        if deployment is None:
            return "its Deployment is being created"
        return f"{deployment.available_replicas}/{deployment.spec_replicas} pods available"

    def _unschedulable(self, revision: str) -> str | None:
        for pod in self.observed.pods:
            if pod.revision == revision and pod.unschedulable_message:
                return f"pod {pod.name} cannot be scheduled: {pod.unschedulable_message}"
        return None

    def _deadline(self) -> timedelta:
        return timedelta(seconds=self.spec.rollout.progress_deadline_seconds)

    def _say(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.notices.append(Notice(warning=warning, reason=reason, message=message))

    # -- state changes ---------------------------------------------------------------

    def _promote(self, revision: str, reason: str, message: str, *, count: bool = True) -> None:
        previous = self.stable
        record = self._record(revision)
        record.promoted_at = self.now
        record.rejected = False
        record.message = message
        self.stable = revision
        self.canary = None
        if count:
            self.outcomes.append(Outcome("promotion", reason))
        self.progress = ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.PROMOTING,
            f"revision {revision} promoted ({message}); "
            + (f"revision {previous} is scaled down once it is rolled out" if previous else ""),
        )

    def _reject(self, revision: str, reason: str, message: str, *, count: bool = True) -> None:
        record = self._record(revision)
        record.rejected = True
        record.message = message
        if self.canary == revision:
            self.canary = None
        if count:
            self.outcomes.append(Outcome("rollback", reason))
        self.progress = self._rolled_back(revision)

    def _rolled_back(self, revision: str) -> ConditionUpdate:
        record = self._record(revision)
        serving = f"stable revision {self.stable} keeps serving" if self.stable else "no stable"
        return ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.FALSE,
            reasons.ROLLED_BACK,
            f"revision {revision} was rolled back: {record.message}; {serving}; it is not "
            "retried until the spec changes",
        )

    # -- steps ---------------------------------------------------------------------

    def choose_canary(self) -> None:
        # A rejected revision may be tried again once the spec has moved on from it.
        for record in self.records.values():
            if record.rejected and record.hash != self.desired:
                record.rejected = False
        if self.stable is None or self.desired == self.stable:
            self._record(self.desired)
            return
        record = self._record(self.desired)
        if record.rejected:
            return
        if self.state.status.canary_revision != self.desired:
            # A new attempt (first, or again after the spec came back to it): fresh record.
            record.created_at = self.now
            record.verdict = None
            record.metrics = None
            record.parity_check = None
            record.message = None
            record.promoted_at = None
        self.canary = self.desired

    def manual_rollback(self) -> None:
        target = self.state.manual.rollback_to
        if target is None:
            return
        if target == self.stable:
            self._say(
                reasons.MANUAL_ACTION_REFUSED,
                f"rollback-to {target}: it is already the stable revision",
                warning=True,
            )
            return
        retained = sorted(
            r.hash
            for r in self.records.values()
            if r.promoted_at is not None and r.hash != self.stable
            if self._revision_spec(r.hash) is not None
        )
        if target not in retained:
            self._say(
                reasons.MANUAL_ACTION_REFUSED,
                f"rollback-to {target}: not a retained revision; retained: "
                f"{', '.join(retained) or 'none'}",
                warning=True,
            )
            return
        previous = self.stable
        if self.canary is not None:
            self._reject(
                self.canary,
                reasons.ROLLBACK_BY_HAND,
                f"rolled back by hand to {target}",
                count=False,
            )
        self._promote(
            target, reasons.ROLLBACK_BY_HAND, f"rolled back by hand from {previous}", count=False
        )
        self.outcomes.append(Outcome("rollback", reasons.ROLLBACK_BY_HAND))
        if self.desired != target:
            desired = self._record(self.desired)
            desired.rejected = True
            desired.message = f"rolled back by hand to revision {target}"
        self._say(reasons.MANUAL_ACTION, f"rolled back by hand from {previous} to {target}")

    def manual_abort(self) -> None:
        if not self.state.manual.abort:
            return
        if self.canary is None:
            self._say(reasons.MANUAL_ACTION_REFUSED, "abort: there is no canary", warning=True)
            return
        canary = self.canary
        self._reject(canary, reasons.ROLLBACK_ABORTED, "aborted by hand")
        self._say(reasons.MANUAL_ACTION, f"canary {canary} aborted by hand")

    def manual_promote(self) -> None:
        manual = self.state.manual
        if manual.promote is None:
            return
        canary = self.canary
        if canary is None:
            self._say(reasons.MANUAL_ACTION_REFUSED, "promote: there is no canary", warning=True)
        elif not manual.promotes(canary):
            self._say(
                reasons.MANUAL_ACTION_REFUSED,
                f"promote: asked for revision {manual.promote}, but the canary is {canary}",
                warning=True,
            )
        elif not self._ready(canary, self.spec.rollout.canary_replicas):
            self._say(
                reasons.MANUAL_ACTION_REFUSED,
                f"promote: canary {canary} is not available yet ({self._availability(canary)})",
                warning=True,
            )
        else:
            verdict = self._record(canary).verdict
            self._promote(
                canary,
                reasons.PROMOTION_BY_HAND,
                f"promoted by hand; parity verdict {verdict.value if verdict else 'none'}",
            )
            self._say(reasons.MANUAL_ACTION, f"canary {canary} promoted by hand")

    def advance_canary(self) -> None:
        canary = self.canary
        if canary is None:
            return
        rollout = self.spec.rollout
        record = self._record(canary)
        if not self._ready(canary, rollout.canary_replicas):
            started = record.created_at or self.now
            unschedulable = self._unschedulable(canary)
            if self.now - started > self._deadline():
                message = (
                    f"canary not available within progressDeadlineSeconds "
                    f"({rollout.progress_deadline_seconds}s): {self._availability(canary)}"
                    + (f"; {unschedulable}" if unschedulable else "")
                )
                self._fail_or_wait(canary, reasons.ROLLBACK_DEADLINE, message)
            elif unschedulable is not None:
                self.unschedulable = unschedulable
                self.progress = ConditionUpdate(
                    reasons.PROGRESSING,
                    ConditionStatus.FALSE,
                    reasons.UNSCHEDULABLE,
                    f"canary {canary}: {unschedulable}",
                )
            else:
                self.progress = ConditionUpdate(
                    reasons.PROGRESSING,
                    ConditionStatus.TRUE,
                    reasons.CANARY_STARTED,
                    f"canary {canary} starting next to stable {self.stable}: "
                    f"{self._availability(canary)}",
                )
            self.parity = ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.PARITY_CHECK_PENDING,
                f"canary {canary} is checked once it is available",
            )
            return
        if rollout.parity is None:
            self.parity = ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.NO_PARITY_CHECK,
                "spec.rollout.parity is unset: no check is made",
            )
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.AWAITING_PROMOTION,
                f"canary {canary} is available; no parity check is set, so it waits for a "
                "person: infergate promote or infergate abort",
            )
            return
        self._judge(canary, record)

    def _current_check(self, canary: str, record: RevisionRecord) -> ObservedCheck | None:
        name = parity_check_name(self.state.owner.name, canary)
        check = self.observed.checks.get(name)
        if check is None:
            return None
        attempt = record.created_at.isoformat() if record.created_at else ""
        if check.attempt != attempt:
            # Left from an earlier attempt at this revision: judge this attempt afresh.
            self.delete_checks.append(name)
            return None
        return check

    def _judge(self, canary: str, record: RevisionRecord) -> None:
        stable = self.stable or ""  # a canary always has a stable to compare with
        name = parity_check_name(self.state.owner.name, canary)
        check = self._current_check(canary, record)
        record.parity_check = name
        if check is None:
            if name not in self.delete_checks:
                manifest = desired_parity_check(
                    self.state.owner, self.spec, stable=stable, canary=canary
                )
                manifest["metadata"]["annotations"] = {
                    ANNOTATION_CANARY_STARTED: record.created_at.isoformat()
                    if record.created_at
                    else ""
                }
                self.decision_checks.append(manifest)
            record.verdict = VerdictOutcome.PENDING
            self.parity = ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.UNKNOWN,
                reasons.PARITY_CHECK_PENDING,
                f"ParityCheck {name} created: baseline {stable}, candidate {canary}",
            )
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.AWAITING_PARITY,
                f"canary {canary} is available; waiting for ParityCheck {name}",
            )
            return
        self.check = check
        outcome = verdict_of(check)
        if outcome is not record.verdict and outcome is not VerdictOutcome.PENDING:
            self.outcomes.append(Outcome("verdict", outcome.value))
        record.verdict = outcome
        record.metrics = dict(check.metrics) or None
        summary = check.summary or f"phase {check.phase.value if check.phase else 'unknown'}"
        rollout = self.spec.rollout
        if outcome is VerdictOutcome.PASSED:
            self.parity = ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.TRUE,
                reasons.PARITY_CHECK_PASSED,
                f"ParityCheck {name} passed: {summary}",
            )
            if rollout.auto_promote:
                self._promote(canary, reasons.PROMOTION_AUTOMATIC, f"ParityCheck {name} passed")
            else:
                self.progress = ConditionUpdate(
                    reasons.PROGRESSING,
                    ConditionStatus.TRUE,
                    reasons.AWAITING_PROMOTION,
                    f"ParityCheck {name} passed; autoPromote is off, so canary {canary} waits "
                    "for a person: infergate promote or infergate abort",
                )
            return
        if outcome in (VerdictOutcome.FAILED, VerdictOutcome.ERROR, VerdictOutcome.INCONCLUSIVE):
            failed = outcome is VerdictOutcome.FAILED
            self.parity = ConditionUpdate(
                reasons.PARITY_PASSED,
                ConditionStatus.FALSE,
                reasons.PARITY_CHECK_FAILED if failed else reasons.PARITY_CHECK_ERROR,
                f"ParityCheck {name} {'failed' if failed else 'could not judge'}: {summary}",
            )
            self._fail_or_wait(
                canary,
                reasons.ROLLBACK_PARITY_FAILED if failed else reasons.ROLLBACK_PARITY_ERROR,
                f"ParityCheck {name} {outcome.value}: {summary}",
            )
            return
        self.parity = ConditionUpdate(
            reasons.PARITY_PASSED,
            ConditionStatus.UNKNOWN,
            reasons.PARITY_CHECK_PENDING,
            f"ParityCheck {name} is {check.phase.value if check.phase else 'Pending'}",
        )
        started = check.created or self.now
        if self.now - started > self._deadline():
            self._fail_or_wait(
                canary,
                reasons.ROLLBACK_DEADLINE,
                f"no verdict from ParityCheck {name} within progressDeadlineSeconds "
                f"({rollout.progress_deadline_seconds}s)",
            )
            return
        self.progress = ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.AWAITING_PARITY,
            f"canary {canary} is available; ParityCheck {name} is "
            f"{check.phase.value if check.phase else 'Pending'}",
        )

    def _fail_or_wait(self, canary: str, reason: str, message: str) -> None:
        if self.spec.rollout.auto_rollback:
            self._reject(canary, reason, message)
            return
        self._record(canary).message = message
        if reason == reasons.ROLLBACK_DEADLINE:
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.FALSE,
                reasons.PROGRESS_DEADLINE_EXCEEDED,
                f"canary {canary}: {message}; autoRollback is off: infergate abort or promote",
            )
        else:
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.AWAITING_PROMOTION,
                f"canary {canary}: {message}; autoRollback is off, so it waits for a person: "
                "infergate abort or infergate promote",
            )

    def advance_initial(self) -> None:
        """No stable yet: the desired revision becomes stable once it is rolled out."""
        if self.stable is not None:
            return
        revision = self.desired
        record = self._record(revision)
        self.parity = ConditionUpdate(
            reasons.PARITY_PASSED,
            ConditionStatus.UNKNOWN,
            reasons.NO_PARITY_CHECK,
            "first revision: there is no stable revision to compare with",
        )
        if self._ready(revision, self.spec.replicas):
            record.promoted_at = self.now
            self.stable = revision
            return
        unschedulable = self._unschedulable(revision)
        started = record.created_at or self.now
        if unschedulable is not None:
            self.unschedulable = unschedulable
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.FALSE,
                reasons.UNSCHEDULABLE,
                f"revision {revision}: {unschedulable}",
            )
        elif self.now - started > self._deadline():
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.FALSE,
                reasons.PROGRESS_DEADLINE_EXCEEDED,
                f"revision {revision} not available within progressDeadlineSeconds "
                f"({self.spec.rollout.progress_deadline_seconds}s): "
                f"{self._availability(revision)}",
            )
        else:
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.REVISION_CREATED,
                f"first revision {revision}: {self._availability(revision)}",
            )

    def keep(self) -> tuple[list[RevisionRecord], list[KeptRevision]]:
        """Trimmed history and the revisions whose objects stay, with sizes."""
        limit = self.spec.revision_history_limit
        pinned = {r for r in (self.stable, self.canary, self.desired) if r is not None}
        others = sorted(
            (r for r in self.records.values() if r.hash not in pinned),
            key=lambda r: r.created_at or datetime.min.replace(tzinfo=self.now.tzinfo),
            reverse=True,
        )[:limit]
        records = sorted(
            [*(self.records[r] for r in pinned if r in self.records), *others],
            key=lambda r: r.created_at or datetime.min.replace(tzinfo=self.now.tzinfo),
        )
        kept: list[KeptRevision] = []
        stable_ready = False
        if self.stable is not None:
            stable_spec = self._revision_spec(self.stable)
            if stable_spec is None:
                self.progress = ConditionUpdate(
                    reasons.PROGRESSING,
                    ConditionStatus.FALSE,
                    reasons.REVISION_LOST,
                    f"stable revision {self.stable}: its Deployment and ConfigMap were deleted, "
                    "so its configuration is lost; set the spec back to it or roll back to a "
                    "retained revision",
                )
            else:
                kept.append(KeptRevision(self.stable, stable_spec, self.spec.replicas, ROLE_STABLE))
            stable_ready = self._ready(self.stable, self.spec.replicas)
        else:
            kept.append(KeptRevision(self.desired, self.spec, self.spec.replicas, ROLE_PENDING))
        if self.canary is not None:
            kept.append(
                KeptRevision(self.canary, self.spec, self.spec.rollout.canary_replicas, ROLE_CANARY)
            )
        draining: list[str] = []
        running = {k.revision for k in kept}
        for record in records:
            if record.hash in running or record.promoted_at is None:
                continue
            spec = self._revision_spec(record.hash)
            if spec is None:
                continue
            deployment = self.observed.deployments.get(record.hash)
            current = deployment.spec_replicas if deployment is not None else 0
            replicas = 0 if stable_ready else current
            if replicas:
                draining.append(record.hash)
            kept.append(KeptRevision(record.hash, spec, replicas, ROLE_RETIRED))
        if draining and self.progress is None:
            self.progress = ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.PROMOTING,
                f"revision {self.stable} is stable: {self._availability(self.stable or '')}; "
                f"revision {', '.join(draining)} is scaled down once it is rolled out",
            )
        return records, kept

    def prune_checks(self, records: list[RevisionRecord]) -> None:
        known = {r.hash for r in records}
        for check in self.observed.checks.values():
            if check.name in self.delete_checks:
                continue
            stale = check.candidate_revision not in known
            superseded = check.candidate_revision != self.canary and not check.terminal
            if stale or superseded:
                self.delete_checks.append(check.name)

    def settle(self) -> ConditionUpdate:
        if self.progress is not None:
            return self.progress
        record = self.records.get(self.desired)
        if record is not None and record.rejected:
            return self._rolled_back(self.desired)
        return ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.FALSE,
            reasons.ROLLOUT_COMPLETE,
            f"revision {self.stable} is stable: {self._availability(self.stable or '')}",
        )


def verdict_of(check: ObservedCheck) -> VerdictOutcome:
    """The verdict a check gives the canary; fail closed: only Passed with passed=true passes."""
    if check.phase is CheckPhase.PASSED:
        return VerdictOutcome.PASSED if check.passed is not False else VerdictOutcome.ERROR
    if check.phase is CheckPhase.FAILED:
        return VerdictOutcome.FAILED
    if check.phase is CheckPhase.ERROR:
        if check.outcome is VerdictOutcome.INCONCLUSIVE:
            return VerdictOutcome.INCONCLUSIVE
        return VerdictOutcome.ERROR
    return VerdictOutcome.PENDING


def decide(state: DeploymentState) -> RolloutDecision:
    """The whole rollout decision for one reconcile."""
    rollout = _Rollout(state)
    rollout.choose_canary()
    rollout.manual_rollback()
    rollout.manual_abort()
    rollout.manual_promote()
    rollout.advance_canary()
    rollout.advance_initial()
    records, kept = rollout.keep()
    rollout.prune_checks(records)
    progressing = rollout.settle()
    return RolloutDecision(
        stable=rollout.stable,
        canary=rollout.canary,
        desired=rollout.desired,
        records=records,
        kept=kept,
        progressing=progressing,
        parity=rollout.parity,
        check=rollout.check,
        create_checks=rollout.decision_checks,
        delete_checks=rollout.delete_checks,
        outcomes=rollout.outcomes,
        notices=rollout.notices,
        unschedulable=rollout.unschedulable,
    )


def revision_specs(decision: RolloutDecision) -> Mapping[str, InferenceDeploymentSpec]:
    """The spec each kept revision renders from."""
    return {kept.revision: kept.spec for kept in decision.kept}
