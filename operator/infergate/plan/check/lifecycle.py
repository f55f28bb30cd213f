"""The life of a ParityCheck as the controller sees it: observed state in, a plan out (pure).

    Pending   sides resolved (revisions pinned in status), probes started where a side
              cannot give hidden states itself, waiting until they are ready
    Running   the runner Job runs; it writes progress and, at the end, the verdict
    Passed / Failed / Inconclusive / Error
              written by the runner; or Error written here when the runner cannot: its
              Job failed (crash, retries spent, its deadline), it ended without a
              verdict, a probe cannot start, a child of the check's name is not the
              check's own, or the check's own deadline (from creation, waiting
              included) passed

Once the check ended, its probes (which hold accelerators) and the runner's RBAC are
deleted, and a runner still running is stopped; its NetworkPolicy goes once no runner pod
runs any more; a finished runner Job stays for its log (until its
ttlSecondsAfterFinished), the report ConfigMap for good. Only children the
check owns are ever deleted or counted as started: an object someone else made under a
child's name ends the check in Error, untouched. The runner's Job, ServiceAccount and
NetworkPolicy are looked for in the runner namespace only (one of the same name and
labels in the check's namespace is a tenant's, never the runner's); what is left of them
once the check is gone is `plan.check.cleanup`'s. Nothing is kept in memory between
reconciles: a restarted operator decides the same from the same objects.

`decide(CheckState) -> CheckPlan` is the entry point (the records in
`plan.check.state`); what the runner is given when it starts is `plan.check.runner`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from infergate.api.check_status import ProgressStage
from infergate.api.enums import CheckPhase, ConditionStatus
from infergate.jsontypes import JSON
from infergate.plan import reasons
from infergate.plan.check.observed import CheckChild, ObservedParityCheck
from infergate.plan.check.runner import (
    check_body,
    probe_stand_in,
    runner_objects,
    runner_peers,
)
from infergate.plan.check.sides import group_hidden_states
from infergate.plan.check.state import CheckPlan, CheckState
from infergate.plan.check.status import check_conditions, error_status
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.phases import is_check_terminal
from infergate.render.check_children import (
    probe_pod,
    probe_service,
    runner_network_policy,
)
from infergate.render.check_names import (
    ROLE_PROBE,
    ROLE_RUNNER,
    SIDES,
    probe_name,
    report_name,
    runner_account_name,
    runner_name,
)
from infergate.render.launch import HTTP_PORT

RELEASED_MESSAGE = (
    "probes, runner RBAC and NetworkPolicy deleted, runner stopped if it still ran; the "
    "finished runner Job stays for its log until ttlSecondsAfterFinished, the report "
    "ConfigMap for good"
)
_RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding")


# -- the decision -------------------------------------------------------------------------


def decide(state: CheckState) -> CheckPlan:
    """The next actions for one check."""
    check = state.check
    phase = check.status.get("phase")
    if is_check_terminal(phase):
        return _after_end(state)
    if check.spec is None:
        return _terminal_error(state, reasons.CHECK_INVALID, check.invalid or "spec is invalid")
    foreign = _foreign_children(state)
    if foreign:
        return _terminal_error(state, reasons.CHECK_CHILD_NOT_OURS, foreign)
    deadline = _deadline(check)
    if deadline is not None and state.now >= deadline:
        return _terminal_error(state, reasons.CHECK_DEADLINE_EXCEEDED, _deadline_message(check))
    plan = _with_runner(state) if _runner_child(state, "Job") else None
    if plan is None:
        plan = _before_runner(state)
    if deadline is not None:
        plan.wake_in = max(0.0, (deadline - state.now).total_seconds())
    return plan


def _deadline(check: ObservedParityCheck) -> datetime | None:
    if check.created is None or check.spec is None:
        return None
    return check.created + timedelta(seconds=check.spec.deadline_seconds)


def _deadline_message(check: ObservedParityCheck) -> str:
    assert check.spec is not None  # noqa: S101 - only asked of a valid check
    phase = check.status.get("phase") or "Pending"
    waiting = next(
        (
            c.get("message")
            for c in check.status.get("conditions") or []
            if c.get("type") == reasons.CHECK_COMPLETE
        ),
        None,
    )
    progress = check.status.get("progress") or {}
    where = f"phase {phase}"
    if progress:
        where += f", {progress.get('done')}/{progress.get('total')} prompts done"
        if progress.get("stage") == ProgressStage.BASELINE_NOISE:
            where += " measuring the baseline revision's own noise"
    if waiting:
        where += f", last: {waiting}"
    return (
        f"no verdict within deadlineSeconds={check.spec.deadline_seconds} of the check's "
        f"creation ({where})"
    )


def _child(state: CheckState, kind: str, name: str) -> CheckChild | None:
    """A child of the check's namespace."""
    namespace = state.check.namespace
    return next(
        (
            c
            for c in state.children
            if c.kind == kind and c.name == name and c.namespace == namespace
        ),
        None,
    )


