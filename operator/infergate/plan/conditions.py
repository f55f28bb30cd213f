"""metav1.Condition-shaped conditions of both kinds: one pure setter and lookups.

The one `set_condition` works on `Condition` models; a ParityCheck's conditions, read
from its status as plain dicts, go through `from_kube` / `to_kube` on the way in and out,
so both kinds follow the same transition rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from infergate.api.common import Condition
from infergate.api.enums import ConditionStatus
from infergate.plan import reasons

# Kubernetes caps condition messages at 32768 characters.
_MESSAGE_MAX = 32768


@dataclass(frozen=True)
class ConditionUpdate:
    """The wanted state of one condition; `set_condition` decides the transition time."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    """Whether the condition is present with status True."""
    found = find_condition(conditions, type_)
    return found is not None and found.status is ConditionStatus.TRUE


def set_condition(
    conditions: Sequence[Condition],
    update: ConditionUpdate,
    *,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Conditions with `update` applied; lastTransitionTime moves only when the status flips."""
    previous = find_condition(conditions, update.type)
    since = (
        previous.last_transition_time
        if previous is not None and previous.status is update.status
        else now
    )
    replacement = Condition(
        type=update.type,
        status=update.status,
        reason=update.reason,
        message=update.message[:_MESSAGE_MAX],
        observed_generation=generation,
        last_transition_time=since,
    )
    kept = [c for c in conditions if c.type != update.type]
    ordered = [*kept, replacement]
    return sorted(ordered, key=lambda c: _ORDER.get(c.type, len(_ORDER)))


# Conditions list in a stable order (each kind's types in the order people read them; the
# ones derived for tools last).
_ORDER = {
    name: index
    for index, name in enumerate(
        (
            *reasons.CONDITION_TYPES,
            *reasons.CHECK_CONDITION_TYPES,
            *reasons.READINESS_CONDITION_TYPES,
        )
    )
}


def set_conditions(
    conditions: Sequence[Condition],
    updates: Iterable[ConditionUpdate],
    *,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Conditions with every update applied in turn."""
    result = list(conditions)
    for update in updates:
        result = set_condition(result, update, generation=generation, now=now)
    return result


def from_kube(items: Iterable[Mapping[str, Any]]) -> list[Condition]:
    """Conditions as written in a status; an entry that is not one is dropped (and so
    rewritten by the next update of its type)."""
    parsed: list[Condition] = []
    for item in items:
        try:
            parsed.append(Condition.model_validate(item))
        except ValidationError:
            continue
    return parsed


def to_kube(conditions: Iterable[Condition]) -> list[dict[str, Any]]:
    """Conditions as a status stores them."""
    return [c.to_kube() for c in conditions]


def changed_conditions(before: Sequence[Condition], after: Sequence[Condition]) -> list[Condition]:
    """Conditions of `after` whose status or reason differ from `before` (each is an Event)."""
    changed: list[Condition] = []
    for condition in after:
        old = find_condition(before, condition.type)
        if old is None or old.status is not condition.status or old.reason != condition.reason:
            changed.append(condition)
    return changed
