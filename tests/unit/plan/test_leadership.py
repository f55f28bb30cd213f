"""Leader election decided on plain data, and one replica's rounds against a Lease that
another replica also writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infergate.controllers._leader import LeaderElection
from infergate.errors import ConflictError
from infergate.plan.leadership import (
    DEFAULT_TIMING,
    LeaderTiming,
    LeaseAction,
    LeaseRecord,
    RequestTimeout,
    lease_action,
    lease_spec,
    timing_refusal,
)

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


def record(holder: str | None, rv: str = "1") -> LeaseRecord:
    return LeaseRecord(
        holder=holder, duration_seconds=15, renew_time="t", transitions=2, resource_version=rv
    )


@pytest.mark.parametrize(
    ("lease", "seen_ago", "action"),
    [
        (None, None, LeaseAction.CREATE),
        (record("me"), 0, LeaseAction.RENEW),
        (record("me"), 60, LeaseAction.RENEW),
        (record(None), 0, LeaseAction.TAKE),
        (record("other"), 0, LeaseAction.WAIT),
        (record("other"), 14.9, LeaseAction.WAIT),
        (record("other"), 15, LeaseAction.TAKE),
        (record("other"), None, LeaseAction.WAIT),  # never seen change: wait a whole term
    ],
)
def test_a_lease_is_taken_only_after_a_whole_term_without_renewal(
    lease: LeaseRecord | None, seen_ago: float | None, action: LeaseAction
) -> None:
    now = 1000.0
    seen = None if seen_ago is None else now - seen_ago
    assert lease_action(lease, "me", now=now, last_change_seen=seen) is action


def test_taking_counts_a_transition_and_renewing_keeps_the_acquire_time() -> None:
    taken = lease_spec("me", duration_seconds=15, now=T0, previous=record("other"))
    assert taken["leaseTransitions"] == 3
    assert taken["acquireTime"] == "2026-12-03T12:00:00.000000Z"
    renewed = lease_spec("me", duration_seconds=15, now=T0, previous=record("me"))
    assert renewed["leaseTransitions"] == 2
    assert "acquireTime" not in renewed
    assert lease_spec("me", duration_seconds=15, now=T0, previous=None)["leaseTransitions"] == 0


class SharedLease:
    """One Lease, written by two replicas through the same resourceVersion rule."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.calls: list[str] = []

    def read(self) -> dict[str, Any] | None:
        self.calls.append("read")
        return None if self.body is None else {**self.body, "spec": dict(self.body["spec"])}

    def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        if self.body is not None:
            raise ConflictError("exists", status=409)
        return self._store(spec)

    def write(self, current: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("write")
        assert self.body is not None
        if current["metadata"]["resourceVersion"] != self.body["metadata"]["resourceVersion"]:
            raise ConflictError("stale", status=409)
        return self._store({**self.body["spec"], **spec})

    def _store(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.body = {"metadata": {"resourceVersion": str(self.version)}, "spec": spec}
        return self.body


class FakeClock:
    """Monotonic seconds and the wall clock, moved by the test."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)


def replica(identity: str, clock: FakeClock) -> LeaderElection:
    return LeaderElection(identity=identity, clock=clock.monotonic, wall=clock.wall)


def test_two_replicas_never_lead_together_and_the_follower_takes_over_after_a_term() -> None:
    lease = SharedLease()
    clock = FakeClock()
    a, b = replica("a", clock), replica("b", clock)
    leaders = []
    for second in range(60):
        clock.seconds = second
        a_leads = second < 20 and a.step(lease)  # type: ignore[arg-type]
        b_leads = b.step(lease)  # type: ignore[arg-type]
        assert not (a_leads and b_leads)
        leaders.append("a" if a_leads else "b" if b_leads else "-")
    assert leaders[:20] == ["a"] * 20
    # a stops renewing at 20s: b waits a whole term (15s) from the last change it saw.
    taken = leaders.index("b")
    assert 20 + 15 - 1 <= taken <= 20 + 15 + 1
    assert set(leaders[taken:]) == {"b"}


def test_the_holder_renews_with_one_write_and_no_read() -> None:
    lease = SharedLease()
    clock = FakeClock()
    a = replica("a", clock)
    assert a.step(lease)  # type: ignore[arg-type]
    assert lease.calls == ["read", "create"]
    lease.calls.clear()
    for second in (5, 10, 15):
        clock.seconds = second
        assert a.step(lease)  # type: ignore[arg-type]
    assert lease.calls == ["write", "write", "write"]
    assert lease.body is not None
    assert lease.body["spec"]["renewTime"] == "2026-12-03T12:00:15.000000Z"


def test_a_holder_whose_lease_someone_else_wrote_reads_it_and_follows() -> None:
    lease = SharedLease()
    clock = FakeClock()
    a, b = replica("a", clock), replica("b", clock)
    assert a.step(lease)  # type: ignore[arg-type]
    # The Lease is handed to b behind a's back (an admin, or a's term long expired).
    assert lease.body is not None
    lease.write(lease.body, {"holderIdentity": "b"})
    lease.calls.clear()
    clock.seconds = 5
    assert not a.step(lease)  # type: ignore[arg-type]
    assert lease.calls == ["write", "read"]  # its renewal conflicted; it read and waits
    clock.seconds = 6
    assert b.step(lease)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("timing", "refusal"),
    [
        (DEFAULT_TIMING, None),
        (LeaderTiming(lease_seconds=30, renew_deadline_seconds=20), None),
        (LeaderTiming(lease_seconds=15, renew_deadline_seconds=8.9), None),  # 8.9 + 6 < 15
        # The deadline plus the longest write must stay below the Lease's term.
        (LeaderTiming(lease_seconds=14), "--lease-seconds: 14 must be above"),
        (LeaderTiming(renew_deadline_seconds=9), "--lease-seconds: 15 must be above"),
        (LeaderTiming(renew_deadline_seconds=15), "--lease-seconds: 15 must be above"),
        (
            LeaderTiming(write_request=RequestTimeout(connect=1, read=30)),
            (
                "--lease-seconds: 15 must be above --renew-deadline-seconds (8) plus the "
                "longest write request (32s)"
            ),
        ),
        # A stuck renewal must be given up before the deadline.
        (
            LeaderTiming(renew_deadline_seconds=4),
            "--renew-deadline-seconds: 4 must be above the longest Lease request (4s)",
        ),
        (
            LeaderTiming(lease_request=RequestTimeout(connect=3, read=3)),
            "--renew-deadline-seconds: 8 must be above the longest Lease request (9s)",
        ),
        # The holder must try to renew before its deadline.
        (
            LeaderTiming(renew_seconds=8),
            "--renew-deadline-seconds: 8 must be above the renewal period (8s)",
        ),
        (LeaderTiming(lease_seconds=0), "--lease-seconds: 0 is not allowed"),
        (LeaderTiming(renew_deadline_seconds=-1), "--renew-deadline-seconds: -1 is not allowed"),
        (LeaderTiming(retry_seconds=0), "retry_seconds: 0 is not allowed"),
        (
            LeaderTiming(write_request=RequestTimeout(connect=0, read=1)),
            "write_request.connect: 0 is not allowed",
        ),
    ],
)
def test_a_timing_that_cannot_fence_the_leaders_writes_is_refused_naming_the_flag(
    timing: LeaderTiming, refusal: str | None
) -> None:
    found = timing_refusal(timing)
    if refusal is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(refusal), found


def test_the_default_timing_keeps_the_fence_inequalities_with_room_to_spare() -> None:
    t = DEFAULT_TIMING
    # A connection that could not be opened is tried twice; then the read waits.
    assert t.lease_request.longest == 1 * 2 + 2
    assert t.write_request.longest == 1 * 2 + 4
    assert t.renew_seconds < t.renew_deadline_seconds
    assert t.lease_request.longest < t.renew_deadline_seconds
    assert t.renew_deadline_seconds + t.write_request.longest < t.lease_seconds
