"""What the controller sees of a ParityCheck and its children, as small immutable records.

Pure: a body from a watch stream in, a record out. The kopf indexes keep these records
(never whole objects: an inline suite stays out of memory), so a reconcile of a check
reads everything it decides from without one API call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from infergate.api.base import PARITY_CHECK_KIND
from infergate.api.enums import CheckPhase
from infergate.api.parity_check import ParityCheckSpec, Side
from infergate.api.shadow import CheckSource
from infergate.jsontypes import JSON, JSONMap
from infergate.plan.check.status import spec_digest
from infergate.plan.metadata import OwnerKey, parse_time
from infergate.plan.ownership import controller_uid
from infergate.plan.phases import check_phase
from infergate.render.check_children import RunnerSettings
from infergate.render.check_names import (
    LABEL_CHECK,
    LABEL_CHECK_NAMESPACE,
    LABEL_CHECK_UID,
    LABEL_ROLE,
    LABEL_SIDE,
    check_label_value,
)
from infergate.render.labels import LABEL_CHECK_PURPOSE
from infergate.render.mirror import mirror_name

# The parts of a check's status the controller decides from (a verdict's reasons and
# metrics are the runner's to write and the people's to read).
_STATUS_KEPT = (
    "phase",
    "observedGeneration",
    "conditions",
    "baselineRevision",
    "candidateRevision",
    "progress",
    "completionTime",
    "reportRef",
    "runnerServiceAccount",
)
_VERDICT_KEPT = ("passed", "outcome", "summary", "specDigest", "generation")
PROBE_RESTARTS_MAX = 3


@dataclass(frozen=True)
class SideRef:
    """One side of a check as its spec names it."""

    deployment: str | None
    """InferenceDeployment name (same namespace); None for an endpoint or a golden record
    (neither has pods the controller waits for or probes)."""
    revision: str | None
    """Revision named in the spec; None: the deployment's stable one."""
    golden: bool = False
    """A golden record (the runner reads it from the operator's store)."""


@dataclass(frozen=True)
class CheckSpecView:
    """The parts of a valid ParityCheck spec the controller decides from."""

    baseline: SideRef
    candidate: SideRef
    hidden_states: bool
    deadline_seconds: int
    runner: RunnerSettings
    suite_config_map: str | None
    mirror_service: str | None = None
    """A shadow check: the mirror Service the runner reads (its candidate deployment's)."""

    def side(self, name: str) -> SideRef:
        return self.baseline if name == "baseline" else self.candidate


@dataclass(frozen=True)
class ObservedParityCheck:
    """A ParityCheck: identity, the spec it was made with, and how far it got."""

    namespace: str
    name: str
    uid: str
    generation: int | None
    resource_version: str
    created: datetime | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_uid: str | None
    spec: CheckSpecView | None
    invalid: str | None
    """Why the spec cannot be used (None when `spec` is set)."""
    digest: str
    """sha256 of its spec as canonical JSON."""
    status: JSONMap

    @property
    def key(self) -> OwnerKey:
        return OwnerKey(self.namespace, self.name)

    @property
    def reference(self) -> JSON:
        """What an Event names as its involved object."""
        return {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": PARITY_CHECK_KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "resourceVersion": self.resource_version,
            },
        }


@dataclass(frozen=True)
class CheckChild:
    """An object named after a check: a probe, the runner Job or its pods, RBAC, a report."""

    kind: str
    name: str
    uid: str
    owner_uid: str | None
    """uid of its controlling owner (the check's uid when the operator made it); in the
    runner namespace, the check uid its labels name (nothing there has an owner)."""
    namespace: str = ""
    """Where it lives: the check's namespace, or the runner namespace."""
    role: str | None = None
    side: str | None = None
    ready: bool = False
    """Pods: Ready."""
    failure: str | None = None
    """Probe pods: why it will not become ready. Jobs: the Failed condition's message."""
    complete: bool = False
    """Jobs: Complete."""
    failed: bool = False
    """Jobs: Failed."""
    exit_note: str | None = None
    """Runner pods: `<pod> exited <code> (<reason>)` for a non-zero exit."""
    finished: bool = False
    """Pods: Succeeded or Failed (its containers will not run again)."""


def _side(side: Side) -> SideRef:
    if side.golden is not None:
        return SideRef(deployment=None, revision=None, golden=True)
    ref = side.inference_deployment_ref
    return SideRef(deployment=ref.name if ref is not None else None, revision=side.revision)


def _view(body: JSONMap) -> tuple[CheckSpecView | None, str | None]:
    try:
        spec = ParityCheckSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        return None, f"spec is invalid: {error}"
    runner = spec.runner
    source = spec.suite.config_map_ref if spec.suite is not None else None
    shadow = spec.source is CheckSource.SHADOW
    candidate = spec.candidate.inference_deployment_ref
    return (
        CheckSpecView(
            baseline=_side(spec.baseline),
            candidate=_side(spec.candidate),
            # A shadow check compares served answers only: no probe, no hidden states.
            hidden_states=spec.hidden_states.enabled and not shadow,
            deadline_seconds=spec.deadline_seconds,
            runner=RunnerSettings(
                active_deadline_seconds=runner.active_deadline_seconds,
                backoff_limit=runner.backoff_limit,
                resources=runner.resources.to_kube() if runner.resources else None,
                concurrency=runner.concurrency,
            ),
            suite_config_map=source.name if source is not None else None,
            mirror_service=(
                mirror_name(candidate.name) if shadow and candidate is not None else None
            ),
        ),
        None,
    )


