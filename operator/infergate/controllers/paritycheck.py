"""kopf handlers of ParityChecks: gather from indexes, decide (`plan.check.lifecycle`), write.

Every check, its children (probes, runner Job and pods, runner RBAC, report) and the
InferenceDeployment revisions its sides name are kept current in memory by kopf's
watches, as small records. A reconcile reads nothing from the API server: it gathers
those records, `plan.check.lifecycle.decide` turns them into a plan, and `kube.check_writer`
writes only what the plan says (status guarded by the resourceVersion it was decided
from). Reconciles run when the check, a child or a side changes, at the check's
deadline, and otherwise every `check_resync_seconds` as a safety net; a check at rest
costs no API call. The runner writes progress and the verdict itself. No finalizer:
children in the check's namespace are owned by the check and go with it; the runner's
Job, ServiceAccount and NetworkPolicy in the runner namespace cannot be owned by it, and
are deleted here once their check is gone (`plan.check.cleanup`): the work list holds
every check and every check key the runner namespace has objects of, so a reconcile of
a deleted check, and the first round after a start, remove what is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from infergate.api.base import GROUP, PARITY_CHECKS_PLURAL, VERSION
from infergate.controllers._context import (
    CHECK_SCHEDULE,
    CHECKS_OF_DEPLOYMENT,
    OPTIONS,
    client,
    events,
    wake_check,
)
from infergate.controllers._leader import LEADER
from infergate.controllers._watched import WATCH_LABELS
from infergate.kube.check_writer import CheckWriter, ForeignChildError, delete_children
from infergate.plan.check.cleanup import RUNNER_NAMESPACE_KINDS, stale_runner_objects
from infergate.plan.check.lifecycle import decide, foreign_child
from infergate.plan.check.observed import (
    CheckChild,
    ObservedParityCheck,
    check_key,
    child_key,
    observe_child,
    observe_parity_check,
    previous_report,
)
from infergate.plan.check.sides import (
    RevisionConfigError,
    RevisionSeen,
    SideView,
    parse_revision_config,
    probe_source,
    side_view,
)
from infergate.plan.check.state import CheckPlan, CheckState
from infergate.plan.deployment.observed import (
    ObservedDeployment,
    ObservedObject,
    ObservedPod,
    with_whole_groups,
)
from infergate.plan.metadata import OwnerKey
from infergate.render.check_names import LABEL_CHECK, SIDES, SideName
from infergate.render.group import LWS_KIND
from infergate.render.labels import revision_object_name, workload_name

log = logging.getLogger(__name__)
# A check's children (render/check_names.py `child_labels`) wear the label every watched
# object wears (controllers/_watched.py) beside their check's.
CHILD_LABELS: dict[str, Any] = {**WATCH_LABELS, LABEL_CHECK: kopf.PRESENT}


class _Listing:
    """Whether kopf has listed every watched resource once. kopf calls event handlers
    only after every index is filled, so the first event handler call says so; before
    it, a check missing from the index may just not be listed yet."""

    done = False


LISTING = _Listing()


# -- indexes: what a reconcile gathers from ------------------------------------------------


@kopf.index(GROUP, VERSION, PARITY_CHECKS_PLURAL)
async def parity_checks(body: kopf.Body, **_: Any) -> dict[OwnerKey, ObservedParityCheck]:
    """Every ParityCheck, by its children's label key (the resync loop's work list)."""
    record = observe_parity_check(body)
    return {check_key(record.namespace, record.name): record}


@kopf.index("", "v1", "pods", labels=CHILD_LABELS)
@kopf.index("", "v1", "services", labels=CHILD_LABELS)
@kopf.index("", "v1", "configmaps", labels=CHILD_LABELS)
@kopf.index("", "v1", "serviceaccounts", labels=CHILD_LABELS)
@kopf.index("batch", "v1", "jobs", labels=CHILD_LABELS)
@kopf.index("rbac.authorization.k8s.io", "v1", "roles", labels=CHILD_LABELS)
@kopf.index("rbac.authorization.k8s.io", "v1", "rolebindings", labels=CHILD_LABELS)
@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels=CHILD_LABELS)
async def check_children(body: kopf.Body, **_: Any) -> dict[OwnerKey, CheckChild] | None:
    """Objects labelled with a check: probes, runner Job and pods, runner RBAC and
    NetworkPolicy, report (in the runner namespace, by the check their labels name)."""
    key = child_key(body, OPTIONS.runner_namespace)
    return {key: observe_child(body, OPTIONS.runner_namespace)} if key is not None else None


@kopf.index("", "v1", "serviceaccounts", labels=CHILD_LABELS)
@kopf.index("batch", "v1", "jobs", labels=CHILD_LABELS)
@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels=CHILD_LABELS)
async def runner_namespace_objects(body: kopf.Body, **_: Any) -> dict[OwnerKey, str] | None:
    """The runner namespace's Jobs, ServiceAccounts and NetworkPolicies, by their check's
    key: beside `parity_checks`, the resync loop's work list (what outlives a check)."""
    if body.get("metadata", {}).get("namespace") != OPTIONS.runner_namespace:
        return None
    if body.get("kind") not in RUNNER_NAMESPACE_KINDS:
        return None
    key = child_key(body, OPTIONS.runner_namespace)
    return {key: str(body.get("metadata", {}).get("uid") or "")} if key is not None else None


