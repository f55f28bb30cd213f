"""A restart inside the stable revision's groups calls a drift run ahead of the schedule, and
Drifted says the last verdict no longer speaks for the group until that run judges it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infergate.api.drift import DriftStatus
from infergate.api.enums import CheckPhase, ConditionStatus, VerdictOutcome
from infergate.plan.deployment.groups import GroupPod, whole_group_digests
from infergate.plan.drift.restart import observe_restarts
from infergate.plan.drift.watch import decide_drift

from .test_watch import (
    DIGEST,
    NAME,
    NOW,
    STABLE,
    canary_check,
    condition,
    drift_check,
    given,
    recorded,
    seen,
)

HASH = "f" * 64


def pod(name: str, group: str, worker: str, uid: str, restarts: int = 0, **kw: object) -> GroupPod:
    fields: dict[str, object] = {
        "revision": STABLE,
        "revision_hash": f"sha256:{HASH}",
        "ready": True,
        **kw,
    }
    return GroupPod(
        name=name, group=group, worker=worker, uid=uid, restarts=restarts,
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def digests(*pods: GroupPod) -> dict[str, str]:
    return whole_group_digests(pods, size=2, revision=STABLE, revision_hash=HASH)


GROUP0 = (pod("w-0", "0", "0", "u1"), pod("w-0-1", "0", "1", "u2"))


@pytest.mark.parametrize(
    ("now", "restarted"),
    [
        pytest.param(GROUP0, False, id="same pods: no restart"),
        pytest.param((GROUP0[0], pod("w-0-1", "0", "1", "u3")), True, id="worker replaced"),
        pytest.param((GROUP0[0], pod("w-0-1", "0", "1", "u2", 1)), True, id="worker restarted"),
        pytest.param((pod("w-0", "0", "0", "u1", 2), GROUP0[1]), True, id="leader restarted"),
    ],
)
def test_a_group_whole_again_with_other_pods_restarted(
    now: tuple[GroupPod, ...], restarted: bool
) -> None:
    first = observe_restarts(None, STABLE, digests(*GROUP0), 1)
    assert first is not None
    assert first.restarted == ()  # the first sighting is recorded, not a restart
    before = DriftStatus(revision=STABLE, groups=list(first.groups))
    found = observe_restarts(before, STABLE, digests(*now), 1)
    assert found is not None
    assert found.restarted == (("0",) if restarted else ())


def test_a_group_not_whole_keeps_its_record_until_it_is_whole_again() -> None:
    first = observe_restarts(None, STABLE, digests(*GROUP0), 1)
    assert first is not None
    before = DriftStatus(revision=STABLE, groups=list(first.groups))
    gone = digests(GROUP0[0])  # the worker is gone: not whole, no digest
    assert gone == {}
    broken = observe_restarts(before, STABLE, gone, 1)
    assert broken is not None
    assert (broken.groups, broken.restarted) == (first.groups, ())
    back = observe_restarts(
        DriftStatus(revision=STABLE, groups=list(broken.groups)),
        STABLE,
        digests(pod("w-0", "0", "0", "u4"), pod("w-0-1", "0", "1", "u5")),
        1,
    )
    assert back is not None
    assert back.restarted == ("0",)
    assert back.found == ("0",)


def test_a_not_ready_or_other_revision_group_has_no_digest() -> None:
    assert digests(GROUP0[0], pod("w-0-1", "0", "1", "u2", ready=False)) == {}
    assert digests(GROUP0[0], pod("w-0-1", "0", "1", "u2", revision="cccccccccc")) == {}


def test_a_record_of_another_revision_or_a_group_scaled_away_counts_for_nothing() -> None:
    old = DriftStatus(revision="cccccccccc", groups=["0=aaaa"], restarted_groups=["0"])
    found = observe_restarts(old, STABLE, {"0": "bbbb"}, 1)
    assert found is not None
    assert (found.groups, found.restarted) == (("0=bbbb",), ())
    mine = DriftStatus(revision=STABLE, groups=["0=aaaa", "1=cccc"], restarted_groups=["1"])
    found = observe_restarts(mine, STABLE, {"0": "aaaa"}, 1)
    assert found is not None
    assert (found.groups, found.restarted) == (("0=aaaa",), ())


def test_a_one_node_revision_records_nothing() -> None:
    assert observe_restarts(DriftStatus(revision=STABLE), STABLE, None, 0) is None


# -- what the watch does ------------------------------------------------------------------


def passed_run() -> tuple[object, DriftStatus]:
    """A run that passed 10 minutes ago: the next is due in 50 minutes."""
    last = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=10))
    return last, seen(last, VerdictOutcome.PASSED)


def test_a_restart_starts_a_run_at_once_and_says_why() -> None:
    last, status = passed_run()
    status = status.model_copy(update={"groups": ["0=aaaa"]})
    quiet = decide_drift(given(checks=[canary_check(), last], previous=status, groups={"0": "aaaa"},
                               group_replicas=1))  # fmt: skip
    assert quiet.create_run is None  # no restart: the schedule stands
    plan = decide_drift(
        given(
            checks=[canary_check(), last],
            previous=status,
            previous_condition=condition("False", "NoDriftDetected"),
            groups={"0": "bbbb"},
            group_replicas=1,
        )
    )
    assert plan.create_run == 2
    assert plan.status is not None
    assert plan.status.groups == ["0=bbbb"]
    assert plan.status.restarted_groups == []  # the run made takes it over
    assert plan.condition is not None
    assert (plan.condition.status, plan.condition.reason) == (
        ConditionStatus.UNKNOWN,
        "GroupRestarted",
    )
    assert f"{STABLE}-drift2 re-checks" in plan.condition.message
    assert [n.reason for n in plan.notices] == ["GroupRestarted"]


def test_a_restart_during_a_run_waits_for_it_then_runs_again() -> None:
    running = drift_check(1, None, created=NOW - timedelta(minutes=10))
    status = DriftStatus(
        revision=STABLE, run=1, check=running.name, check_uid=running.uid,
        spec_digest=running.digest, last_run=running.created, running=True, groups=["0=aaaa"],
    )  # fmt: skip
    plan = decide_drift(
        given(checks=[canary_check(), running], previous=status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.create_run is None
    assert plan.status is not None
    assert plan.status.restarted_groups == ["0"]
    assert plan.condition is not None
    assert plan.condition.reason == "GroupRestarted"
    # The run ends (it started before the restart): the next starts at once.
    ended = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=10))
    after = decide_drift(
        given(
            checks=[canary_check(), ended],
            previous=plan.status.model_copy(update={"running": None}),
            groups={"0": "bbbb"},
            group_replicas=1,
        )
    )
    assert after.create_run == 2


def test_a_restart_clears_no_alarm() -> None:
    last = drift_check(1, CheckPhase.FAILED, created=NOW - timedelta(minutes=10))
    status = seen(last, VerdictOutcome.FAILED).model_copy(update={"groups": ["0=aaaa"]})
    plan = decide_drift(
        given(
            checks=[canary_check(), last],
            previous=status,
            previous_condition=condition("True", "DriftDetected", "drift run x: drifted"),
            groups={"0": "bbbb"},
            group_replicas=1,
        )
    )
    assert plan.condition is not None
    assert plan.condition.status is ConditionStatus.TRUE
    assert "restarted" in plan.condition.message


def test_a_restart_waiting_beside_an_alarm_is_said_once_however_many_reconciles() -> None:
    """Drifted True stays True through a restart (it clears no alarm), and while the run
    cannot start (a canary rolls out) each reconcile reads back the message it wrote: the
    restart is said once, not once more per reconcile."""
    last = drift_check(1, CheckPhase.FAILED, created=NOW - timedelta(minutes=10))
    status = seen(last, VerdictOutcome.FAILED).model_copy(update={"groups": ["0=aaaa"]})
    alarm = condition("True", "DriftDetected", "drift run x: drifted")
    messages = []
    for _ in range(3):
        plan = decide_drift(
            given(checks=[canary_check(), last], previous=status, previous_condition=alarm,
                  canary="cccccccccc", groups={"0": "bbbb"}, group_replicas=1)
        )  # fmt: skip
        assert plan.create_run is None
        assert plan.condition is not None
        assert plan.status is not None
        assert plan.condition.status is ConditionStatus.TRUE
        messages.append(plan.condition.message)
        status = plan.status
        alarm = condition("True", plan.condition.reason, plan.condition.message)
    assert messages[0].count(f"group 0 of stable revision {STABLE} restarted") == 1
    assert messages[1:] == messages[:-1]


def test_a_restart_while_a_canary_rolls_out_waits_and_stays_in_sight() -> None:
    last, status = passed_run()
    status = status.model_copy(update={"groups": ["0=aaaa"]})
    plan = decide_drift(
        given(checks=[canary_check(), last], previous=status, canary="cccccccccc",
              groups={"0": "bbbb"}, group_replicas=1)
    )  # fmt: skip
    assert plan.create_run is None
    assert plan.status is not None
    assert plan.status.restarted_groups == ["0"]
    assert plan.condition is not None
    assert plan.condition.reason == "GroupRestarted"
    assert "canary" in plan.condition.message


def test_without_a_watch_a_restart_does_nothing() -> None:
    plan = decide_drift(given(watch=None, groups={"0": "bbbb"}, group_replicas=1))
    assert plan.create_run is None
    assert plan.status is None


# -- the hold: a restarted group serves again only once a run made after it passes --------


def _restarted_with_run_made() -> DriftStatus:
    """status.drift once group 0 restarted and run 2 was made for it."""
    last, status = passed_run()
    plan = decide_drift(
        given(
            checks=[canary_check(), last],
            previous=status.model_copy(update={"groups": ["0=aaaa"]}),
            groups={"0": "bbbb"},
            group_replicas=1,
        )
    )
    assert plan.create_run == 2
    assert plan.status is not None
    return plan.status.model_copy(
        update={"check": f"{NAME}-{STABLE}-drift2", "check_uid": "uid-drift2",
                "spec_digest": DIGEST, "last_run": NOW, "running": True}
    )  # fmt: skip


def test_a_restarted_group_is_held_from_its_sighting_until_its_run_passes() -> None:
    status = _restarted_with_run_made()
    assert (status.held_groups, status.hold_run) == (["0"], 2)
    first = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=10))
    running = drift_check(2, None, created=NOW)
    plan = decide_drift(
        given(checks=[canary_check(), first, running], previous=status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.status is not None
    assert (plan.status.held_groups, plan.status.hold_run) == (["0"], 2)  # still running
    passed = drift_check(2, CheckPhase.PASSED, created=NOW)
    plan = decide_drift(
        given(checks=[canary_check(), first, passed], previous=status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.status is not None
    assert (plan.status.held_groups, plan.status.hold_run) == ([], None)
    assert plan.condition is not None
    assert plan.condition.reason == "NoDriftDetected"


@pytest.mark.parametrize(
    ("phase", "drifted"),
    [
        pytest.param(CheckPhase.FAILED, ConditionStatus.TRUE, id="failed: drifted, still held"),
        pytest.param(CheckPhase.INCONCLUSIVE, ConditionStatus.UNKNOWN, id="inconclusive: held"),
        pytest.param(CheckPhase.ERROR, ConditionStatus.UNKNOWN, id="error: held"),
    ],
)
def test_a_re_check_that_does_not_pass_keeps_the_group_held_and_says_why(
    phase: CheckPhase, drifted: ConditionStatus
) -> None:
    status = _restarted_with_run_made()
    first = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=10))
    ended = drift_check(2, phase, created=NOW)
    plan = decide_drift(
        given(checks=[canary_check(), first, ended], previous=status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.status is not None
    assert plan.status.held_groups == ["0"]
    assert plan.condition is not None
    assert plan.condition.status is drifted
    assert "group 0 of stable revision" in plan.condition.message
    assert "held out of serving" in plan.condition.message
    assert f"{STABLE}-drift2" in plan.condition.message
    # A later run that passes releases it.
    again = plan.status.model_copy(
        update={"run": 3, "check": f"{NAME}-{STABLE}-drift3", "check_uid": "uid-drift3",
                "running": True, "last_run": NOW}
    )  # fmt: skip
    later = drift_check(3, CheckPhase.PASSED, created=NOW)
    plan = decide_drift(
        given(checks=[canary_check(), ended, later], previous=again, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.status is not None
    assert plan.status.held_groups == []


def test_a_run_that_started_before_the_restart_releases_nothing() -> None:
    running = drift_check(1, None, created=NOW - timedelta(minutes=10))
    status = recorded(running, groups=["0=aaaa"])
    plan = decide_drift(
        given(checks=[canary_check(), running], previous=status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert plan.status is not None
    assert (plan.status.held_groups, plan.status.hold_run) == (["0"], None)
    ended = drift_check(1, CheckPhase.PASSED, created=NOW - timedelta(minutes=10))
    after = decide_drift(
        given(checks=[canary_check(), ended], previous=plan.status, groups={"0": "bbbb"},
              group_replicas=1)
    )  # fmt: skip
    assert after.status is not None
    assert after.create_run == 2  # the re-check of the restart
    assert (after.status.held_groups, after.status.hold_run) == (["0"], 2)


def test_a_held_group_scaled_away_or_of_another_revision_is_forgotten() -> None:
    held = DriftStatus(revision=STABLE, groups=["0=aaaa", "1=cccc"], held_groups=["1"], hold_run=2)
    found = observe_restarts(held, STABLE, {"0": "aaaa"}, 1)
    assert found is not None
    assert found.held == ()
    other = held.model_copy(update={"revision": "cccccccccc"})
    found = observe_restarts(other, STABLE, {"0": "aaaa", "1": "cccc"}, 2)
    assert found is not None
    assert found.held == ()
