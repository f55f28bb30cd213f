"""The drift watch's decision on plain data: when a run starts, what its verdict means, and
what it never does (pile up, pretend a pass, roll back where it cannot)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infergate.api.common import Condition
from infergate.api.drift import DriftStatus, DriftWatch, OnDrift
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.plan.check.owned import ObservedCheck
from infergate.plan.deployment.observed import check_family
from infergate.plan.drift.schedule import golden_record_known
from infergate.plan.drift.state import GRACE, DriftInput, run_number
from infergate.plan.drift.verdict import bound_drift_verdict, verdict_condition
from infergate.plan.drift.watch import decide_drift

NAME = "qwen"
UID = "uid-qwen"
STABLE = "aaaaaaaaaa"
OLD = "bbbbbbbbbb"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PROMOTED = NOW - timedelta(hours=2)
DEADLINE = 7200
DIGEST = "d" * 64


def record(revision: str = STABLE, role: str = "baseline") -> str:
    return f"llm/{NAME}/{revision}-20260105T080000000000Z-{role}-0a1b2c3d"


def canary_check(**changes: Any) -> ObservedCheck:
    """The Passed canary check that stored the stable revision's record (as its baseline)."""
    base = ObservedCheck(
        name=f"{NAME}-{OLD}",
        uid="uid-canary",
        owner_uid=UID,
        generation=1,
        created=PROMOTED - timedelta(minutes=10),
        spec_baseline=STABLE,
        spec_candidate=OLD,
        digest=DIGEST,
        stamped_digest=DIGEST,
        phase=CheckPhase.PASSED,
        outcome=VerdictOutcome.PASSED,
        passed=True,
        summary="passed",
        golden_entries=(record(STABLE), record(OLD, "candidate")),
        metrics={"tokenMatchRate": 0.75},
    )
    return replace(base, **changes)


def drift_check(run: int = 1, phase: CheckPhase | None = None, **changes: Any) -> ObservedCheck:
    """Run N of the stable revision, with a verdict bound to it when it has ended."""
    outcome = VerdictOutcome(phase.value) if phase and phase is not CheckPhase.RUNNING else None
    ended = outcome is not None
    base = ObservedCheck(
        name=f"{NAME}-{STABLE}-drift{run}",
        uid=f"uid-drift{run}",
        owner_uid=UID,
        generation=1,
        created=NOW - timedelta(minutes=30),
        spec_baseline=None,
        spec_candidate=STABLE,
        digest=DIGEST,
        stamped_digest=DIGEST,
        phase=phase,
        outcome=outcome,
        passed=(outcome is VerdictOutcome.PASSED) if ended else None,
        summary=f"{phase.value} (runner)" if phase else None,
        status_baseline=STABLE if ended else None,
        status_candidate=STABLE if ended else None,
        verdict_digest=DIGEST if ended else None,
        verdict_generation=1 if ended else None,
        completion_time=NOW - timedelta(minutes=5) if ended else None,
        purpose="drift",
        spec_golden=STABLE,
    )
    return replace(base, **changes)


def recorded(check: ObservedCheck, **fields: Any) -> DriftStatus:
    """status.drift as the operator wrote it once it had created `check`: its name, the uid
    the create returned and the digest of the spec it made it with."""
    return DriftStatus(
        revision=STABLE,
        run=run_number(check.name),
        check=check.name,
        check_uid=f"uid-drift{run_number(check.name)}",
        spec_digest=DIGEST,
        last_run=check.created,
        running=True,
        **fields,
    )


def given(**changes: Any) -> DriftInput:
    if "previous" not in changes:
        # The operator records every run it makes: the newest run is the one status names.
        runs = [c for c in changes.get("checks", []) if c.drift]
        newest = max(runs, key=lambda c: run_number(c.name) or 0, default=None)
        changes["previous"] = recorded(newest) if newest is not None else None
    base = DriftInput(
        deployment=NAME,
        owner_uid=UID,
        watch=DriftWatch(interval_seconds=3600),
        on_drift=OnDrift(),
        check_deadline_seconds=DEADLINE,
        stable=STABLE,
        stable_since=PROMOTED,
        canary=None,
        golden_store=True,
        checks=[canary_check()],
        previous=None,
        previous_condition=None,
        retained=[OLD],
        history_limit=3,
        now=NOW,
    )
    return replace(base, **changes)