# -- wake-ups -------------------------------------------------------------------------------


@kopf.on.event(GROUP, VERSION, PARITY_CHECKS_PLURAL)
async def check_changed(body: kopf.Body, type: str | None, **_: Any) -> None:  # noqa: A002 - kopf's name
    """Reconcile a check when it changed; keep the map from deployments to their checks."""
    LISTING.done = True
    record = observe_parity_check(body)
    key = check_key(record.namespace, record.name)
    for deployments in CHECKS_OF_DEPLOYMENT.values():
        deployments.discard(key)
    if type != "DELETED" and record.spec is not None:
        for side in SIDES:
            deployment = record.spec.side(side).deployment
            if deployment is not None:
                CHECKS_OF_DEPLOYMENT[OwnerKey(record.namespace, deployment)].add(key)
    wake_check(key)


@kopf.on.event("", "v1", "pods", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "configmaps", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "serviceaccounts", labels=CHILD_LABELS)
@kopf.on.event("batch", "v1", "jobs", labels=CHILD_LABELS)
@kopf.on.event("rbac.authorization.k8s.io", "v1", "roles", labels=CHILD_LABELS)
@kopf.on.event("rbac.authorization.k8s.io", "v1", "rolebindings", labels=CHILD_LABELS)
@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=CHILD_LABELS)
async def child_changed(body: kopf.Body, **_: Any) -> None:
    """Reconcile the check a child belongs to."""
    LISTING.done = True
    key = child_key(body, OPTIONS.runner_namespace)
    if key is not None:
        wake_check(key)


# -- gather -------------------------------------------------------------------------------


def _values(indexes: Mapping[str, Any], index: str, key: OwnerKey) -> list[Any]:
    found = indexes.get(index)
    return list(found[key]) if found is not None and key in found else []


def _side(check: ObservedParityCheck, side: SideName, indexes: Mapping[str, Any]) -> SideView:
    spec = check.spec
    assert spec is not None  # noqa: S101 - sides are resolved for valid checks only
    deployment = spec.side(side).deployment
    if deployment is None:
        return SideView()
    owner = OwnerKey(check.namespace, deployment)
    bodies = _values(indexes, "known_deployments", owner)
    body = bodies[0] if bodies else {}
    uid = str(body.get("metadata", {}).get("uid") or "")
    config_maps: list[ObservedObject] = _values(indexes, "owned_config_maps", owner)
    pods: list[ObservedPod] = _values(indexes, "owned_pods", owner)
    deployments: list[ObservedDeployment] = [
        # A multi-node revision's groups count as available only when whole.
        with_whole_groups(workload, pods)
        for workload in [
            *_values(indexes, "owned_deployments", owner),
            *_values(indexes, "owned_leader_worker_sets", owner),
        ]
    ]
    services: list[ObservedObject] = _values(indexes, "owned_services", owner)

    def seen(revision: str) -> RevisionSeen:
        name = revision_object_name(deployment, revision)
        found = RevisionSeen(service=any(s.name == name and s.owner_uid == uid for s in services))
        config_map = next((c for c in config_maps if c.name == name and c.owner_uid == uid), None)
        if config_map is not None:
            try:
                found = replace(found, config=parse_revision_config(name, config_map.content))
            except RevisionConfigError as error:
                found = replace(found, config=str(error))
        revision_deployment = next(
            (
                d
                for d in deployments
                if d.owner_uid == uid
                and d.name == workload_name(deployment, revision, group=d.kind == LWS_KIND)
            ),
            None,
        )
        if revision_deployment is not None:
            kind = revision_deployment.kind
            found = replace(
                found,
                available=revision_deployment.available_replicas,
                template=probe_source(revision_deployment.name, kind, revision_deployment.spec),
                group=kind == LWS_KIND,
            )
        return found

    return side_view(
        spec,
        side,
        pinned=check.status.get(f"{side}Revision"),
        deployment_exists=bool(body),
        stable=body.get("status", {}).get("stableRevision"),
        seen=seen,
    )


