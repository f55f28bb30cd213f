"""What the rollout steps read and what they hand on to each other (pure, immutable).

`Context` is what one reconcile observed, with the questions the steps ask of it
(is this revision rolled out? why can it not be scheduled? what spec made it?).
`Rollout` is the decision in the making: each step of `plan.deployment.rollout` takes it and
returns a new one (`dataclasses.replace`, records copied before any change), so a
step depends only on what it is given and can be tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from infergate.api.deployment_status import InferenceDeploymentStatus, RevisionRecord
from infergate.api.enums import ConditionStatus, PromotionStep
from infergate.api.golden import GoldenSpec
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.api.traffic import TrafficMode
from infergate.errors import SpecError
from infergate.jsontypes import JSON
from infergate.plan import reasons
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.check.stamp import SuiteRef, SuiteSeen
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.control import ManualRequests
from infergate.plan.deployment.desired import Owner, revision_of, spec_for_revision
from infergate.plan.deployment.observed import ANNOTATION_REVISION_SPEC, ANNOTATION_ROLE, Observed
from infergate.plan.drift.state import DriftPlan
from infergate.plan.notices import Notice, Outcome
from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE
from infergate.render.images import DEFAULT_RUNNER_IMAGE, resolved_image
from infergate.render.labels import LABEL_REVISION, revision_object_name
from infergate.render.traffic import stable_selector

ROLE_STABLE = "stable"
ROLE_CANARY = "canary"
ROLE_PENDING = "pending"
ROLE_RETIRED = "retired"


def taken_message(taken: Mapping[str, str]) -> str | None:
    """What a condition says of children whose names someone else's objects hold."""
    if not taken:
        return None
    found = "; ".join(f"{ref} already exists and was not made by infergate ({holder})"
                      for ref, holder in sorted(taken.items()))  # fmt: skip
    return (
        f"{found}. infergate never overwrites an object it did not make: delete or rename "
        "it, and the rollout goes on"
    )


def clock(at: datetime) -> str:
    """A time as status messages give it (UTC, to the second): a message that says until
    when something waits stays the same from one reconcile to the next."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    mirror_image: str = DEFAULT_RUNNER_IMAGE
    """Image of the mirror (rollout.mirror): the operator's own, like the runner's."""
    runner_namespace: str = DEFAULT_RUNNER_NAMESPACE
    """Where parity runner pods run: the mirror's control port admits them from there."""
    pull_secrets: tuple[str, ...] = ()
    """Pull secrets of that image (`infergate operator --image-pull-secret`)."""
    golden: GoldenSpec | None = None
    """The operator's golden record store (--golden-config), for the drift watch."""
    taken: Mapping[str, str] = field(default_factory=dict)
    """Children whose name someone else's object holds ("Service web" -> who made it, as
    `plan.deployment.observed.holder_of` says): their create answered AlreadyExists with an object
    this deployment did not make, which infergate never overwrites."""
    suites: Mapping[SuiteRef, SuiteSeen] = field(default_factory=dict)
    """The suite ConfigMaps the controller read for the checks a decision creates, and their
    content digests (`plan.check.stamp`): read only when a decision asks for them."""


@dataclass(frozen=True)
class KeptRevision:
    """A revision whose objects stay, at this size and role."""

    revision: str
    spec: InferenceDeploymentSpec
    replicas: int
    role: str


@dataclass(frozen=True)
class StepState:
    """Where a canary stands in its gateway steps (written to and read from status.traffic)."""

    revision: str
    step: int
    started_at: datetime
    recheck: str | None = None


@dataclass(frozen=True)
class Promotion:
    """A change of stable revision in progress (written to and read from status.promotion;
    `plan.deployment.promotion` decides it)."""

    revision: str
    """The new stable."""
    previous: str
    """The revision that served before: it keeps its pods until the promotion ends."""
    step: PromotionStep
    switched_at: datetime | None = None
    """When the move of traffic to `revision` was first seen."""
    scale_down_at: datetime | None = None
    """When `previous` is scaled down (once the move was seen)."""
    carried: int = 0
    """The HTTPRoute's weight for `revision` as observed (gateway mode), kept while it scales
    up: the route moves only at the switch."""

    @property
    def serving(self) -> str:
        """The revision the stable Service (and the route) should send requests to."""
        return self.previous if self.step is PromotionStep.SCALING_UP else self.revision