def condition(status: str, reason: str, message: str = "") -> Condition:
    return Condition(
        type="Drifted",
        status=ConditionStatus(status),
        reason=reason,
        message=message,
        last_transition_time=NOW - timedelta(hours=1),
    )


def seen(check: ObservedCheck, verdict: VerdictOutcome) -> DriftStatus:
    """status.drift as it was written once `check`'s verdict had been seen."""
    return DriftStatus(
        revision=STABLE,
        run=1,
        check=check.name,
        check_uid=check.uid,
        spec_digest=check.digest,
        last_verdict=verdict,
        last_verdict_check=check.name,
    )


# -- when a run starts --------------------------------------------------------------------


def test_the_first_run_is_due_one_interval_after_the_revision_became_stable() -> None:
    plan = decide_drift(given())  # stable for 2 h, interval 1 h: due
    assert plan.create_run == 1
    assert plan.status is not None
    assert plan.status.check == f"{NAME}-{STABLE}-drift1"
    assert plan.status.last_run == NOW
    assert plan.status.running is True
    assert plan.condition is not None
    assert (plan.condition.status, plan.condition.reason) == (
        ConditionStatus.UNKNOWN,
        "DriftCheckPending",
    )


def test_before_it_is_due_the_watch_says_when_and_asks_to_be_woken_then() -> None:
    plan = decide_drift(given(stable_since=NOW - timedelta(minutes=20)))
    assert plan.create_run is None
    assert plan.status is not None
    assert plan.status.next_run == NOW + timedelta(minutes=40)
    assert plan.wake_in == 40 * 60
    assert plan.condition is not None
    assert plan.condition.reason == "DriftWatchWaiting"


def test_the_next_run_counts_from_the_start_of_the_last_one() -> None:
    last = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=50))
    plan = decide_drift(
        given(checks=[canary_check(), last], previous=seen(last, VerdictOutcome.PASSED))
    )
    assert plan.create_run is None
    assert plan.status is not None
    assert plan.status.next_run == NOW + timedelta(minutes=10)
    last = replace(last, created=NOW - timedelta(minutes=61))
    plan = decide_drift(
        given(checks=[canary_check(), last], previous=seen(last, VerdictOutcome.PASSED))
    )
    assert plan.create_run == 2


def test_a_cron_schedule_runs_at_its_next_time() -> None:
    watch = DriftWatch(schedule="0 3 * * *")
    last = drift_check(1, CheckPhase.PASSED, created=datetime(2026, 1, 5, 3, 0, 4, tzinfo=UTC))
    plan = decide_drift(
        given(
            watch=watch, checks=[canary_check(), last], previous=seen(last, VerdictOutcome.PASSED)
        )
    )
    assert plan.status is not None
    assert plan.status.next_run == datetime(2026, 1, 6, 3, 0, tzinfo=UTC)
    assert plan.wake_in == 15 * 3600


def test_a_run_slower_than_the_schedule_delays_the_next_and_nothing_piles_up() -> None:
    every_5 = DriftWatch(schedule="*/5 * * * *")
    running = drift_check(1, CheckPhase.RUNNING, created=NOW - timedelta(minutes=23))
    plan = decide_drift(given(watch=every_5, checks=[canary_check(), running]))
    assert plan.create_run is None  # four slots passed while it ran: none is queued
    assert plan.wake_in == (timedelta(seconds=DEADLINE) + GRACE - timedelta(minutes=23)).seconds
    # Once it ended: one run now, then the schedule from now on.
    ended = replace(
        running,
        **{f: getattr(drift_check(1, CheckPhase.PASSED), f) for f in _VERDICT_FIELDS},
    )
    plan = decide_drift(given(watch=every_5, checks=[canary_check(), ended]))
    assert plan.create_run == 2
    assert plan.status is not None
    assert plan.status.last_run == NOW


_VERDICT_FIELDS = (
    "phase", "outcome", "passed", "summary", "status_baseline", "status_candidate",
    "verdict_digest", "verdict_generation", "completion_time",
)  # fmt: skip


def test_a_run_past_its_deadline_is_stopped_and_counted_as_an_error() -> None:
    stuck = drift_check(1, CheckPhase.RUNNING, created=NOW - timedelta(seconds=DEADLINE) - GRACE)
    plan = decide_drift(given(checks=[canary_check(), stuck]))
    assert stuck.name in plan.delete
    assert [(o.kind, o.reason) for o in plan.outcomes] == [("drift", "Error")]
    assert plan.condition is not None
    assert plan.condition.reason == "DriftCheckError"
    # The next slot (an interval after its start) has passed: one new run replaces it.
    assert plan.create_run == 2


