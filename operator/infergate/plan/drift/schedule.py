"""When the drift watch starts a run of the stable revision, and why it waits (pure).

A run is due one period after the last run started (before the first: after the
revision became stable); none while a canary is rolled out, none without a golden record
of the stable revision to compare it with.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from infergate.api.drift import DriftStatus, DriftWatch
from infergate.api.enums import CheckPhase, ConditionStatus
from infergate.golden.keys import EntryName, Role
from infergate.plan import reasons
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.drift.state import GRACE, DriftInput, DriftPlan, Seen, seconds_until

SELF_SCORED_MATCH = 1.0
"""A revision's record made as a candidate is a usable baseline only if its outputs matched
its baseline's on every prompt (tokenMatchRate 1): else it was scored along the other side's
sequence."""


def next_run(watch: DriftWatch, anchor: datetime) -> datetime:
    """When the run after `anchor` (the last run's start, or when the revision became stable)
    is due."""
    cron = watch.cron()
    if cron is not None:
        return cron.next_after(anchor)
    assert watch.interval_seconds is not None  # noqa: S101 - exactly one of the two is set
    return anchor + timedelta(seconds=watch.interval_seconds)


def golden_record_known(checks: Sequence[ObservedCheck], owner_uid: str, revision: str) -> bool:
    """Whether a Passed check of the deployment's stored a record of `revision` that can be a
    baseline: its baseline's record, or its candidate's when the outputs matched throughout."""
    for check in checks:
        if check.owner_uid != owner_uid or check.drift or check.phase is not CheckPhase.PASSED:
            continue
        for entry in check.golden_entries:
            name = EntryName.parse(entry.rsplit("/", 1)[-1])
            if name is None or name.revision != revision:
                continue
            if name.role is Role.BASELINE:
                return True
            if check.metrics.get("tokenMatchRate") == SELF_SCORED_MATCH:
                return True
    return False


def schedule_run(
    inp: DriftInput,
    *,
    watch: DriftWatch,
    stable: str,
    seen: Seen,
    status: DriftStatus,
    condition: ConditionUpdate | None,
    restarted: Sequence[str] = (),
) -> DriftPlan:
    """No run in flight: start one if due and possible, else say when or why not. A group of
    the stable revision that `restarted` makes a run due now (`plan.drift.restart`)."""

    def waiting(reason: str, message: str) -> DriftPlan:
        shown = condition or ConditionUpdate(
            reasons.DRIFTED, ConditionStatus.UNKNOWN, reason, message
        )
        return DriftPlan(
            status=status.model_copy(update={"next_run": None, "message": message}),
            condition=shown,
        )

    if inp.canary is not None:
        return waiting(
            reasons.DRIFT_WATCH_PAUSED,
            f"paused while canary {inp.canary} is rolled out: the stable revision may change",
        )
    if not inp.golden_store:
        return waiting(
            reasons.GOLDEN_STORE_NOT_CONFIGURED,
            "the operator keeps no golden records (its --golden-config is unset), so there is "
            f"no record of stable revision {stable} to compare it with",
        )
    if not golden_record_known(inp.checks, inp.owner_uid, stable):
        return waiting(
            reasons.NO_GOLDEN_RECORD,
            f"no golden record of stable revision {stable} is known: a record is stored by a "
            "Passed check that compared it (as baseline, or as a candidate whose outputs "
            "matched on every prompt); the watch starts once one exists",
        )
    anchor = seen.last_run or inp.stable_since or inp.now
    due = next_run(watch, anchor)
    if due > inp.now and not restarted:
        shown = condition or ConditionUpdate(
            reasons.DRIFTED,
            ConditionStatus.UNKNOWN,
            reasons.DRIFT_WATCH_WAITING,
            f"the first drift run of stable revision {stable} starts at {due.isoformat()}",
        )
        return DriftPlan(
            status=status.model_copy(
                update={"next_run": due, "message": f"next run at {due.isoformat()}"}
            ),
            condition=shown,
            wake_in=seconds_until(due, inp.now),
        )
    run = seen.run + 1
    name = f"{inp.deployment}-{stable}-drift{run}"
    shown = condition or ConditionUpdate(
        reasons.DRIFTED,
        ConditionStatus.UNKNOWN,
        reasons.DRIFT_CHECK_PENDING,
        f"drift run {name} of stable revision {stable} is under way",
    )
    return DriftPlan(
        status=status.model_copy(
            update={
                "run": run,
                "check": name,
                "check_uid": None,  # recorded once it is created
                "spec_digest": None,
                "last_run": inp.now,
                "running": True,
                "next_run": None,
                "message": f"run {name} started{_ahead(restarted)}",
            }
        ),
        condition=shown,
        create_run=run,
        wake_in=GRACE.total_seconds(),
    )


def _ahead(restarted: Sequence[str]) -> str:
    if not restarted:
        return ""
    return f" ahead of the schedule: groups {', '.join(restarted)} restarted"
