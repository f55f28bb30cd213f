"""The life of a ParityCheck as the controller sees it: observed state in, actions out (pure).

    Pending   sides resolved (revisions pinned in status), probes started where a side
              cannot give hidden states itself, waiting until they are ready
    Running   the runner Job runs; it writes progress and, at the end, the verdict
    Passed / Failed / Error   written by the runner; or Error written here when the
              runner cannot: its Job failed (crash, retries spent, its deadline), it
              ended without a verdict, a probe cannot start, or the check's own
              deadline (from creation, waiting included) passed

Once the check ended, its probes (which hold accelerators) and the runner's RBAC are
deleted, and a runner still running is stopped; a finished runner Job stays for its log
(until its ttlSecondsAfterFinished), the report ConfigMap for good. Nothing here is kept in memory
between reconciles: a restarted operator decides the same from the same objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from infergate.api.enums import ConditionStatus
from infergate.api.parity_check import ParityCheckSpec
from infergate.runner import status as st
from infergate.runner.naming import SIDES, SideName

JSON = dict[str, Any]

COND_RELEASED = "ResourcesReleased"
REASON_PROBE_FAILED = "ProbeFailed"
REASON_NO_VERDICT = "NoVerdict"
REASON_RUNNER_STARTED = "RunnerStarted"
REASON_WAITING_FOR_PROBES = "WaitingForProbes"
REASON_RELEASED = "ChildrenDeleted"
PROBE_RESTARTS_MAX = 3


@dataclass(frozen=True)
class SideState:
    """One side as far as the controller resolved it."""

    revision: str | None = None
    """Revision of an InferenceDeployment side, once known."""
    waiting: str | None = None
    """Why the side cannot be used yet (None: it can)."""
    needs_probe: bool = False
    """A vLLM revision with hidden states compared: a probe must be started."""
    probe_template: Mapping[str, Any] | None = None
    """The revision's Deployment, whose pod template the probe copies."""


@dataclass(frozen=True)
class CheckObservation:
    """Everything one reconcile looked at."""

    check: Mapping[str, Any]
    spec: ParityCheckSpec | None
    invalid: str | None
    now: datetime
    sides: Mapping[SideName, SideState] = field(default_factory=dict)
    probe_pods: Mapping[SideName, Mapping[str, Any]] = field(default_factory=dict)
    job: Mapping[str, Any] | None = None
    runner_pods: Sequence[Mapping[str, Any]] = ()
    children: bool = False
    """Whether probes, a runner Job or runner RBAC exist."""


