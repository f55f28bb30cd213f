"""Leader election: of the operator's replicas, only the holder of its Lease acts.

Every replica watches and keeps its indexes warm; only the leader reconciles (both
controllers ask `LEADER.leading` first), and only the leader's writes leave the process
(each passes the write fence, `kube.fence`, right before it is sent). The election runs
in a thread of its own, with blocking calls and its own clock, so a busy event loop (a
burst of hundreds of reconciles) never makes the holder miss a renewal. The holder
renews every `renew_seconds` with one PUT of the Lease it last wrote (no GET before it:
its resourceVersion guards the write; a conflict means someone else wrote: then it reads
and decides as a candidate does). A candidate reads the Lease every `retry_seconds`.

Each successful renewal opens the fence until `renew_deadline_seconds` after the renewal
was sent; `leading` is whether the fence is open, so it drops the moment the deadline
passes without a renewal, whether or not the election thread is stuck in a request at
that moment, and a reconcile already under way writes nothing more. When the thread
sees the deadline passed, it retires the fence and stops the process (it restarts as a
follower). Why this is enough (the numbers in `plan.leadership.LeaderTiming`):

    another replica takes the Lease no sooner than lease_seconds after our last renewal,
    and renew_deadline_seconds + the longest write request < lease_seconds,

so our last write lands before the next leader exists. A new leader reconciles every
object at once. Failover takes at most `lease_seconds` plus one retry after the last
renewal; a replica that stops cleanly gives the Lease up after its writes in flight
ended, and a follower takes over at its next read.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from infergate import metrics
from infergate.errors import AlreadyExistsError, ConflictError, KubeError
from infergate.jsontypes import JSON
from infergate.kube.fence import WriteFence
from infergate.kube.lease import LeaseClient
from infergate.plan.leadership import (
    DEFAULT_TIMING,
    LeaderTiming,
    LeaseAction,
    election_pause,
    lease_action,
    lease_record,
    lease_spec,
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


log = logging.getLogger(__name__)


@dataclass
class LeaderElection:
    """One replica's side of the election; `leading` is what the controllers read."""

    identity: str = ""
    timing: LeaderTiming = DEFAULT_TIMING
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds: the renewal deadline and a candidate's wait are timed by it."""
    wall: Callable[[], datetime] = _utc_now
    """The time written into the Lease (for people and other tools; no decision reads it)."""
    fence: WriteFence = field(init=False)
    """Open while this replica may write; open for good until an election is started (one
    replica, or none asked for). Give the process's API client this fence."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when leadership is lost: the process stops and restarts as a follower."""
    _elected: bool = False
    """Whether the election thread last counted itself the leader (for its transitions)."""
    _last_mark: object = None
    _last_change_seen: float | None = None
    _held: JSON | None = None
    """The Lease as this replica last wrote it while holding it: the next renewal's base."""
    _thread: threading.Thread | None = None
    _closing: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        # Timed by the election's own clock, the one its renewals are stamped with.
        self.fence = WriteFence(self.clock)

    @property
    def leading(self) -> bool:
        """Whether this replica acts now: it renewed the Lease within the renewal deadline."""
        return self.fence.is_open()

    def follow(self) -> None:
        """Act on nothing until this replica holds the Lease (an election is about to start)."""
        self.fence.shut()

    def step(self, leases: LeaseClient) -> bool:
        """One round: renew what we hold (one PUT), or read, decide, write; whether this
        replica holds the Lease now (blocking)."""
        if self._held is not None:
            try:
                return self._renew(leases, self._held)
            except ConflictError:
                self._held = None  # someone else wrote it: read it, and decide from that
        current = leases.read()
        # Timed once the read answered: the holder may have renewed while it was under way.
        seen = self.clock()
        record = lease_record(current)
        if record is not None and record.generation_mark != self._last_mark:
            self._last_mark = record.generation_mark
            self._last_change_seen = seen
        action = lease_action(
            record, self.identity, now=seen, last_change_seen=self._last_change_seen
        )
        if action is LeaseAction.WAIT:
            return False
        spec = lease_spec(
            self.identity,
            duration_seconds=self.timing.lease_seconds,
            now=self.wall(),
            previous=record,
        )
        sent = self.clock()
        try:
            written = leases.create(spec) if current is None else leases.write(current, spec)
        except (AlreadyExistsError, ConflictError):
            return False  # another candidate wrote first; read again next round
        self._hold(written, sent)
        return True

    def _renew(self, leases: LeaseClient, held: JSON) -> bool:
        spec = lease_spec(
            self.identity,
            duration_seconds=self.timing.lease_seconds,
            now=self.wall(),
            previous=lease_record(held),
        )
        sent = self.clock()
        # A failure other than a conflict leaves `_held` as it was: maybe written, maybe
        # not; a stale base conflicts next time, and then the round reads.
        self._hold(leases.write(held, spec), sent)
        return True

    def _hold(self, written: JSON, sent: float) -> None:
        """The Lease is ours as written by a request sent at `sent`: act until the renewal
        deadline counted from then (a candidate counts from when it read it, later)."""
        self._held = written
        self.fence.open_until(sent + self.timing.renew_deadline_seconds)

    def round(self, leases: LeaseClient, on_leading: Callable[[], None]) -> float:
        """One round of the election loop (blocking); the seconds until the next one."""
        try:
            won = self.step(leases)
        except KubeError as error:
            log.warning("leader election: %s", error)
            won = False
        if won and not self._elected:
            log.info("leading as %s", self.identity)
            self._elected = True
            metrics.LEADER.set(1)
            on_leading()
        elif self._elected and not self.leading:
            # The fence shut itself at the deadline; this only makes it final.
            log.error(
                "leadership lost (no renewal within %.0fs); stopping",
                self.timing.renew_deadline_seconds,
            )
            self._elected = False
            self._held = None
            self.fence.retire()
            metrics.LEADER.set(0)
            self.stop.set()
        return election_pause(
            leading=self._elected,
            renewed=won,
            renew_seconds=self.timing.renew_seconds,
            retry_seconds=self.timing.retry_seconds,
        )

    def run_blocking(self, leases: LeaseClient, on_leading: Callable[[], None]) -> None:
        """Forever (until `stop`): hold or wait for the Lease."""
        self.follow()
        metrics.LEADER.set(0)
        while not self.stop.is_set() and not self._closing.is_set():
            pause = self.round(leases, on_leading)
            self._closing.wait(pause)

    def start(self, leases: LeaseClient, on_leading: Callable[[], None]) -> None:
        """Run the election in a thread of its own; `on_leading` runs in the caller's event
        loop (it wakes the resync loops) each time this replica becomes the leader."""
        loop = asyncio.get_running_loop()
        self.follow()

        def lead() -> None:
            loop.call_soon_threadsafe(on_leading)

        self._thread = threading.Thread(
            target=self.run_blocking, args=(leases, lead), name="leader-election", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the election thread (the process is stopping)."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.retry_seconds + 5)
            self._thread = None

    def release(self, leases: LeaseClient) -> None:
        """Give the Lease up on a clean shutdown, so a follower takes over at once (blocking):
        no write is sent from now on, and the Lease is released only once the writes
        already sent have ended (else the follower's first writes could meet ours)."""
        if not self.leading:
            self.fence.retire()
            return
        self.fence.retire()
        self._elected = False
        self._held = None
        metrics.LEADER.set(0)
        if not self.fence.drain(self.timing.write_request.longest + 1):
            # Cannot happen with bounded write requests; the Lease then lapses on its own.
            log.warning("leader election: writes still under way; the Lease is left to expire")
            return
        current = leases.read()
        record = lease_record(current)
        if current is None or record is None or record.holder != self.identity:
            return
        try:
            leases.write(current, {"holderIdentity": "", "leaseDurationSeconds": 1})
        except KubeError as error:
            log.warning("leader election: could not release the Lease: %s", error)


LEADER = LeaderElection()