def _kept_status(status: JSONMap) -> JSON:
    kept: JSON = {k: status[k] for k in _STATUS_KEPT if k in status}
    verdict = status.get("verdict")
    if isinstance(verdict, Mapping):
        kept["verdict"] = {k: verdict[k] for k in _VERDICT_KEPT if k in verdict}
    return kept


def observe_parity_check(body: JSONMap) -> ObservedParityCheck:
    """The record of one ParityCheck (every check, the operator's and people's)."""
    metadata = body.get("metadata") or {}
    spec, invalid = _view(body)
    generation = metadata.get("generation")
    return ObservedParityCheck(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid") or ""),
        generation=int(generation) if isinstance(generation, int) else None,
        resource_version=str(metadata.get("resourceVersion") or ""),
        created=parse_time(metadata.get("creationTimestamp")),
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        owner_uid=controller_uid(body),
        spec=spec,
        invalid=invalid,
        digest=spec_digest(body.get("spec") or {}),
        status=_kept_status(body.get("status") or {}),
    )


def check_key(namespace: str, name: str) -> OwnerKey:
    """Where a check's children are indexed: its namespace and its label value."""
    return OwnerKey(namespace, check_label_value(name))


def child_key(body: JSONMap, runner_namespace: str) -> OwnerKey | None:
    """The check a child is labelled with (runner pods too, whose owner is the Job): of its
    own namespace, or, in the runner namespace, of the namespace its labels name (trusted
    there only: no tenant writes to the runner namespace, while a label in a tenant's
    namespace could name any other)."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    value = labels.get(LABEL_CHECK)
    if not value:
        return None
    namespace = str(metadata.get("namespace") or "")
    if namespace == runner_namespace:
        check_namespace = labels.get(LABEL_CHECK_NAMESPACE)
        return OwnerKey(str(check_namespace), str(value)) if check_namespace else None
    return OwnerKey(namespace, str(value))


def _true(body: JSONMap, type_: str) -> Mapping[str, Any] | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") == type_ and c.get("status") == "True"), None
    )


def _probe_failure(body: JSONMap, name: str) -> str | None:
    status = body.get("status") or {}
    if status.get("phase") == "Failed":
        return f"probe pod {name} failed: {status.get('message') or status.get('reason') or ''}"
    for container in status.get("containerStatuses") or []:
        restarts = int(container.get("restartCount") or 0)
        if restarts >= PROBE_RESTARTS_MAX:
            last = (container.get("lastState") or {}).get("terminated") or {}
            return (
                f"probe pod {name} restarted {restarts} times (last exit code "
                f"{last.get('exitCode', '?')}, {last.get('reason', 'unknown')}); see its log"
            )
    return None


def _exit_note(body: JSONMap, name: str) -> str | None:
    for container in (body.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") not in (None, 0):
            return (
                f"{name} exited {terminated.get('exitCode')} ({terminated.get('reason', 'Error')})"
            )
    return None


def observe_child(body: JSONMap, runner_namespace: str) -> CheckChild:
    """The record of one object a check owns (or that carries a check's name); in
    `runner_namespace`, its owner is the check uid of its labels (see `child_key`)."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    kind = str(body.get("kind") or "")
    name = str(metadata.get("name"))
    namespace = str(metadata.get("namespace") or "")
    owner = controller_uid(body)
    if namespace == runner_namespace and owner is None:
        owner = labels.get(LABEL_CHECK_UID) or None
    child = CheckChild(
        kind=kind,
        name=name,
        uid=str(metadata.get("uid") or ""),
        owner_uid=owner,
        namespace=namespace,
        role=labels.get(LABEL_ROLE),
        side=labels.get(LABEL_SIDE),
    )
    if kind == "Pod":
        return replace(
            child,
            ready=_true(body, "Ready") is not None,
            failure=_probe_failure(body, name),
            exit_note=_exit_note(body, name),
            finished=(body.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        )
    if kind == "Job":
        failed = _true(body, "Failed")
        return replace(
            child,
            complete=_true(body, "Complete") is not None,
            failed=failed is not None,
            failure=None
            if failed is None
            else f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}",
        )
    return child


def previous_report(
    check: ObservedParityCheck, others: Sequence[ObservedParityCheck]
) -> str | None:
    """The report of the last passing check judging a revision of the same InferenceDeployment,
    of the same purpose: a drift run's regression is judged against the last passing drift
    run, and a canary's never against a drift run (whose figures, a revision against its own
    record, would leave a canary no room for what it changes)."""
    if check.spec is None or check.spec.candidate.deployment is None:
        return None
    deployment = check.spec.candidate.deployment
    purpose = check.labels.get(LABEL_CHECK_PURPOSE)
    passed = []
    for other in others:
        if other.namespace != check.namespace or other.name == check.name or other.spec is None:
            continue
        if other.labels.get(LABEL_CHECK_PURPOSE) != purpose:
            continue
        report = (other.status.get("reportRef") or {}).get("name")
        if (
            other.spec.candidate.deployment == deployment
            and check_phase(other.status.get("phase")) is CheckPhase.PASSED
            and report
        ):
            passed.append((str(other.status.get("completionTime") or ""), str(report)))
    return max(passed)[1] if passed else None