def _runner_child(state: CheckState, kind: str) -> CheckChild | None:
    """The runner's Job, ServiceAccount or NetworkPolicy: in the runner namespace only."""
    name = runner_account_name(state.check.uid)
    return next(
        (
            c
            for c in state.children
            if c.kind == kind and c.name == name and c.namespace == state.runner_namespace
        ),
        None,
    )


def _owned(state: CheckState, child: CheckChild) -> bool:
    return child.owner_uid == state.check.uid


def _expected_names(state: CheckState) -> dict[tuple[str, str], set[str]]:
    """The children a check makes, by namespace and kind (the runner's pods are named by
    the Job)."""
    check = state.check
    probes = {probe_name(check.name, side) for side in SIDES}
    role = runner_name(check.name)
    runner = runner_account_name(check.uid)
    return {
        (check.namespace, "Pod"): probes,
        (check.namespace, "Service"): probes,
        (check.namespace, "Role"): {role},
        (check.namespace, "RoleBinding"): {role},
        (check.namespace, "ConfigMap"): {report_name(check.name)},
        (state.runner_namespace, "Job"): {runner},
        (state.runner_namespace, "ServiceAccount"): {runner},
        (state.runner_namespace, "NetworkPolicy"): {runner},
    }


def _foreign_children(state: CheckState) -> str | None:
    """Why an object under one of the check's child names is not the check's own, if one is."""
    expected = _expected_names(state)
    for child in state.children:
        wanted = expected.get((child.namespace, child.kind), set())
        if child.name in wanted and not _owned(state, child):
            return (
                f"{child.kind} {child.name} exists and is not owned by this check (uid "
                f"{state.check.uid}); it is neither used nor deleted: remove it, or the check "
                "cannot run"
            )
    return None


def _generation(state: CheckState) -> int | None:
    return state.check.generation


def foreign_child(state: CheckState, message: str) -> CheckPlan:
    """The plan when a create found a child's name taken by an object the check does not own."""
    return _terminal_error(state, reasons.CHECK_CHILD_NOT_OURS, message)


def _terminal_error(state: CheckState, reason: str, message: str) -> CheckPlan:
    fields = error_status(
        message, reason, status=state.check.status, generation=_generation(state), at=state.now
    )
    return CheckPlan(terminal=fields, events=[(True, reason, message)], delete=_release(state))


def _runner_runs(state: CheckState) -> bool:
    """Whether a runner Job of the check's is active or a runner pod has not finished."""
    return any(
        (c.kind == "Job" and _owned(state, c) and not (c.complete or c.failed))
        or (
            c.kind == "Pod"
            and c.role == ROLE_RUNNER
            and c.namespace == state.runner_namespace
            and not c.finished
        )
        for c in state.children
    )


