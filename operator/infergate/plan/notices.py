"""What a decision tells people beside its conditions, as plain records (pure).

A `Notice` becomes an Event on the object (an action taken, or a request refused); an
`Outcome` is counted in the operator's metrics. Both the rollout and the drift watch
hand them back with their decisions, so they live beside neither.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """Something to count: a promotion, a rollback, or a parity verdict, with its reason."""

    kind: str  # "promotion" | "rollback" | "verdict"
    reason: str


@dataclass(frozen=True)
class Notice:
    """An Event that is not a condition change (an action, or a refused request)."""

    warning: bool
    reason: str
    message: str