def _state(key: OwnerKey, indexes: Mapping[str, Any], now: datetime) -> CheckState | None:
    records: list[ObservedParityCheck] = _values(indexes, "parity_checks", key)
    if not records:
        return None
    check = records[0]
    children: list[CheckChild] = _values(indexes, "check_children", key)
    sides: dict[SideName, SideView] = {}
    previous = None
    if check.spec is not None:
        sides = {side: _side(check, side, indexes) for side in SIDES}
        everything = indexes.get("parity_checks")
        others = [r for group in everything.values() for r in group] if everything else []
        previous = previous_report(check, others)
    return CheckState(
        check=check,
        sides=sides,
        children=children,
        runner_image=OPTIONS.runner_image,
        golden=OPTIONS.golden,
        now=now,
        previous_report=previous,
        api_server=OPTIONS.runner_api_server,
        runner_namespace=OPTIONS.runner_namespace,
        pull_secrets=OPTIONS.image_pull_secrets,
        runner_annotations=OPTIONS.runner_account_annotations,
    )


# -- write ----------------------------------------------------------------------------------


def _write(state: CheckState, plan: CheckPlan) -> None:
    """Carry the plan out (blocking API calls: runs in a worker thread)."""
    check = state.check
    writer = CheckWriter(client(), check, runner_namespace=state.runner_namespace)
    if plan.status:
        writer.patch_status(plan.status)
    try:
        for manifest in plan.create:
            created = writer.create(manifest)
            if created is not None and created["kind"] == "ServiceAccount":
                writer.record_runner_account(created)
    except ForeignChildError as error:
        plan = foreign_child(state, str(error))
    ended = writer.end(plan.terminal) if plan.terminal is not None else False
    if plan.delete and (plan.terminal is None or ended):
        writer.delete(plan.delete)
    if plan.terminal is not None and not ended:
        return  # the runner (or a person) ended it meanwhile: its Events are the story
    for warning, reason, message in plan.events:
        events().post(check.reference, warning=warning, reason=reason, message=message)
    if plan.terminal is not None:
        log.info("ParityCheck %s/%s ended: %s", check.namespace, check.name, plan.terminal["phase"])


def _stale(key: OwnerKey, indexes: Mapping[str, Any], state: CheckState | None) -> list[CheckChild]:
    """Runner objects of the key's check in the runner namespace that outlived it."""
    return stale_runner_objects(
        state.check if state is not None else None,
        _values(indexes, "check_children", key),
        runner_namespace=OPTIONS.runner_namespace,
        listed=LISTING.done,
    )


async def reconcile(key: OwnerKey, indexes: Mapping[str, Any]) -> float | None:
    """One reconcile of one check; how soon it wants to run again (its deadline)."""
    if not LEADER.leading:
        return None  # a follower keeps its indexes warm and acts once it leads
    state = _state(key, indexes, datetime.now(UTC).replace(microsecond=0))
    stale = _stale(key, indexes, state)
    if stale:
        log.info(
            "ParityCheck %s/%s: deleting runner objects it left: %s",
            key.namespace, key.name, ", ".join(f"{c.kind} {c.name}" for c in stale),
        )  # fmt: skip
        await asyncio.to_thread(delete_children, client(), stale)
    if state is None:
        return None
    plan = decide(state)
    if not plan.quiet:
        await asyncio.to_thread(_write, state, plan)
    return plan.wake_in


@kopf.on.startup()
async def start_following(**kwargs: Any) -> None:
    """One loop follows every check (a kopf timer per check would put a finalizer on it,
    which hangs deletion while the operator is down)."""
    indexes: Mapping[str, Any] = kwargs

    async def one(key: OwnerKey) -> float | None:
        return await reconcile(key, indexes)

    CHECK_SCHEDULE.start(
        one,
        OPTIONS.check_resync_seconds,
        "parity_checks",
        indexes,
        also=("runner_namespace_objects",),
    )


@kopf.on.cleanup()
async def stop_following(**_: Any) -> None:
    await CHECK_SCHEDULE.stop()