def _release(state: CheckState) -> list[CheckChild]:
    """Owned probes and RBAC, the runner Job while it still runs, and the runner's
    NetworkPolicy once no runner pod runs (a pod being stopped stays confined)."""
    runs = _runner_runs(state)
    return [
        child
        for child in state.children
        if _owned(state, child)
        and (
            (child.kind in ("Pod", "Service") and child.role == ROLE_PROBE)
            or (child.kind in _RBAC_KINDS and child.role == ROLE_RUNNER)
            or (child.kind == "Job" and not (child.complete or child.failed))
            or (child.kind == "NetworkPolicy" and child.role == ROLE_RUNNER and not runs)
        )
    ]


def _after_end(state: CheckState) -> CheckPlan:
    check = state.check
    released = any(
        c.get("type") == reasons.CHECK_RELEASED and c.get("status") == "True"
        for c in check.status.get("conditions") or []
    )
    leftovers = _release(state)
    if released and not leftovers:
        return CheckPlan()
    plan = CheckPlan(delete=leftovers)
    if not released:
        update = ConditionUpdate(
            reasons.CHECK_RELEASED,
            ConditionStatus.TRUE,
            reasons.CHECK_CHILDREN_DELETED,
            RELEASED_MESSAGE,
        )
        plan.status = {
            "conditions": check_conditions(
                check.status, [update], generation=_generation(state), at=state.now
            )
        }
        phase = str(check.status.get("phase"))
        summary = (check.status.get("verdict") or {}).get("summary") or f"check ended {phase}"
        plan.events.append((phase != CheckPhase.PASSED.value, f"Check{phase}", str(summary)))
    return plan


def _runner_failure(state: CheckState, job: CheckChild) -> str:
    parts = [f"runner Job {job.name} failed ({job.failure or 'Failed'})"]
    runner_error = next(
        (
            c
            for c in state.check.status.get("conditions") or []
            if c.get("type") == reasons.CHECK_RUNNER_ERROR and c.get("status") == "True"
        ),
        None,
    )
    if runner_error is not None:
        parts.append(
            f"last runner error ({runner_error.get('reason')}): {runner_error.get('message')}"
        )
    exits = sorted(
        c.exit_note
        for c in state.children
        if c.kind == "Pod" and c.role == ROLE_RUNNER and c.exit_note and _owned_by_job(c, job)
    )
    if exits:
        parts.append("runner pods: " + ", ".join(exits))
    return "; ".join(parts)


def _owned_by_job(pod: CheckChild, job: CheckChild) -> bool:
    # The Job names its pods `<job>-<suffix>`; only its own pods explain its failure.
    return pod.name.startswith(f"{job.name}-")


def _unrecorded_account(state: CheckState) -> JSON | None:
    """The runner's ServiceAccount, when the check owns it but its status does not name it
    (the operator stopped between creating it and recording it)."""
    account = _runner_child(state, "ServiceAccount")
    if account is None or not _owned(state, account):
        return None
    recorded = state.check.status.get("runnerServiceAccount") or {}
    if recorded.get("name") == account.name and recorded.get("uid") == account.uid:
        return None
    return {"name": account.name, "uid": account.uid}


def _with_runner(state: CheckState) -> CheckPlan:
    job = _runner_child(state, "Job")
    assert job is not None  # noqa: S101 - checked by the caller
    account = _unrecorded_account(state)
    if account is not None:
        return CheckPlan(status={"runnerServiceAccount": account})
    policy = _runner_child(state, "NetworkPolicy")
    if policy is None and not (job.complete or job.failed):
        # Never unconfined for long: made again if it went (or a check predates it).
        policy_manifest = runner_network_policy(
            check_body(state.check), runner_peers(state), runner_namespace=state.runner_namespace
        )
        return CheckPlan(create=[policy_manifest])
    if job.failed:
        return _terminal_error(state, reasons.CHECK_RUNNER_FAILED, _runner_failure(state, job))
    if job.complete:
        return _terminal_error(
            state,
            reasons.CHECK_NO_VERDICT,
            f"runner Job {job.name} completed without writing a verdict",
        )
    return CheckPlan()