def test_a_run_just_asked_for_and_not_yet_seen_is_waited_for_not_made_twice() -> None:
    asked = DriftStatus(
        revision=STABLE, run=1, check=f"{NAME}-{STABLE}-drift1", last_run=NOW,
        running=True,
    )  # fmt: skip
    pending = condition("Unknown", "DriftCheckPending", "under way")
    plan = decide_drift(
        given(previous=asked, previous_condition=pending, now=NOW + timedelta(seconds=2))
    )
    assert plan.create_run is None
    assert plan.condition is not None  # Drifted stays as it was, never dropped meanwhile
    assert plan.condition.reason == "DriftCheckPending"
    # A run the status names that never appeared is made again once the grace is over.
    plan = decide_drift(given(previous=asked, now=NOW + GRACE + timedelta(seconds=1)))
    assert plan.create_run == 2


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"canary": "cccccccccc"}, "DriftWatchPaused"),
        ({"golden_store": False}, "GoldenStoreNotConfigured"),
        ({"checks": []}, "NoGoldenRecord"),
        ({"checks": [canary_check(owner_uid="someone-else")]}, "NoGoldenRecord"),
        ({"checks": [canary_check(phase=CheckPhase.FAILED)]}, "NoGoldenRecord"),
        ({"stable": None}, "NoStableRevision"),
    ],
    ids=["canary", "no-store", "no-record", "foreign-record", "failed-check", "no-stable"],
)
def test_no_run_is_made_when_it_could_not_be_judged_and_status_says_why(
    changes: dict[str, Any], reason: str
) -> None:
    plan = decide_drift(given(**changes))
    assert plan.create_run is None
    assert plan.condition is not None
    assert (plan.condition.status, plan.condition.reason) == (ConditionStatus.UNKNOWN, reason)
    assert plan.status is not None
    assert plan.status.next_run is None
    assert plan.status.message


@pytest.mark.parametrize(
    ("entries", "match", "known"),
    [
        ((record(STABLE),), 0.5, True),
        ((record(STABLE, "candidate"),), 1.0, True),
        ((record(STABLE, "candidate"),), 0.75, False),  # scored along the other sequence
        ((record(OLD),), 1.0, False),
        (("not-an-entry",), 1.0, False),
    ],
)
def test_which_records_can_be_a_drift_baseline(
    entries: tuple[str, ...], match: float, known: bool
) -> None:
    check = canary_check(golden_entries=entries, metrics={"tokenMatchRate": match})
    assert golden_record_known([check], UID, STABLE) is known


# -- what a verdict means -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "status", "reason"),
    [
        (CheckPhase.PASSED, "False", "NoDriftDetected"),
        (CheckPhase.FAILED, "True", "DriftDetected"),
        (CheckPhase.INCONCLUSIVE, "Unknown", "DriftCheckInconclusive"),
        (CheckPhase.ERROR, "Unknown", "DriftCheckError"),
    ],
)
def test_a_verdict_sets_drifted(phase: CheckPhase, status: str, reason: str) -> None:
    check = drift_check(1, phase)
    plan = decide_drift(given(checks=[canary_check(), check]))
    assert plan.condition is not None
    assert (plan.condition.status.value, plan.condition.reason) == (status, reason)
    assert plan.status is not None
    assert plan.status.last_verdict is VerdictOutcome(phase.value)
    assert [(o.kind, o.reason) for o in plan.outcomes] == [("drift", phase.value)]


