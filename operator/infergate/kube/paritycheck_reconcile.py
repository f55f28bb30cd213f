"""One reconcile of a ParityCheck: gather what is observed, decide (pure), write.

Gather reads the check, resolves its sides as far as the cluster allows (revision,
its pinned config, its Service's readiness, the Deployment a probe copies), and reads
the probes and the runner Job. `runner.lifecycle.decide` turns that into actions; this
module carries them out and returns what it did, for the controller's Events.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from infergate.api.parity_check import ParityCheck, ParityCheckSpec
from infergate.errors import NotFoundError
from infergate.kube.paritycheck_api import write_terminal_status
from infergate.kube.paritycheck_children import CheckChildren
from infergate.render.labels import revision_object_name
from infergate.render.launch import HTTP_PORT
from infergate.runner import children, lifecycle
from infergate.runner.naming import (
    LABEL_ROLE,
    ROLE_RUNNER,
    SIDES,
    SideName,
    check_selector,
    probe_name,
    runner_name,
)
from infergate.runner.sides import (
    SideResolutionError,
    needs_probe,
    parse_revision_config,
    service_url,
    side_revision,
)

JSON = dict[str, Any]
RUNNER_IMAGE_ENV = "INFERGATE_RUNNER_IMAGE"
Emit = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Reconciled:
    """What one reconcile decided; `done` once the check ended and its children are gone."""

    actions: lifecycle.CheckActions
    phase: str | None
    done: bool


def runner_image(spec: ParityCheckSpec) -> str:
    """The runner's image: the check's, else the operator's setting, else the default."""
    return spec.runner.image or os.environ.get(RUNNER_IMAGE_ENV) or children.DEFAULT_RUNNER_IMAGE


def _side_state(
    api: CheckChildren, check: Mapping[str, Any], spec: ParityCheckSpec, side: SideName
) -> lifecycle.SideState:
    ref = getattr(spec, side).inference_deployment_ref
    if ref is None:
        return lifecycle.SideState()  # an endpoint: the runner checks it can be reached
    pinned = (check.get("status") or {}).get(f"{side}Revision")
    try:
        revision = side_revision(getattr(spec, side), api.inference_deployment(ref.name), pinned)
    except SideResolutionError as err:
        return lifecycle.SideState(waiting=str(err))
    object_name = revision_object_name(ref.name, revision)
    config_map = api.config_map(object_name)
    if config_map is None:
        return lifecycle.SideState(
            revision=revision,
            waiting=f"ConfigMap {object_name} of revision {revision} does not exist (yet)",
        )
    engine = parse_revision_config(config_map).engine
    try:
        service_url(api, object_name, f"InferenceDeployment {ref.name} revision {revision}")
    except SideResolutionError as err:
        return lifecycle.SideState(revision=revision, waiting=str(err))
    probe = needs_probe(engine, spec.hidden_states.enabled)
    template = api.deployment(object_name) if probe else None
    if probe and template is None:
        return lifecycle.SideState(
            revision=revision, waiting=f"Deployment {object_name} does not exist (yet)"
        )
    return lifecycle.SideState(revision=revision, needs_probe=probe, probe_template=template)


def observe(
    api: CheckChildren, check: Mapping[str, Any], now: datetime
) -> lifecycle.CheckObservation:
    """Everything a decision about `check` needs."""
    name = check["metadata"]["name"]
    status = check.get("status") or {}
    if status.get("phase") in ("Passed", "Failed", "Error"):
        return lifecycle.CheckObservation(
            check=check, spec=None, invalid=None, now=now,
            children=api.children_exist(check_selector(name)),
        )  # fmt: skip
    try:
        spec = ParityCheck.model_validate(check).spec
    except ValidationError as err:
        return lifecycle.CheckObservation(
            check=check, spec=None, invalid=f"spec is invalid: {err}", now=now, children=True
        )
    try:
        sides = {side: _side_state(api, check, spec, side) for side in SIDES}
    except SideResolutionError as err:  # a revision whose pinned config is unreadable
        return lifecycle.CheckObservation(
            check=check, spec=None, invalid=str(err), now=now, children=True
        )
    probes = {
        side: pod
        for side in SIDES
        if sides[side].needs_probe and (pod := api.pod(probe_name(name, side))) is not None
    }
    job = api.job(runner_name(name))
    runner_pods = (
        api.pods(f"{check_selector(name)},{LABEL_ROLE}={ROLE_RUNNER}") if job is not None else []
    )
    return lifecycle.CheckObservation(
        check=check, spec=spec, invalid=None, now=now, sides=sides, probe_pods=probes,
        job=job, runner_pods=runner_pods, children=True,
    )  # fmt: skip


