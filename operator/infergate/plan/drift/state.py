"""What the drift watch decides from and what it hands back (pure, immutable).

`DriftInput` is everything one decision reads, gathered by the rollout
(`plan.deployment.drift`); `DriftPlan` is what the watch does in this reconcile; `Seen`
is the watch's view of the stable revision's runs, shared by the steps that judge the
latest run (`plan.drift.verdict`) and start the next (`plan.drift.schedule`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from infergate.api.common import Condition
from infergate.api.drift import DriftStatus, DriftWatch, OnDrift
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.notices import Notice, Outcome

GRACE = timedelta(seconds=60)
"""Past a run's deadline, the time its check has to land its own Error; and how long a run
the status names may take to show in the watch before it counts as never made."""
_RUN = re.compile(r"-drift(\d+)$")


@dataclass(frozen=True)
class DriftInput:
    """Everything the drift watch decides from, as plain data."""

    deployment: str
    owner_uid: str
    watch: DriftWatch | None
    on_drift: OnDrift
    check_deadline_seconds: int
    """The drift run's ParityCheck deadlineSeconds (the rollout template's)."""
    stable: str | None
    stable_since: datetime | None
    """When the stable revision became stable (its record's promotedAt)."""
    canary: str | None
    """A canary being rolled out (the watch pauses meanwhile)."""
    golden_store: bool
    """The operator keeps golden records (--golden-config)."""
    checks: Sequence[ObservedCheck]
    """Every ParityCheck of the deployment, drift runs and canary checks alike."""
    previous: DriftStatus | None
    previous_condition: Condition | None
    """The Drifted condition as status has it."""
    retained: Sequence[str]
    """Revisions a rollback may go to: in the history, once promoted, their spec known."""
    history_limit: int
    """How many finished drift runs are kept (revisionHistoryLimit)."""
    now: datetime
    groups: Mapping[str, str] | None = None
    """A multi-node stable revision's whole groups now, by group index, each to the digest of
    its pods (`plan.deployment.groups.whole_group_digests`); None: one-node, no groups."""
    group_replicas: int = 0
    """Groups the stable revision's LeaderWorkerSet asks for (indexes beyond are forgotten)."""


@dataclass(frozen=True)
class DriftPlan:
    """What the drift watch does in this reconcile."""

    status: DriftStatus | None
    """status.drift; None when no watch is set."""
    condition: ConditionUpdate | None
    """The Drifted condition; None: the condition goes (no watch)."""
    create_run: int | None = None
    """Start run N of the stable revision now."""
    delete: tuple[str, ...] = ()
    """Drift runs to delete: superseded, overdue, or beyond the history limit."""
    wake_in: float | None = None
    """Seconds until the watch must look again (the next run, or a run's deadline)."""
    rollback_to: str | None = None
    """Roll back to this revision now (onDrift.action rollback after a drift)."""
    notices: tuple[Notice, ...] = ()
    outcomes: tuple[Outcome, ...] = ()


@dataclass(frozen=True)
class Seen:
    """The watch's view of the stable revision's runs."""

    latest: ObservedCheck | None
    """The newest run the watch sees."""
    run: int
    """The highest run number used (seen, or asked for in status)."""
    last_run: datetime | None
    previous: DriftStatus | None
    prior: Condition | None
    unseen: bool = False
    """Status names a newer run than any seen: just asked for (the watch lags), or never made."""
    asked: int = 0
    """The number of the run the watch itself asked for last (status.drift.run); `run`
    counts every name, a look-alike's too, to find the next free one."""


def run_number(name: str) -> int | None:
    """N of a drift run's name `<deployment>-<revision>-drift<N>`; None for other names."""
    found = _RUN.search(name)
    return int(found.group(1)) if found else None


def seconds_until(until: datetime, now: datetime) -> float:
    """Seconds from `now` to `until`; 0 when it has passed (a wake-up is never negative)."""
    return max(0.0, (until - now).total_seconds())
