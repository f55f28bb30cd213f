"""kopf handlers of ParityChecks: one level-triggered reconcile, on a short timer.

Every few seconds, for every check that has not ended and released its children,
`kube.paritycheck_reconcile.reconcile` gathers what is observed (sides, probes, the
runner Job), decides with the pure `runner.lifecycle`, and writes. The runner writes
progress and the verdict itself; this controller starts what the check needs, follows
the Job, enforces the check's deadline, ends the check in `Error` when the runner
cannot, and deletes probes, Job and RBAC once the check ended. No finalizer: children
are owned by the check and go with it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from infergate.controllers._context import client
from infergate.errors import ConflictError, InfergateError, PermanentKubeError
from infergate.kube.paritycheck_children import CheckChildren
from infergate.kube.paritycheck_reconcile import reconcile
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


@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_SECONDS, when=_active)
def follow_check(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Reconcile one check (a sync handler: kopf runs it in a worker thread)."""

    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    api = CheckChildren(client(), namespace or "")
    try:
        result = reconcile(api, name, datetime.now(UTC).replace(microsecond=0), emit)
    except ConflictError as error:
        raise kopf.TemporaryError(str(error), delay=_CONFLICT_DELAY) from error
    except PermanentKubeError as error:
        logger.warning("ParityCheck %s/%s: %s", namespace, name, error)
        raise kopf.TemporaryError(str(error), delay=_RETRY_DELAY * 5) from error
    except InfergateError as error:
        raise kopf.TemporaryError(str(error), delay=_RETRY_DELAY) from error
    if result.actions.terminal is not None:
        logger.info("ParityCheck %s/%s ended: %s", namespace, name, result.phase)