def _pending(state: CheckState, reason: str, message: str, pinned: JSON) -> JSON | None:
    """Pending status fields, or None when status already says exactly this."""
    current = state.check.status
    update = ConditionUpdate(reasons.CHECK_COMPLETE, ConditionStatus.FALSE, reason, message)
    conditions = check_conditions(current, [update], generation=_generation(state), at=state.now)
    phase = current.get("phase") or CheckPhase.PENDING.value
    fields: JSON = {"phase": phase, "conditions": conditions, **pinned}
    if phase == CheckPhase.PENDING.value:
        fields["observedGeneration"] = _generation(state)
    changed = {k: v for k, v in fields.items() if current.get(k) != v}
    return changed or None


def _before_runner(state: CheckState) -> CheckPlan:
    check = state.check
    pinned: JSON = {
        f"{side}Revision": view.revision
        for side, view in state.sides.items()
        if view.revision is not None
    }
    invalid = [f"{side}: {view.invalid}" for side, view in state.sides.items() if view.invalid]
    if invalid:
        return _terminal_error(state, reasons.CHECK_INVALID, "; ".join(invalid))
    waiting = [f"{side}: {view.waiting}" for side, view in state.sides.items() if view.waiting]
    if waiting:
        return CheckPlan(
            status=_pending(state, reasons.CHECK_WAITING_FOR_SIDES, "; ".join(waiting), pinned)
        )
    hidden = check.spec.hidden_states if check.spec is not None else True
    unprobed = group_hidden_states(state.sides, hidden)
    if unprobed is not None:
        fields = error_status(
            unprobed, reasons.CHECK_HIDDEN_STATES_UNAVAILABLE, status=check.status,
            generation=_generation(state), at=state.now, metric="hiddenStates",
            phase=CheckPhase.INCONCLUSIVE,
        )  # fmt: skip
        return CheckPlan(
            terminal=fields,
            events=[(True, reasons.CHECK_HIDDEN_STATES_UNAVAILABLE, unprobed)],
            delete=_release(state),
        )
    plan = CheckPlan()
    starting: list[str] = []
    not_ready: list[str] = []
    for side, view in state.sides.items():
        if not view.needs_probe:
            continue
        pod = _child(state, "Pod", probe_name(check.name, side))
        if pod is None:
            assert view.probe_template is not None  # noqa: S101 - a probe side has its template
            stand_in = probe_stand_in(view)
            plan.create += [
                probe_service(
                    check_body(check), side, HTTP_PORT, hidden_states=hidden, stand_in=stand_in
                ),
                probe_pod(
                    check_body(check),
                    side,
                    view.probe_template,
                    hidden_states=hidden,
                    fingerprint_image=state.runner_image,
                    stand_in=stand_in,
                    pull_secrets=state.pull_secrets,
                ),
            ]
            starting.append(side)
            not_ready.append(f"{side} probe starting")
            continue
        if pod.failure is not None:
            return _terminal_error(state, reasons.CHECK_PROBE_FAILED, pod.failure)
        if not pod.ready:
            not_ready.append(f"{side} probe {pod.name} not ready yet")
    if starting:
        plan.events.append(
            (
                False,
                reasons.CHECK_PROBE_STARTED,
                f"hidden-state probes started for {', '.join(starting)}",
            )
        )
    if not_ready:
        plan.status = _pending(
            state, reasons.CHECK_WAITING_FOR_PROBES, "; ".join(not_ready), pinned
        )
        return plan
    plan.create += runner_objects(state)
    plan.status = _pending(state, reasons.CHECK_RUNNER_STARTED, "runner Job started", pinned)
    plan.events.append((False, reasons.CHECK_RUNNER_STARTED, "runner Job started"))
    return plan