@dataclass(frozen=True)
class Context:
    """One reconcile's observations, and the questions the steps ask of them."""

    state: DeploymentState
    desired: str
    now: datetime

    @classmethod
    def of(cls, state: DeploymentState) -> Context:
        return cls(state, revision_of(state.spec), state.now.replace(microsecond=0))

    @property
    def spec(self) -> InferenceDeploymentSpec:
        return self.state.spec

    @property
    def observed(self) -> Observed:
        return self.state.observed

    @property
    def progress_deadline(self) -> timedelta:
        return timedelta(seconds=self.spec.rollout.progress_deadline_seconds)

    @property
    def verdict_deadline(self) -> timedelta:
        """From a canary's start to a verdict at the latest: time to become available, then
        the check's own deadline (which ends the check in Error first), and a minute for
        the verdict to be seen. A check that cannot even be created counts against it."""
        parity = self.spec.rollout.parity
        check = parity.deadline_seconds if parity is not None else 0
        return self.progress_deadline + timedelta(seconds=check + 60)

    def stable_from_roles(self) -> str | None:
        """The stable revision as the Deployments' role annotations say (status lost)."""
        for deployment in self.observed.deployments.values():
            if deployment.annotations.get(ANNOTATION_ROLE) == ROLE_STABLE:
                return deployment.revision
        return None

    def revision_spec(self, revision: str) -> InferenceDeploymentSpec | None:
        """The spec a revision renders from: the current one, or its objects' annotation."""
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

    def ready(self, revision: str, replicas: int) -> bool:
        """Whether the revision's Deployment has exactly `replicas` pods, all available."""
        deployment = self.observed.deployments.get(revision)
        return (
            deployment is not None
            and deployment.spec_replicas == replicas
            and deployment.rolled_out
        )

    def availability(self, revision: str) -> str:
        deployment = self.observed.deployments.get(revision)
        if deployment is None:
            return "its Deployment is being created"
        return f"{deployment.available_replicas}/{deployment.spec_replicas} pods available"

    def unschedulable(self, revision: str) -> str | None:
        for pod in self.observed.pods:
            if pod.revision == revision and pod.unschedulable_message:
                return f"pod {pod.name} cannot be scheduled: {pod.unschedulable_message}"
        return None

    def serving_taken(self) -> str | None:
        """Why no traffic can move: an object clients reach the revisions through (the
        stable Service, and the HTTPRoute in gateway mode) is someone else's under its
        name, so promoting or stepping would change nothing they are served by."""
        name = self.state.owner.name
        refs = [] if name in self.observed.services else [f"Service {name}"]
        gateway = self.spec.rollout.traffic.mode is TrafficMode.GATEWAY
        if gateway and ("HTTPRoute", name) not in self.observed.extras:
            refs.append(f"HTTPRoute {name}")
        # What is seen as ours is ours, whatever an earlier create found.
        return taken_message({r: self.state.taken[r] for r in refs if r in self.state.taken})

    def route_weights(self) -> dict[str, int] | None:
        """Backend Service -> weight, as the deployment's own HTTPRoute is observed (None:
        no route of ours is seen)."""
        route = self.observed.extras.get(("HTTPRoute", self.state.owner.name))
        if route is None:
            return None
        weights: dict[str, int] = {}
        for rule in route.content.get("rules") or []:
            for backend in rule.get("backendRefs") or []:
                if isinstance(backend.get("weight"), int):
                    weights[str(backend.get("name"))] = int(backend["weight"])
        return weights

    def route_weight(self, revision: str) -> int | None:
        """The weight the deployment's own HTTPRoute, as observed, gives `revision`'s
        Service (None: no route of ours is seen, or it names no such backend)."""
        weights = self.route_weights() or {}
        return weights.get(revision_object_name(self.state.owner.name, revision))

    def selected_revision(self) -> str | None:
        """The one revision the stable Service, as observed, selects (dark and gateway
        modes), when that revision has a Deployment; None otherwise (replicas mode selects
        every revision)."""
        service = self.observed.services.get(self.state.owner.name)
        if service is None:
            return None
        selected = (service.content.get("selector") or {}).get(LABEL_REVISION)
        return str(selected) if selected and selected in self.observed.deployments else None

    def moved_to(self, revision: str) -> bool:
        """Whether what clients reach the revisions through, as observed (read back, not
        assumed from a write), sends their requests to `revision`: the stable Service's
        selector is the one `revision` serves under (every revision's pods in replicas
        mode), and in gateway mode the HTTPRoute gives weight to its Service alone."""
        name = self.state.owner.name
        mode = self.spec.rollout.traffic.mode
        service = self.observed.services.get(name)
        if service is None:
            return False
        if (service.content.get("selector") or {}) != stable_selector(name, mode, revision):
            return False
        if mode is not TrafficMode.GATEWAY:
            return True
        weights = self.route_weights()
        if weights is None:
            return False
        target = revision_object_name(name, revision)
        others = [weight for backend, weight in weights.items() if backend != target]
        return weights.get(target, 0) > 0 and not any(others)

    def step_weight(self, state: StepState | None) -> int:
        """The canary's route weight at `state` (0 before its check passed, or without steps)."""
        gateway = self.spec.rollout.traffic.gateway
        if state is None or gateway is None or not gateway.steps:
            return 0
        return gateway.steps[min(state.step, len(gateway.steps) - 1)].weight

    def step_ends(self, state: StepState) -> datetime | None:
        """When the pause of the canary's step ends; None when it has ended already."""
        gateway = self.spec.rollout.traffic.gateway
        if gateway is None or not gateway.steps:
            return None
        step = gateway.steps[min(state.step, len(gateway.steps) - 1)]
        ends = state.started_at + timedelta(seconds=step.pause_seconds)
        return ends if ends > self.now else None

    def stepping_progress(self, state: StepState, message: str) -> ConditionUpdate:
        """Progressing while a canary holds a gateway step."""
        gateway = self.spec.rollout.traffic.gateway
        total = len(gateway.steps) if gateway is not None else 0
        return ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.TRUE,
            reasons.TRAFFIC_STEPPING,
            f"canary {state.revision} takes {self.step_weight(state)}% of requests (step "
            f"{state.step + 1} of {total}): {message}",
        )

    def new_record(self, revision: str) -> RevisionRecord:
        engine = self.spec.engine
        return RevisionRecord(
            hash=revision,
            engine=engine.kind,
            dtype=engine.dtype,
            accelerator=self.spec.accelerator.kind,
            image=resolved_image(engine),
            created_at=self.now,
        )