@pytest.mark.parametrize(
    ("outcome", "prior", "expected"),
    [
        (VerdictOutcome.PASSED, "True", ("False", "NoDriftDetected")),
        (VerdictOutcome.FAILED, "False", ("True", "DriftDetected")),
        # No evidence clears an alarm, and none raises or denies one.
        (VerdictOutcome.INCONCLUSIVE, "True", ("True", "DriftDetected")),
        (VerdictOutcome.ERROR, "True", ("True", "DriftDetected")),
        (VerdictOutcome.INCONCLUSIVE, "False", ("Unknown", "DriftCheckInconclusive")),
        (VerdictOutcome.ERROR, "False", ("Unknown", "DriftCheckError")),
        (VerdictOutcome.ERROR, None, ("Unknown", "DriftCheckError")),
    ],
)
def test_verdict_mapping(
    outcome: VerdictOutcome, prior: str | None, expected: tuple[str, str]
) -> None:
    before = condition(prior, "X", "earlier") if prior else None
    update = verdict_condition(
        outcome, check="c", stable=STABLE, summary="s", unbound=None, prior=before
    )
    assert (update.status.value, update.reason) == expected
    if outcome in (VerdictOutcome.ERROR, VerdictOutcome.INCONCLUSIVE):
        assert "not a pass" in update.message or "stands until a run passes" in update.message


@pytest.mark.parametrize(
    "forgery",
    [
        {"verdict_digest": "e" * 64},
        {"verdict_generation": 2},
        {"stamped_digest": None},
        {"status_baseline": OLD},
        {"spec_golden": OLD},
        {"spec_candidate": OLD, "status_candidate": OLD},
        {"passed": True},
    ],
    ids=["digest", "generation", "unstamped", "resolved", "record", "candidate", "passed"],
)
def test_a_failed_verdict_not_bound_to_the_run_counts_as_an_error(forgery: dict[str, Any]) -> None:
    check = drift_check(1, CheckPhase.FAILED, **forgery)
    outcome, why = bound_drift_verdict(check, STABLE)
    assert outcome is VerdictOutcome.ERROR
    assert why
    plan = decide_drift(
        given(checks=[canary_check(), check], on_drift=OnDrift(action="rollback", rollback_to=OLD))
    )
    assert plan.rollback_to is None
    if forgery.get("spec_candidate") is None:
        assert plan.condition is not None
        assert plan.condition.reason == "DriftCheckNotBound"


def test_a_verdict_is_counted_and_announced_once() -> None:
    failed = drift_check(1, CheckPhase.FAILED)
    first = decide_drift(given(checks=[canary_check(), failed]))
    assert [(n.warning, n.reason) for n in first.notices] == [(True, "DriftDetected")]
    again = decide_drift(
        given(
            checks=[canary_check(), failed],
            previous=first.status,
            previous_condition=condition("True", "DriftDetected"),
        )
    )
    assert again.outcomes == ()
    assert again.notices == ()
    assert again.condition is not None
    assert again.condition.status is ConditionStatus.TRUE


@pytest.mark.parametrize(
    ("action", "notices"), [("none", []), ("alert", [(True, "DriftDetected")])]
)
def test_on_drift_none_only_records(action: str, notices: list[tuple[bool, str]]) -> None:
    plan = decide_drift(
        given(
            checks=[canary_check(), drift_check(1, CheckPhase.FAILED)],
            on_drift=OnDrift(action=action),
        )
    )
    assert [(n.warning, n.reason) for n in plan.notices] == notices
    assert plan.condition is not None
    assert plan.condition.status is ConditionStatus.TRUE  # the condition and metric stay


def test_a_drift_clears_when_a_later_run_passes() -> None:
    passed = drift_check(2, CheckPhase.PASSED)
    plan = decide_drift(
        given(
            checks=[canary_check(), drift_check(1, CheckPhase.FAILED), passed],
            previous=recorded(passed, last_verdict=VerdictOutcome.FAILED,
                              last_verdict_check=f"{NAME}-{STABLE}-drift1"),
            previous_condition=condition("True", "DriftDetected"),
        )
    )  # fmt: skip
    assert plan.condition is not None
    assert plan.condition.status is ConditionStatus.FALSE
    assert [(n.warning, n.reason) for n in plan.notices] == [(False, "NoDriftDetected")]


# -- rollback -----------------------------------------------------------------------------


def _rollback(**changes: Any) -> Any:
    return decide_drift(
        given(
            checks=[canary_check(), drift_check(1, CheckPhase.FAILED)],
            on_drift=OnDrift(action="rollback", rollback_to=changes.pop("target", OLD)),
            **changes,
        )
    )