@dataclass
class CheckActions:
    """What the controller should do now."""

    status: JSON | None = None
    """Fields to merge into status (non-terminal), only when something changed."""
    terminal: JSON | None = None
    """Terminal status fields, written only if the check has not ended meanwhile."""
    create_probes: list[SideName] = field(default_factory=list)
    start_runner: bool = False
    release: bool = False
    """Delete probes and the runner's RBAC, and stop the runner Job if it still runs."""
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, reason, message) Events to post on the check."""


def _status(check: Mapping[str, Any]) -> Mapping[str, Any]:
    return check.get("status") or {}


def _conditions(check: Mapping[str, Any]) -> list[JSON]:
    return [dict(c) for c in _status(check).get("conditions") or []]


def _generation(check: Mapping[str, Any]) -> int | None:
    generation = check["metadata"].get("generation")
    return int(generation) if generation is not None else None


def _created(check: Mapping[str, Any]) -> datetime | None:
    stamp = check["metadata"].get("creationTimestamp")
    if not stamp:
        return None
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of that type in `obj`'s status when it is True."""
    conditions: list[Mapping[str, Any]] = (obj or {}).get("status", {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") == type_ and c.get("status") == "True"), None
    )


def job_finished(job: Mapping[str, Any]) -> bool:
    """Whether a Job completed or failed (its pods are done)."""
    return _condition(job, "Complete") is not None or _condition(job, "Failed") is not None


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return _condition(pod, "Ready") is not None


def _probe_failure(pod: Mapping[str, Any]) -> str | None:
    """Why a probe pod will not become ready, if it will not."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
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


def _runner_failure(
    check: Mapping[str, Any], job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> str:
    failed = _condition(job, "Failed") or {}
    name = job["metadata"]["name"]
    reason, detail = failed.get("reason", "Failed"), failed.get("message", "no message")
    parts = [f"runner Job {name} failed ({reason}: {detail})"]
    runner_error = next(
        (c for c in _conditions(check) if c.get("type") == st.COND_RUNNER_ERROR), None
    )
    if runner_error is not None and runner_error.get("status") == "True":
        parts.append(
            f"last runner error ({runner_error.get('reason')}): {runner_error.get('message')}"
        )
    exits = []
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and terminated.get("exitCode") not in (None, 0):
                exits.append(
                    f"{pod['metadata']['name']} exited {terminated.get('exitCode')} "
                    f"({terminated.get('reason', 'Error')})"
                )
    if exits:
        parts.append("runner pods: " + ", ".join(sorted(exits)))
    return "; ".join(parts)


def _terminal_error(obs: CheckObservation, reason: str, message: str) -> CheckActions:
    fields = st.error_status(
        message, reason, conditions=_conditions(obs.check),
        generation=_generation(obs.check), at=obs.now,
    )  # fmt: skip
    # Deleting what may not exist costs a 404: stop a runner and free probes either way.
    return CheckActions(terminal=fields, release=True, events=[("Warning", reason, message)])


def _pending(obs: CheckObservation, reason: str, message: str, extra: JSON) -> JSON | None:
    """Pending status fields, or None when status already says exactly this."""
    current = _status(obs.check)
    conditions = st.set_condition(
        _conditions(obs.check), st.COND_COMPLETE, ConditionStatus.FALSE, reason, message,
        generation=_generation(obs.check), at=obs.now,
    )  # fmt: skip
    phase = current.get("phase") or "Pending"
    fields: JSON = {"phase": phase, "conditions": conditions, **extra}
    if phase == "Pending":
        fields["observedGeneration"] = _generation(obs.check)
    changed = {k: v for k, v in fields.items() if current.get(k) != v}
    return changed or None


def decide(obs: CheckObservation) -> CheckActions:
    """The next actions for one check."""
    check = obs.check
    phase = _status(check).get("phase")
    if st.is_terminal(phase):
        return _after_end(obs)
    if obs.invalid is not None or obs.spec is None:
        return _terminal_error(obs, st.REASON_INVALID, obs.invalid or "spec is invalid")
    created = _created(check)
    deadline = obs.spec.deadline_seconds
    if created is not None and obs.now >= created + timedelta(seconds=deadline):
        waiting = next(
            (c.get("message") for c in _conditions(check) if c.get("type") == st.COND_COMPLETE),
            None,
        )
        progress = _status(check).get("progress") or {}
        where = f"phase {phase or 'Pending'}"
        if progress:
            where += f", {progress.get('done')}/{progress.get('total')} prompts done"
        if waiting:
            where += f", last: {waiting}"
        return _terminal_error(
            obs,
            st.REASON_DEADLINE,
            f"no verdict within deadlineSeconds={deadline} of the check's creation ({where})",
        )
    if obs.job is not None:
        return _with_runner(obs)
    return _before_runner(obs)


def _after_end(obs: CheckObservation) -> CheckActions:
    released = any(
        c.get("type") == COND_RELEASED and c.get("status") == "True" for c in _conditions(obs.check)
    )
    if released and not obs.children:
        return CheckActions()
    conditions = st.set_condition(
        _conditions(obs.check), COND_RELEASED, ConditionStatus.TRUE, REASON_RELEASED,
        "probes and runner RBAC deleted, runner stopped if it still ran; the finished runner "
        "Job stays for its log until ttlSecondsAfterFinished, the report ConfigMap for good",
        generation=_generation(obs.check), at=obs.now,
    )  # fmt: skip
    actions = CheckActions(
        status=None if released else {"conditions": conditions},
        release=obs.children,
    )
    if not released:
        status = _status(obs.check)
        phase = str(status.get("phase"))
        summary = (status.get("verdict") or {}).get("summary") or f"check ended {phase}"
        kind = "Normal" if phase == "Passed" else "Warning"
        actions.events.append((kind, f"Check{phase}", str(summary)))
    return actions


def _with_runner(obs: CheckObservation) -> CheckActions:
    job = obs.job
    assert job is not None  # noqa: S101 - checked by the caller
    if _condition(job, "Failed") is not None:
        return _terminal_error(
            obs, st.REASON_RUNNER_FAILED, _runner_failure(obs.check, job, obs.runner_pods)
        )
    if _condition(job, "Complete") is not None:
        return _terminal_error(
            obs,
            REASON_NO_VERDICT,
            f"runner Job {job['metadata']['name']} completed without writing a verdict",
        )
    return CheckActions()


def _before_runner(obs: CheckObservation) -> CheckActions:
    spec = obs.spec
    assert spec is not None  # noqa: S101 - checked by the caller
    pinned: JSON = {}
    for side in SIDES:
        state = obs.sides.get(side, SideState())
        if state.revision is not None:
            pinned[f"{side}Revision"] = state.revision
    waiting = [
        f"{side}: {obs.sides[side].waiting}"
        for side in SIDES
        if obs.sides.get(side, SideState()).waiting
    ]
    if waiting:
        return CheckActions(status=_pending(obs, st.REASON_PENDING, "; ".join(waiting), pinned))
    actions = CheckActions()
    not_ready = []
    for side in SIDES:
        state = obs.sides.get(side, SideState())
        if not state.needs_probe:
            continue
        pod = obs.probe_pods.get(side)
        if pod is None:
            actions.create_probes.append(side)
            not_ready.append(f"{side} probe starting")
            continue
        failure = _probe_failure(pod)
        if failure is not None:
            return _terminal_error(obs, REASON_PROBE_FAILED, failure)
        if not _pod_ready(pod):
            not_ready.append(f"{side} probe {pod['metadata']['name']} not ready yet")
    if actions.create_probes:
        actions.events.append(
            (
                "Normal",
                "ProbeStarted",
                f"hidden-state probes started for {', '.join(actions.create_probes)}",
            )
        )
    if not_ready:
        actions.status = _pending(obs, REASON_WAITING_FOR_PROBES, "; ".join(not_ready), pinned)
        return actions
    actions.start_runner = True
    actions.status = _pending(obs, REASON_RUNNER_STARTED, "runner Job started", pinned)
    actions.events.append(("Normal", REASON_RUNNER_STARTED, "runner Job started"))
    return actions