def _previous_report(
    api: CheckChildren, check: Mapping[str, Any], spec: ParityCheckSpec
) -> str | None:
    """Report of the last passing check of the same InferenceDeployment (for regression)."""
    ref = spec.candidate.inference_deployment_ref
    if ref is None:
        return None
    passed = []
    for other in api.list_checks():
        if other["metadata"]["name"] == check["metadata"]["name"]:
            continue
        other_ref = (other.get("spec") or {}).get("candidate", {}).get("inferenceDeploymentRef")
        status = other.get("status") or {}
        if (other_ref or {}).get("name") == ref.name and status.get("phase") == "Passed":
            report = (status.get("reportRef") or {}).get("name")
            if report:
                passed.append((str(status.get("completionTime") or ""), str(report)))
    return max(passed)[1] if passed else None


def _start_runner(
    api: CheckChildren, check: Mapping[str, Any], obs: lifecycle.CheckObservation
) -> None:
    spec = obs.spec
    assert spec is not None  # noqa: S101 - only decided for a valid spec
    name = check["metadata"]["name"]
    deployments, services, config_maps = [], [], []
    for side in SIDES:
        ref = getattr(spec, side).inference_deployment_ref
        state = obs.sides[side]
        if ref is not None and state.revision is not None:
            object_name = revision_object_name(ref.name, state.revision)
            deployments.append(ref.name)
            services.append(object_name)
            config_maps.append(object_name)
        if state.needs_probe:
            services.append(probe_name(name, side))
    if spec.suite.config_map_ref is not None:
        config_maps.append(spec.suite.config_map_ref.name)
    previous = _previous_report(api, check, spec)
    if previous is not None:
        config_maps.append(previous)
    for manifest in children.runner_rbac(
        check, deployments=deployments, services=services, config_maps=config_maps
    ):
        api.create(manifest)
    api.create(children.report_config_map(check))
    api.create(children.runner_job(check, spec, image=runner_image(spec), previous_report=previous))


def _release(api: CheckChildren, name: str) -> None:
    """Free the probes' accelerators, stop a runner still running, drop its permissions.

    A finished runner Job is kept for its log until its ttlSecondsAfterFinished; deleting
    it at the moment its pod exits would race the pod's own completion.
    """
    for side in SIDES:
        api.delete("Pod", probe_name(name, side))
        api.delete("Service", probe_name(name, side))
    runner = runner_name(name)
    job = api.job(runner)
    if job is not None and not lifecycle.job_finished(job):
        api.delete("Job", runner)
    for kind in ("RoleBinding", "Role", "ServiceAccount"):
        api.delete(kind, runner)


def reconcile(api: CheckChildren, name: str, now: datetime, emit: Emit) -> Reconciled:
    """Gather, decide, write for one check."""
    try:
        check = api.get_check(name)
    except NotFoundError:
        return Reconciled(lifecycle.CheckActions(), None, done=True)
    obs = observe(api, check, now)
    actions = lifecycle.decide(obs)
    if actions.status:
        # Conditional on what was observed: never lands on a verdict written meanwhile.
        version = check["metadata"].get("resourceVersion")
        api.patch_check_status(name, actions.status, resource_version=version)
    for side in actions.create_probes:
        template = obs.sides[side].probe_template
        assert template is not None  # noqa: S101 - a side needing a probe has its template
        api.create(children.probe_service(check, side, HTTP_PORT))
        api.create(children.probe_pod(check, side, template))
    if actions.start_runner:
        _start_runner(api, check, obs)
    ended = False
    if actions.terminal is not None:
        ended = write_terminal_status(api, name, actions.terminal)
    if actions.release:
        _release(api, name)
    for event in actions.events if actions.terminal is None or ended else []:
        emit(*event)
    phase = (check.get("status") or {}).get("phase")
    if actions.terminal is not None and ended:
        phase = actions.terminal.get("phase")
    done = phase in ("Passed", "Failed", "Error") and not actions.release and not actions.status
    return Reconciled(actions, phase, done=done)