@dataclass(frozen=True)
class Rollout:
    """The decision in the making, handed from step to step."""

    stable: str | None
    canary: str | None = None
    records: Mapping[str, RevisionRecord] = field(default_factory=dict)
    progress: ConditionUpdate | None = None
    parity: ConditionUpdate | None = None
    check: ObservedCheck | None = None
    create_checks: tuple[JSON, ...] = ()
    delete_checks: tuple[str, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    notices: tuple[Notice, ...] = ()
    unschedulable: str | None = None
    step: StepState | None = None
    """The canary's gateway step, once its check passed (gateway mode only)."""
    drift: DriftPlan | None = None
    """What the drift watch decided (plan.deployment.drift), once it ran."""
    promotion: Promotion | None = None
    """The change of stable revision in progress (plan.deployment.promotion), once decided."""
    due: datetime | None = None
    """The earliest time at which this decision changes by time alone (a deadline, the end
    of a pause): the reconcile is scheduled then, not polled."""

    @classmethod
    def start(cls, ctx: Context) -> Rollout:
        status = ctx.state.status
        return cls(
            stable=status.stable_revision or ctx.stable_from_roles(),
            records={r.hash: r for r in status.revisions},
        )

    def record(self, ctx: Context, revision: str) -> RevisionRecord:
        """The revision's record (a fresh one when it has none yet; not stored by this)."""
        found = self.records.get(revision)
        return found if found is not None else ctx.new_record(revision)

    def with_record(self, ctx: Context, revision: str, **changes: Any) -> Rollout:
        """This rollout with the revision's record changed (or created)."""
        record = self.record(ctx, revision).model_copy(update=changes)
        return replace(self, records={**self.records, revision: record})

    def due_at(self, at: datetime | None) -> Rollout:
        """This rollout, to be decided again at `at` at the latest."""
        if at is None or (self.due is not None and self.due <= at):
            return self
        return replace(self, due=at)

    def noting(self, reason: str, message: str, *, warning: bool = False) -> Rollout:
        return replace(self, notices=(*self.notices, Notice(warning, reason, message)))

    def counting(self, kind: str, reason: str) -> Rollout:
        return replace(self, outcomes=(*self.outcomes, Outcome(kind, reason)))

    def rolled_back(self, ctx: Context, revision: str) -> ConditionUpdate:
        """Progressing after `revision` was rolled back."""
        message = self.record(ctx, revision).message
        serving = f"stable revision {self.stable} keeps serving" if self.stable else "no stable"
        return ConditionUpdate(
            reasons.PROGRESSING,
            ConditionStatus.FALSE,
            reasons.ROLLED_BACK,
            f"revision {revision} was rolled back: {message}; {serving}; it is not retried "
            "until the spec changes",
        )

    def promote(
        self, ctx: Context, revision: str, reason: str, message: str, *, count: bool = True
    ) -> Rollout:
        """`revision` becomes stable. Traffic moves to it, and the previous stable is scaled
        down, in the order `plan.deployment.promotion` decides from here: never at once."""
        previous = self.stable
        result = self.with_record(
            ctx, revision, promoted_at=ctx.now, rejected=False, message=message
        )
        result = replace(
            result,
            stable=revision,
            canary=None,
            step=None,
            progress=ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.PROMOTING,
                f"revision {revision} promoted ({message}); "
                + (f"revision {previous} serves until traffic has moved" if previous else ""),
            ),
        )
        return result.counting("promotion", reason) if count else result

    def reject(
        self, ctx: Context, revision: str, reason: str, message: str, *, count: bool = True
    ) -> Rollout:
        """`revision` is rolled back and not retried until the spec changes."""
        result = self.with_record(ctx, revision, rejected=True, message=message)
        if result.canary == revision:
            result = replace(result, canary=None, step=None)
        result = replace(result, progress=result.rolled_back(ctx, revision))
        return result.counting("rollback", reason) if count else result
