"""What a ParityCheck's runner is given: the objects it runs with, and what it may reach (pure).

The runner starts only after both sides are ready. Its NetworkPolicy (first, so nothing
runs unconfined) lets it reach exactly its sides' pods, their probes, a shadow check's
mirror and the API server; its RBAC names exactly the objects it reads; its report
ConfigMap starts empty; its Job carries the golden record store of the operator. The
Job, its ServiceAccount and NetworkPolicy go to the runner namespace
(`CheckState.runner_namespace`), the Role, RoleBinding and report to the check's.
"""

from __future__ import annotations

from infergate.api.golden import GoldenSpec
from infergate.golden.settings import WhenDeleted
from infergate.jsontypes import JSON
from infergate.plan.check.observed import ObservedParityCheck
from infergate.plan.check.sides import SideView
from infergate.plan.check.state import CheckState
from infergate.render.check_children import (
    FINGERPRINT_PORT,
    PROBE_CONTAINER,
    report_config_map,
    runner_job,
    runner_network_policy,
    runner_rbac,
)
from infergate.render.check_names import LABEL_SIDE, ROLE_PROBE, child_labels, probe_name
from infergate.render.labels import engine_pod_selector
from infergate.render.launch import HTTP_PORT
from infergate.render.layer_stand_in import LAYERS_PORT, StandInDecision, decide_stand_in
from infergate.render.mirror import CONTROL_PORT, mirror_labels
from infergate.render.network import Peer


def check_body(check: ObservedParityCheck) -> JSON:
    """The check as the renderers take it (identity only)."""
    return {
        "metadata": {"name": check.name, "namespace": check.namespace, "uid": check.uid},
    }


def probe_stand_in(view: SideView) -> StandInDecision:
    """Whether a vLLM side's probe runs the transformers stand-in for the layer probe."""
    assert view.probe_template is not None  # noqa: S101 - a probe side has its template
    pod_spec = view.probe_template["spec"]["template"]["spec"]
    return decide_stand_in(pod_spec, PROBE_CONTAINER)


def runner_peers(state: CheckState) -> list[Peer]:
    """What the runner may connect to: each side's revision pods on the engine port, its
    probe on the ports the probe serves (the engine's, for hidden states, the fingerprint
    server's, and the layer stand-in's where it runs), a shadow check's mirror pods on
    their control port (whose NetworkPolicy admits runner pods there), and the API server.
    Endpoint sides get nothing (see check_children)."""
    check = state.check
    hidden = check.spec.hidden_states if check.spec is not None else True
    peers: list[Peer] = []
    spec = check.spec
    if spec is not None and spec.mirror_service is not None and spec.candidate.deployment:
        peers.append(Peer(CONTROL_PORT, pods=mirror_labels(spec.candidate.deployment)))
    for side, view in state.sides.items():
        if view.deployment is not None and view.revision is not None:
            peers.append(Peer(HTTP_PORT, pods=engine_pod_selector(view.deployment, view.revision)))
        if view.needs_probe:
            probe = {**child_labels(check.name, ROLE_PROBE), LABEL_SIDE: side}
            ports = (HTTP_PORT, FINGERPRINT_PORT) if hidden else (FINGERPRINT_PORT,)
            if probe_stand_in(view).image is not None:
                ports = (*ports, LAYERS_PORT)
            peers += [Peer(port, pods=probe) for port in ports]
    return [*peers, *state.api_server]


def _prunes_deleted(golden: GoldenSpec | None) -> bool:
    """The runner deletes the records of deleted InferenceDeployments (and so must list
    them) only when the operator keeps golden records under `whenDeleted: Delete`."""
    return golden is not None and golden.retention.when_deleted is WhenDeleted.DELETE


def runner_objects(state: CheckState) -> list[JSON]:
    """The NetworkPolicy confining the runner (first: nothing runs unconfined), RBAC
    naming exactly what it reads, the empty report ConfigMap, the Job."""
    check = state.check
    spec = check.spec
    assert spec is not None  # noqa: S101 - only decided for a valid spec
    deployments: list[str] = []
    services: list[str] = []
    config_maps: list[str] = []
    for side, view in state.sides.items():
        if view.deployment is not None and view.object_name is not None:
            deployments.append(view.deployment)
            services.append(view.object_name)
            config_maps.append(view.object_name)
        if view.needs_probe:
            services.append(probe_name(check.name, side))
    if spec.suite_config_map is not None:
        config_maps.append(spec.suite_config_map)
    if spec.mirror_service is not None:
        services.append(spec.mirror_service)
    if state.previous_report is not None:
        config_maps.append(state.previous_report)
    body = check_body(check)
    return [
        runner_network_policy(body, runner_peers(state), runner_namespace=state.runner_namespace),
        *runner_rbac(
            body,
            runner_namespace=state.runner_namespace,
            deployments=deployments,
            services=services,
            config_maps=config_maps,
            list_deployments=bool(deployments) and _prunes_deleted(state.golden),
            account_annotations=state.runner_annotations,
            pull_secrets=state.pull_secrets,
        ),
        report_config_map(body),
        runner_job(
            body,
            spec.runner,
            image=state.runner_image,
            runner_namespace=state.runner_namespace,
            previous_report=state.previous_report,
            golden=state.golden,
            pull_secrets=state.pull_secrets,
        ),
    ]
