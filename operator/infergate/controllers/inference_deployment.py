"""kopf handlers of InferenceDeployments: one reconcile for create, resume, update and resync.

Gather (the object from the API, its children from the indexes), decide
(`plan.plan_reconcile`, pure), write (`kube.writer`), then post the Events and
count the outcomes. A resync loop per deployment (a kopf daemon) re-observes
every `resync_seconds`, and sooner when a child changes, so progress that no
spec change announces (a canary becoming available, a verdict, a drifting
edit) is acted on. No finalizer: children go with their owner through garbage
collection, and deletion never waits for the operator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from pydantic import ValidationError

from infergate import metrics
from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.inference_deployment import InferenceDeploymentSpec, check_deployment_name
from infergate.controllers._context import LOCKS, OPTIONS, WAKEUPS, client
from infergate.errors import (
    ConflictError,
    InfergateError,
    NotFoundError,
    PermanentKubeError,
    RetriableKubeError,
    SpecError,
)
from infergate.kube.client import INFERENCE_DEPLOYMENTS, JSON
from infergate.kube.writer import PlanWriter, WriteResult
from infergate.plan import reasons
from infergate.plan.control import manual_requests
from infergate.plan.desired import Owner
from infergate.plan.observed import Observed, OwnerKey, collect
from infergate.plan.reconcile import ReconcilePlan, invalid_spec_status, plan_reconcile
from infergate.plan.rollout import DeploymentState, Notice

GROUP, VERSION, PLURAL = "infergate.io", "v1alpha1", "inferencedeployments"
# Handler retries: a conflict or a busy API server passes in seconds; a spec problem does not.
_RETRIES = 12
_BACKOFF = 3.0
_RETRY_DELAY = 2.0
_CONFLICT_DELAY = 0.2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileResult:
    """What one reconcile decided and did, for Events and metrics."""

    plan: ReconcilePlan
    written: WriteResult


def _snapshot(key: OwnerKey, uid: str, indexes: Mapping[str, Any]) -> Observed:
    """The children of one deployment, copied out of the indexes (in the event loop)."""

    def values(index_name: str) -> list[Any]:
        index = indexes.get(index_name)
        return list(index[key]) if index is not None and key in index else []

    return collect(
        uid,
        values("owned_deployments"),
        [*values("owned_config_maps"), *values("owned_services")],
        values("owned_checks"),
        values("owned_pods"),
    )


def _parse_spec(body: JSON) -> InferenceDeploymentSpec:
    metadata = body.get("metadata") or {}
    where = f"InferenceDeployment {metadata.get('namespace')}/{metadata.get('name')}"
    try:
        check_deployment_name(str(metadata.get("name")))
        return InferenceDeploymentSpec.model_validate(body.get("spec") or {})
    except (ValidationError, ValueError) as error:
        raise SpecError(f"{where}: {error}") from error


def _parse_status(body: JSON) -> InferenceDeploymentStatus:
    try:
        return InferenceDeploymentStatus.model_validate(body.get("status") or {})
    except ValidationError:
        # A status the operator cannot read is rebuilt from the children.
        log.warning("status of %s is unreadable; rebuilding it", body["metadata"]["name"])
        return InferenceDeploymentStatus()


def _reconcile_blocking(body: JSON, observed: Observed) -> ReconcileResult:
    """Decide and write (runs in a worker thread: the API client blocks)."""
    metadata = body["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    writer = PlanWriter(client(), namespace, name)
    now = datetime.now(UTC)
    status = _parse_status(body)
    generation = int(metadata.get("generation") or 0)
    try:
        spec = _parse_spec(body)
    except SpecError as error:
        invalid = invalid_spec_status(status, generation, str(error), now)
        if invalid.to_kube() != status.to_kube():
            writer.write_status(invalid, body)
        raise
    state = DeploymentState(
        owner=Owner(name, namespace, str(metadata["uid"])),
        generation=generation,
        spec=spec,
        status=status,
        manual=manual_requests(metadata.get("annotations") or {}),
        observed=observed,
        now=now,
    )
    plan = plan_reconcile(state)
    return ReconcileResult(plan, writer.write(plan, body))


def _post(body: JSON, events: list[Notice]) -> None:
    for event in events:
        kopf.event(
            # A freshly read object; kopf only reads its apiVersion, kind and metadata.
            cast(kopf.Body, body),
            type="Warning" if event.warning else "Normal",
            reason=event.reason,
            message=event.message,
        )


async def reconcile(namespace: str, name: str, indexes: Mapping[str, Any]) -> None:
    """One reconcile of one deployment; errors are `infergate.errors`."""
    key = OwnerKey(namespace, name)
    async with LOCKS[key]:
        started = time.monotonic()
        result = "error"
        try:
            try:
                body = await asyncio.to_thread(client().get, INFERENCE_DEPLOYMENTS, namespace, name)
            except NotFoundError:
                result = "gone"
                return
            observed = _snapshot(key, str(body["metadata"]["uid"]), indexes)
            outcome = await asyncio.to_thread(_reconcile_blocking, body, observed)
            result = "ok"
            plan, written = outcome.plan, outcome.written
            events = list(plan.events)
            events += [
                Notice(
                    False,
                    reasons.PARITY_CHECK_CREATED,
                    f"ParityCheck {check} created for the canary",
                )
                for check in written.created_checks
            ]
            _post(body, events)
            metrics.record_outcomes(namespace, name, [(o.kind, o.reason) for o in plan.outcomes])
            if plan.status.phase is not None:
                metrics.record_phase(namespace, name, plan.status.phase, len(plan.status.revisions))
        finally:
            metrics.RECONCILE_DURATION.labels(result).observe(time.monotonic() - started)


def _kopf_error(error: InfergateError) -> Exception:
    if isinstance(error, ConflictError):
        return kopf.TemporaryError(str(error), delay=_CONFLICT_DELAY)
    if isinstance(error, RetriableKubeError):
        return kopf.TemporaryError(str(error), delay=_RETRY_DELAY)
    if isinstance(error, SpecError | PermanentKubeError):
        return kopf.PermanentError(str(error))
    return kopf.TemporaryError(str(error), delay=_RETRY_DELAY)


@kopf.on.resume(GROUP, VERSION, PLURAL, retries=_RETRIES, backoff=_BACKOFF)
@kopf.on.create(GROUP, VERSION, PLURAL, retries=_RETRIES, backoff=_BACKOFF)
@kopf.on.update(GROUP, VERSION, PLURAL, retries=_RETRIES, backoff=_BACKOFF)
async def reconcile_on_change(name: str, namespace: str | None, **kwargs: Any) -> None:
    """Create, resume and update share one reconcile."""
    try:
        await reconcile(namespace or "", name, kwargs)
    except InfergateError as error:
        raise _kopf_error(error) from error


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0)
async def resync(
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """Reconcile every resync_seconds, or as soon as a child changes."""
    namespace = namespace or ""
    key = OwnerKey(namespace, name)
    wake = WAKEUPS.event(key)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        while not stopped:
            waiting = asyncio.ensure_future(wake.wait())
            await asyncio.wait(
                {waiting, stop}, timeout=OPTIONS.resync_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            waiting.cancel()
            if stopped:
                break
            wake.clear()
            try:
                await reconcile(namespace, name, kwargs)
            except ConflictError as error:
                # Someone (often kopf's own bookkeeping) wrote in between: read again soon.
                logger.debug("conflict, reconciling again: %s", error)
                await asyncio.sleep(_CONFLICT_DELAY)
                wake.set()
            except SpecError as error:
                logger.warning("not reconciled: %s", error)
            except InfergateError as error:
                logger.warning("reconcile failed, retrying in %.0fs: %s", _RETRY_DELAY, error)
                await asyncio.sleep(_RETRY_DELAY)
                wake.set()
    finally:
        stop.cancel()


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def forget(name: str, namespace: str | None, **_: Any) -> None:
    """Drop the deployment's gauges; its children go through garbage collection."""
    key = OwnerKey(namespace or "", name)
    WAKEUPS.forget(key)
    LOCKS.pop(key, None)
    metrics.forget(key.namespace, name)
