"""Which watch events wake a reconcile, how soon, and when a reconcile runs again (pure).

The operator reconciles on change, not on a timer: a deployment's own change wakes its
reconcile at once when it is something the rollout acts on (its spec, a manual promote,
abort or rollback annotation, a new object), after a short debounce when it is anything
else a decision reads (its status, labels or other annotations: often the operator's own
write, whose reconcile is then quiet and costs no API call), and not at all when only
bookkeeping moved (resourceVersion, managedFields, kopf's annotations). A child's change
wakes its owner after the debounce (a Deployment, its pods and the Service's endpoints
change together; one reconcile sees them all), unless the planner's record of the child
is unchanged. Time-based progress (a deadline, the end of a pause) is scheduled: the
reconcile says when it wants to run again (`again_in`), and the periodic resync is only
a safety net.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, is_dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from infergate.plan.deployment.control import CONTROL_ANNOTATIONS, REQUESTED_BY

KOPF_PREFIX = "kopf.infergate.io"
"""kopf's own annotations (controllers/startup.py): bookkeeping, never a reason to act."""
DEBOUNCE_SECONDS = 0.5
"""How long a debounced wake-up waits for the changes that come with it."""


class Wake(StrEnum):
    NOW = "now"
    """Reconcile at once: the rollout acts on this change."""
    SOON = "soon"
    """Reconcile after the debounce: something a decision reads changed."""
    NO = "no"
    """Nothing a decision reads changed."""


def delay_seconds(wake: Wake) -> float | None:
    """How long the resync loop waits before the reconcile; None: no reconcile."""
    return {Wake.NOW: 0.0, Wake.SOON: DEBOUNCE_SECONDS, Wake.NO: None}[wake]


@dataclass(frozen=True)
class DeploymentMark:
    """What of an InferenceDeployment decides how soon its change is acted on."""

    uid: str
    generation: int
    control: tuple[tuple[str, str], ...]
    """The manual control annotations present, with their values."""
    rest: str
    """A digest of everything else a decision reads: labels, other annotations, status."""


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def deployment_mark(body: Mapping[str, Any]) -> DeploymentMark:
    """The mark of one InferenceDeployment as the watch delivered it."""
    metadata = body.get("metadata") or {}
    annotations = dict(metadata.get("annotations") or {})
    control_keys = (*CONTROL_ANNOTATIONS, REQUESTED_BY)
    control = tuple((k, str(annotations[k])) for k in control_keys if k in annotations)
    others = {
        k: v
        for k, v in annotations.items()
        if k not in control_keys and not k.startswith(KOPF_PREFIX)
    }
    return DeploymentMark(
        uid=str(metadata.get("uid") or ""),
        generation=int(metadata.get("generation") or 0),
        control=control,
        rest=_digest([metadata.get("labels") or {}, others, body.get("status") or {}]),
    )


def deployment_wake(previous: DeploymentMark | None, current: DeploymentMark | None) -> Wake:
    """How soon a deployment's own watch event is reconciled; `current` None: deleted."""
    if current is None:
        return Wake.NO
    if previous is None or previous.uid != current.uid:
        return Wake.NOW  # new (or seen for the first time since the process started)
    if previous.generation != current.generation:
        return Wake.NOW  # its spec changed
    if previous.control != current.control and current.control:
        return Wake.NOW  # a person asked for a promote, an abort or a rollback
    if previous.control != current.control or previous.rest != current.rest:
        return Wake.SOON
    return Wake.NO


def essence(record: object) -> object:
    """A child's record without its resourceVersion (which every write moves)."""
    if (
        is_dataclass(record)
        and not isinstance(record, type)
        and hasattr(record, "resource_version")
    ):
        return replace(record, resource_version="")
    return record


def child_wake(previous: object | None, current: object | None, *, deleted: bool) -> Wake:
    """How soon a child's watch event wakes its owner: `previous` and `current` are the
    planner's records of the child (`essence` of them); `current` None: not one the
    planner reads (the owner is woken anyway, to be safe)."""
    if deleted or current is None:
        return Wake.SOON
    if previous == current:
        return Wake.NO
    return Wake.SOON


def again_in(due: datetime | None, now: datetime) -> float | None:
    """Seconds from `now` until a reconcile that asked to run again at `due` does (never
    negative); None: no time-based step waits, the next change or resync will do."""
    if due is None:
        return None
    return max(0.0, (due - now).total_seconds())
