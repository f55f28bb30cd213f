"""kopf handlers of InferenceDeployments: one reconcile, run by one resync loop.

Gather (the object as the watch delivered it, its children from the indexes, and only
when the decision creates a check, the suite ConfigMap whose content it pins), decide
(`plan.plan_reconcile`, pure), write (`kube.writer`, a plan's independent child writes at
once), then post the Events and count the outcomes. The watch's copy is read again from
the API only when it is older than this process's own last write of it
(`plan.freshness`), or when the status write, guarded by its resourceVersion, finds that
somebody else changed the object since; then the reconcile decides again from the read.
One resync loop for the process reconciles a deployment at once when its spec
or a control annotation changes, after a short debounce when a child changes (a canary
becoming available, a verdict, a drifting edit; `plan.deployment.wake` decides), at the time the
decision asked for (a deadline, the end of a pause: `ReconcilePlan.due`), and otherwise
every `resync_seconds` as a safety net. kopf only watches (indexes and event handlers):
it keeps no state on the objects, so a replica that does not lead writes nothing. No
finalizer (hence no kopf daemon or timer, which would add one): children go with their
owner through garbage collection, and deletion never waits for the operator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from infergate import metrics
from infergate.api.access import check_host_path
from infergate.api.base import GROUP, INFERENCE_DEPLOYMENTS_PLURAL, VERSION
from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.enums import ConditionStatus
from infergate.api.inference_deployment import InferenceDeploymentSpec, check_deployment_name
from infergate.controllers._context import (
    LOCKS,
    OPTIONS,
    SCHEDULE,
    TAKEN,
    background_writes,
    client,
    start_background_writes,
    write_pool,
)
from infergate.controllers._context import events as post_events
from infergate.controllers._leader import LEADER
from infergate.errors import (
    InfergateError,
    NotFoundError,
    SpecError,
    StaleObjectError,
)
from infergate.jsontypes import JSON
from infergate.kube.client import CONFIG_MAPS, INFERENCE_DEPLOYMENTS
from infergate.kube.writer import PlanWriter, WriteResult
from infergate.plan import reasons
from infergate.plan.check.stamp import see_suite, unread_suites
from infergate.plan.deployment.control import manual_requests
from infergate.plan.deployment.desired import Owner
from infergate.plan.deployment.observed import Observed, collect
from infergate.plan.deployment.reconcile import ReconcilePlan, invalid_spec_status, plan_reconcile
from infergate.plan.deployment.rollout import DeploymentState, Notice
from infergate.plan.deployment.status import latest_parity_figures
from infergate.plan.deployment.wake import (
    KOPF_PREFIX,
    DeploymentMark,
    again_in,
    delay_seconds,
    deployment_mark,
    deployment_wake,
)
from infergate.plan.freshness import watched_copy_is_current
from infergate.plan.metadata import OwnerKey
from infergate.render.labels import LABEL_CHECK_PURPOSE, PURPOSE_DRIFT

PLURAL = INFERENCE_DEPLOYMENTS_PLURAL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileResult:
    """What one reconcile decided and did, for Events and metrics."""

    plan: ReconcilePlan
    written: WriteResult
    again: float | None = None
    """Seconds until the plan wants the next reconcile (a deadline); None: none waits."""


def _snapshot(key: OwnerKey, uid: str, indexes: Mapping[str, Any]) -> Observed:
    """The children of one deployment, copied out of the indexes (in the event loop)."""

    def values(index_name: str) -> list[Any]:
        index = indexes.get(index_name)
        return list(index[key]) if index is not None and key in index else []

    return collect(
        uid,
        [*values("owned_deployments"), *values("owned_leader_worker_sets")],
        [*values("owned_config_maps"), *values("owned_services")],
        values("owned_checks"),
        values("owned_pods"),
        owner_name=key.name,
        extras=[
            *values("owned_routes"),
            *values("owned_mirror_deployments"),
            *values("owned_service_accounts"),
            *values("owned_roles"),
            *values("owned_role_bindings"),
            *values("owned_network_policies"),
            *values("owned_disruption_budgets"),
        ],
    )


def _parse_spec(body: JSON) -> InferenceDeploymentSpec:
    metadata = body.get("metadata") or {}
    where = f"InferenceDeployment {metadata.get('namespace')}/{metadata.get('name')}"
    try:
        spec = InferenceDeploymentSpec.model_validate(body.get("spec") or {})
        check_deployment_name(str(metadata.get("name")), multi_node=spec.layout.multi_node)
        # file:// mounts a node directory: only those the operator was started to allow.
        check_host_path(spec.model.uri, OPTIONS.allowed_host_paths)
    except (ValidationError, ValueError, SpecError) as error:
        raise SpecError(f"{where}: {error}") from error
    return spec


def _parse_status(body: JSON) -> InferenceDeploymentStatus:
    try:
        return InferenceDeploymentStatus.model_validate(body.get("status") or {})
    except ValidationError:
        # A status the operator cannot read is rebuilt from the children.
        log.warning("status of %s is unreadable; rebuilding it", body["metadata"]["name"])
        return InferenceDeploymentStatus()


def _state(body: JSON, observed: Observed, now: datetime) -> DeploymentState:
    """What a reconcile decides from; a spec that cannot be acted on is a SpecError."""
    metadata = body["metadata"]
    return DeploymentState(
        owner=Owner(metadata["name"], metadata["namespace"], str(metadata["uid"])),
        generation=int(metadata.get("generation") or 0),
        spec=_parse_spec(body),
        status=_parse_status(body),
        manual=manual_requests(metadata.get("annotations") or {}),
        observed=observed,
        now=now,
        mirror_image=OPTIONS.runner_image,
        runner_namespace=OPTIONS.runner_namespace,
        pull_secrets=OPTIONS.image_pull_secrets,
        golden=OPTIONS.golden,
        taken=TAKEN.of(OwnerKey(metadata["namespace"], metadata["name"])),
    )


def _with_suites(state: DeploymentState, plan: ReconcilePlan) -> ReconcilePlan:
    """`plan`, decided from `state`, or when it creates a check whose suite lives in a
    ConfigMap not read yet, the decision made again with that suite's content digest
    (`plan.check.stamp`): the ConfigMap is read only when a check is to be made, never on
    a quiet resync (blocking: runs in a worker thread)."""
    wanted = unread_suites(plan.create_checks, state.suites)
    if not wanted:
        return plan
    seen = {ref: see_suite(ref, _config_map(state.owner.namespace, ref.name)) for ref in wanted}
    return plan_reconcile(replace(state, suites={**state.suites, **seen}))


def _config_map(namespace: str, name: str) -> JSON | None:
    try:
        return client().get(CONFIG_MAPS, namespace, name)
    except NotFoundError:
        return None


@dataclass(frozen=True)
class _Quiet:
    """A decision that writes nothing; `again`: seconds until it wants to run again."""

    again: float | None


def _from_watched(
    body: JSON, observed: Observed, *, may_write: bool
) -> ReconcileResult | _Quiet | None:
    """Decide from the watch's copy of the object: quiet, or (when `may_write`) the result
    of writing the decision; None: read the object and decide again (a spec problem, which
    is reported from a fresh read, a copy older than this process's last write, or one
    that the status write found stale: then nothing but a wave of creates was written, and
    when the server asked one of them to wait, the stale error goes to the retry policy)."""
    now = datetime.now(UTC)
    try:
        state = _state(body, observed, now)
        plan = plan_reconcile(state)
    except (InfergateError, ValueError):
        return None
    if plan.quiet:
        return _Quiet(again_in(plan.due, now))
    if not may_write:
        return None
    try:
        return _write(_with_suites(state, plan), body, now)
    except StaleObjectError as error:
        if error.retry_after is not None:
            raise  # a create sent beside it was told to wait: back off, not read again
        return None


def _reconcile_blocking(body: JSON, observed: Observed) -> ReconcileResult:
    """Decide and write from a fresh read (runs in a worker thread: the API client blocks)."""
    metadata = body["metadata"]
    now = datetime.now(UTC)
    try:
        state = _state(body, observed, now)
    except SpecError as error:
        status = _parse_status(body)
        invalid = invalid_spec_status(status, int(metadata.get("generation") or 0), str(error), now)
        if invalid.to_kube() != status.to_kube():
            _writer(body).write_status(invalid, body)
        raise
    return _write(_with_suites(state, plan_reconcile(state)), body, now)


def _writer(body: JSON) -> PlanWriter:
    metadata = body["metadata"]
    key = OwnerKey(metadata["namespace"], metadata["name"])
    return PlanWriter(
        client(),
        key.namespace,
        key.name,
        pool=write_pool(),
        background=background_writes(),
        on_status_written=lambda version: _note_version(key, version),
        on_name=lambda ref, holder: TAKEN.note(key, ref, holder),
    )


def _write(plan: ReconcilePlan, body: JSON, now: datetime) -> ReconcileResult:
    """Write `plan`, decided from `body`, then post its Events."""
    written = _writer(body).write(plan, body)
    events = [*plan.events, *(_created_notice(m) for m in plan.create_checks
                              if m["metadata"]["name"] in written.created_checks)]  # fmt: skip
    for event in events:
        post_events().post(body, warning=event.warning, reason=event.reason, message=event.message)
    return ReconcileResult(plan, written, again_in(plan.due, now))


def _created_notice(manifest: JSON) -> Notice:
    name = manifest["metadata"]["name"]
    if manifest["metadata"].get("labels", {}).get(LABEL_CHECK_PURPOSE) == PURPOSE_DRIFT:
        revision = manifest["spec"]["candidate"].get("revision")
        return Notice(
            False,
            reasons.DRIFT_CHECK_CREATED,
            f"ParityCheck {name} created: drift run of stable revision {revision} against its "
            "golden record",
        )
    return Notice(False, reasons.PARITY_CHECK_CREATED, f"ParityCheck {name} created for the canary")


def _cached(indexes: Mapping[str, Any], key: OwnerKey) -> JSON | None:
    index = indexes.get("known_deployments")
    if index is None or key not in index:
        return None
    return next(iter(index[key]), None)


async def reconcile(
    namespace: str, name: str, indexes: Mapping[str, Any], *, trigger: str = "resync"
) -> float | None:
    """One reconcile of one deployment: the seconds until it wants to run again (None: no
    deadline waits); errors are `infergate.errors`."""
    if not LEADER.leading:
        return None  # a follower keeps its indexes warm and acts once it leads
    key = OwnerKey(namespace, name)
    queued = time.monotonic()
    async with LOCKS[key]:
        started = time.monotonic()
        result = "error"
        read = started
        try:
            cached = _cached(indexes, key) if trigger == "resync" else None
            outcome: ReconcileResult | None = None
            if cached is not None:
                seen = _snapshot(key, str(cached["metadata"]["uid"]), indexes)
                may_write = watched_copy_is_current(_version(cached), _NEWEST.get(key))
                attempt = await asyncio.to_thread(_from_watched, cached, seen, may_write=may_write)
                if isinstance(attempt, _Quiet):
                    result = "quiet"
                    return attempt.again
                outcome = attempt
            if outcome is None:
                try:
                    body = await asyncio.to_thread(
                        client().get, INFERENCE_DEPLOYMENTS, namespace, name
                    )
                except NotFoundError:
                    result = "gone"
                    return None
                read = time.monotonic()
                _note_version(key, _version(body))
                observed = _snapshot(key, str(body["metadata"]["uid"]), indexes)
                outcome = await asyncio.to_thread(_reconcile_blocking, body, observed)
            result = "ok"
            plan = outcome.plan
            metrics.record_outcomes(namespace, name, [(o.kind, o.reason) for o in plan.outcomes])
            metrics.record_parity(namespace, name, latest_parity_figures(plan.status))
            if plan.status.phase is not None:
                metrics.record_phase(namespace, name, plan.status.phase, len(plan.status.revisions))
            metrics.record_conditions(
                namespace, name, [(c.type, c.status.value) for c in plan.status.conditions]
            )
            metrics.record_drift(namespace, name, _drifted(plan))
            return outcome.again
        finally:
            done = time.monotonic()
            metrics.RECONCILE_DURATION.labels(result).observe(done - started)
            metrics.RECONCILE_STEP.labels("lock").observe(started - queued)
            if read > started:
                metrics.RECONCILE_STEP.labels("read").observe(read - started)
            if result == "ok":
                metrics.RECONCILE_STEP.labels("write").observe(done - read)
            log.debug(
                "%s/%s reconciled on %s (%s): lock %.3fs, read %.3fs, decide and write %.3fs",
                namespace, name, trigger, result, started - queued, read - started, done - read,
            )  # fmt: skip


# What each deployment last looked like to `plan.deployment.wake.deployment_wake`.
_MARKS: dict[OwnerKey, DeploymentMark] = {}
# The newest resourceVersion of each deployment this process read or wrote itself: a
# watched copy older than it is not decided from (`plan.freshness`).
_NEWEST: dict[OwnerKey, str] = {}


def _version(body: JSON) -> str | None:
    version = (body.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def _note_version(key: OwnerKey, version: str | None) -> None:
    if version is not None and watched_copy_is_current(version, _NEWEST.get(key)):
        _NEWEST[key] = version


@kopf.on.event(GROUP, VERSION, PLURAL)
async def changed(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    type: str | None,  # noqa: A002 - kopf's name
    **_: Any,
) -> None:
    """A deployment was created, changed or deleted: reconcile it (through the resync loop,
    with its retry policy) at once when its spec or a control annotation changed, after the
    debounce when something else a decision reads did (`plan.deployment.wake`), or forget it.

    An event handler, not kopf's create/update/resume handlers: those keep kopf's state
    (diff-base, progress) in annotations on the object, which every replica would write,
    the one not holding the Lease included; it would also mark a change as handled that
    only the leader may act on. The resync loop reconciles each deployment at start and
    whenever it changes, so nothing is lost."""
    key = OwnerKey(namespace or "", name)
    if type == "DELETED":
        LOCKS.pop(key, None)
        _MARKS.pop(key, None)
        _NEWEST.pop(key, None)
        TAKEN.forget(key)
        metrics.forget(key.namespace, name)
        return
    mark = deployment_mark(body)
    delay = delay_seconds(deployment_wake(_MARKS.get(key), mark))
    _MARKS[key] = mark
    if delay is not None:
        SCHEDULE.wake(key, delay=delay)


@kopf.index(GROUP, VERSION, PLURAL)
async def known_deployments(
    body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> dict[OwnerKey, JSON]:
    """Every InferenceDeployment the operator serves (the resync loop's work list), with the
    last copy the watch delivered (to tell whether a resync has anything to do), slimmed."""
    return {OwnerKey(namespace or "", name): slim_body(body)}


def slim_body(body: Mapping[str, Any]) -> JSON:
    """The object without what no decision reads: managedFields, and kopf's own annotations
    (one of which holds a whole copy of the spec)."""
    metadata = dict(body.get("metadata") or {})
    metadata.pop("managedFields", None)
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if not k.startswith(KOPF_PREFIX)
    }
    metadata["annotations"] = annotations
    return {**dict(body), "metadata": metadata}


async def _resync_one(key: OwnerKey, indexes: Mapping[str, Any]) -> float | None:
    """One scheduled reconcile (errors go to the resync loop's retry policy); how soon it
    wants to run again (the drift watch's next run, say)."""
    return await reconcile(key.namespace, key.name, indexes)


def _drifted(plan: ReconcilePlan) -> bool | None:
    """Drifted as the metric shows it: True, False (not drifted or not known), None (no watch)."""
    if plan.status.drift is None:
        return None
    return any(
        c.type == reasons.DRIFTED and c.status is ConditionStatus.TRUE
        for c in plan.status.conditions
    )


@kopf.on.startup()
async def start_resync(**kwargs: Any) -> None:
    """Start the process's resync loop over every known deployment."""
    indexes: Mapping[str, Any] = kwargs

    async def one(key: OwnerKey) -> float | None:
        return await _resync_one(key, indexes)

    # Blocking API calls run in threads; many deployments reconcile at once in a burst.
    start_background_writes(asyncio.get_running_loop())
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=OPTIONS.workers, thread_name_prefix="infergate")
    )
    SCHEDULE.start(
        one,
        OPTIONS.resync_seconds,
        "known_deployments",
        indexes,
        concurrency=OPTIONS.concurrent_reconciles,
        on_start=metrics.RECONCILE_STEP.labels("queued").observe,
    )


@kopf.on.cleanup()
async def stop_resync(**_: Any) -> None:
    """Stop the resync loop and the reconciles it started."""
    await SCHEDULE.stop()
