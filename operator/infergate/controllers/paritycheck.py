"""kopf handlers of ParityChecks: one level-triggered reconcile, every few seconds.

Every few seconds, for every check that has not ended and released its children,
`kube.paritycheck_reconcile.reconcile` gathers what is observed (sides, probes, the
runner Job), decides with the pure `runner.lifecycle`, and writes. The runner writes
progress and the verdict itself; this controller starts what the check needs, follows
the Job, enforces the check's deadline, ends the check in `Error` when the runner
cannot, and deletes probes, Job and RBAC once the check ended. No finalizer: children
are owned by the check and go with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from infergate.controllers._context import client, events
from infergate.controllers._resync import Schedule
from infergate.errors import ConflictError, InfergateError, PermanentKubeError
from infergate.kube.paritycheck_children import CheckChildren
from infergate.kube.paritycheck_reconcile import reconcile
from infergate.plan.observed import OwnerKey
from infergate.runner.lifecycle import COND_RELEASED

GROUP, VERSION, PLURAL = "infergate.io", "v1alpha1", "paritychecks"
INTERVAL_SECONDS = 2.0
_CONFLICT_DELAY = 0.5
_RETRY_DELAY = 3.0

log = logging.getLogger(__name__)


def _active(status: Mapping[str, Any], **_: Any) -> bool:
    """Still to be followed: not ended, or ended with children left to delete."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == COND_RELEASED and condition.get("status") == "True":
            return False
    return True


@kopf.index(GROUP, VERSION, PLURAL)
async def active_checks(
    body: kopf.Body, name: str, namespace: str | None, status: Mapping[str, Any], **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    """The checks still to follow (the resync loop's work list), with their last copy."""
    return {OwnerKey(namespace or "", name): dict(body)} if _active(status) else {}


def _follow_blocking(namespace: str, name: str, body: dict[str, Any]) -> None:
    """Reconcile one check (blocking API calls: run in a worker thread)."""
    api = CheckChildren(client(), namespace)

    def emit(type_: str, reason: str, message: str) -> None:
        events().post(body, warning=type_ == "Warning", reason=reason, message=message)

    result = reconcile(api, name, datetime.now(UTC).replace(microsecond=0), emit)
    if result.actions.terminal is not None:
        log.info("ParityCheck %s/%s ended: %s", namespace, name, result.phase)


async def _follow(key: OwnerKey, indexes: Mapping[str, Any]) -> float | None:
    """One scheduled reconcile; how soon to retry after an error (None: the usual interval)."""
    index = indexes.get("active_checks")
    body = next(iter(index[key]), None) if index is not None and key in index else None
    if body is None:
        return None
    try:
        await asyncio.to_thread(_follow_blocking, key.namespace, key.name, body)
    except ConflictError:
        return _CONFLICT_DELAY
    except PermanentKubeError as error:
        log.warning("ParityCheck %s/%s: %s", key.namespace, key.name, error)
        return _RETRY_DELAY * 5
    except InfergateError as error:
        log.warning("ParityCheck %s/%s: retrying: %s", key.namespace, key.name, error)
        return _RETRY_DELAY
    except Exception:
        log.exception("ParityCheck %s/%s: reconcile crashed, retrying", key.namespace, key.name)
        return _RETRY_DELAY
    return None


_SCHEDULE = Schedule()


@kopf.on.startup()
async def start_following(**kwargs: Any) -> None:
    """One loop follows every active check (a kopf timer per check would put a
    finalizer on it, which hangs deletion while the operator is down)."""
    indexes: Mapping[str, Any] = kwargs

    async def follow(key: OwnerKey) -> float | None:
        return await _follow(key, indexes)

    _SCHEDULE.start(follow, INTERVAL_SECONDS, "active_checks", indexes)


@kopf.on.cleanup()
async def stop_following(**_: Any) -> None:
    await _SCHEDULE.stop()