def test_a_drift_rolls_back_to_a_retained_revision() -> None:
    plan = _rollback()
    assert plan.rollback_to == OLD
    assert plan.condition is not None
    assert plan.condition.status is ConditionStatus.TRUE


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (
            {"target": "0123456789"},
            "is not a retained, once promoted revision (retained: bbbbbbbbbb)",
        ),
        ({"retained": []}, "(retained: none)"),
        ({"target": STABLE}, "is the drifted stable revision itself"),
        ({"canary": "cccccccccc"}, "waits for canary cccccccccc"),
    ],
    ids=["unknown", "none-retained", "itself", "canary"],
)
def test_a_rollback_that_cannot_be_done_is_not_done_and_says_why(
    changes: dict[str, Any], said: str
) -> None:
    plan = _rollback(**changes)
    assert plan.rollback_to is None
    assert plan.status is not None
    assert plan.status.message is not None
    assert said in plan.status.message
    assert (True, "DriftRollbackRefused") in [(n.warning, n.reason) for n in plan.notices]


# -- tidying ------------------------------------------------------------------------------


def test_finished_runs_beyond_the_history_limit_go_and_unfinished_ones_of_another_revision_too() -> (
    None
):
    runs = [
        drift_check(n, CheckPhase.PASSED, created=NOW - timedelta(hours=10 - n))
        for n in range(1, 6)
    ]
    old_running = drift_check(
        1, CheckPhase.RUNNING, name=f"{NAME}-{OLD}-drift1", spec_candidate=OLD
    )
    plan = decide_drift(given(checks=[canary_check(), *runs, old_running], history_limit=3))
    assert sorted(plan.delete) == sorted([runs[0].name, runs[1].name, old_running.name])


def test_without_a_watch_runs_in_flight_stop_and_drifted_goes() -> None:
    running = drift_check(1, CheckPhase.RUNNING)
    plan = decide_drift(given(watch=None, checks=[canary_check(), running]))
    assert plan.status is None
    assert plan.condition is None
    assert plan.delete == (running.name,)


def test_a_run_just_asked_for_does_not_make_the_last_verdict_count_again() -> None:
    # Run 1 ended and was counted; run 2 was asked for but the watch does not see it yet.
    ended = drift_check(1, CheckPhase.FAILED, created=NOW - timedelta(hours=2))
    asked = DriftStatus(
        revision=STABLE, run=2, check=f"{NAME}-{STABLE}-drift2", last_run=NOW,
        running=True, last_verdict=VerdictOutcome.FAILED, last_verdict_check=ended.name,
    )  # fmt: skip
    plan = decide_drift(
        given(
            checks=[canary_check(), ended],
            previous=asked,
            previous_condition=condition("True", "DriftDetected"),
            now=NOW + timedelta(seconds=1),
        )
    )
    assert (plan.outcomes, plan.notices, plan.create_run) == ((), (), None)
    assert plan.status == asked


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (f"{NAME}-{STABLE}", NAME),
        (f"{NAME}-{STABLE}-step2", NAME),
        (f"{NAME}-{STABLE}-drift12", NAME),
        (f"my-{NAME}-{STABLE}-drift1", f"my-{NAME}"),
    ],
)
def test_a_drift_run_wakes_and_is_indexed_under_its_deployment(name: str, family: str) -> None:
    # The index and the wake-up of a deployment find its checks by name: a drift run that
    # fell under `<name>-<revision>` would never wake the deployment with its verdict.
    assert check_family(name) == family


def test_after_a_stopped_run_is_gone_the_run_before_it_is_not_counted_again() -> None:
    before = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(hours=5))
    stuck = drift_check(2, CheckPhase.RUNNING, created=NOW - timedelta(seconds=DEADLINE) - GRACE)
    daily = DriftWatch(schedule="0 3 * * *")  # no new run today: the next is tomorrow
    plan = decide_drift(
        given(
            watch=daily,
            checks=[canary_check(), before, stuck],
            previous=recorded(
                stuck, last_verdict=VerdictOutcome.PASSED, last_verdict_check=before.name
            ),
        )
    )
    assert [(o.kind, o.reason) for o in plan.outcomes] == [("drift", "Error")]
    assert plan.create_run is None
    # Next reconcile: the stopped run is deleted, the one before it is the newest in sight.
    later = decide_drift(
        given(
            watch=daily,
            checks=[canary_check(), before],
            previous=plan.status,
            previous_condition=condition("Unknown", "DriftCheckError"),
            now=NOW + timedelta(seconds=5),
        )
    )
    assert later.outcomes == ()
    assert later.notices == ()
    assert later.status is not None
    assert later.status.last_verdict is VerdictOutcome.ERROR
