"""Leader election: of the operator's replicas, only the holder of its Lease acts.

Every replica watches and keeps its indexes warm; only the leader reconciles (both
controllers ask `LEADER.leading` first). The election runs in a thread of its own, with
blocking calls and its own clock, so a busy event loop (a burst of hundreds of
reconciles) never makes the holder miss a renewal. The holder renews every
`renew_seconds` with one PUT of the Lease it last wrote (no GET before it: its
resourceVersion guards the write; a conflict means someone else wrote: then it reads and
decides as a candidate does). A candidate reads the Lease every `retry_seconds`. A
leader that cannot renew within `renew_deadline_seconds` stops leading at once and stops
the process (it restarts as a follower): two replicas never act together. A new leader
reconciles every object at once. Failover takes at most `lease_seconds` plus one retry
after the last renewal.
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
from infergate.kube.lease import LeaseClient
from infergate.plan.leadership import (
    LeaseAction,
    election_pause,
    lease_action,
    lease_record,
    lease_spec,
)

log = logging.getLogger(__name__)


@dataclass
class LeaderElection:
    """One replica's side of the election; `leading` is what the controllers read."""

    identity: str = ""
    lease_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    renew_seconds: float = 5.0
    retry_seconds: float = 2.0
    leading: bool = True
    """True until an election is started (one replica, or none asked for)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when leadership is lost: the process stops and restarts as a follower."""
    _last_mark: object = None
    _last_change_seen: datetime | None = None
    _last_renewed: float = 0.0
    _held: JSON | None = None
    """The Lease as this replica last wrote it while holding it: the next renewal's base."""
    _thread: threading.Thread | None = None
    _closing: threading.Event = field(default_factory=threading.Event)

    def step(self, leases: LeaseClient, now: datetime) -> bool:
        """One round: renew what we hold (one PUT), or read, decide, write; whether this
        replica leads now (blocking)."""
        if self._held is not None:
            try:
                return self._renew(leases, self._held, now)
            except ConflictError:
                self._held = None  # someone else wrote it: read it, and decide from that
        current = leases.read()
        record = lease_record(current)
        if record is not None and record.generation_mark != self._last_mark:
            self._last_mark = record.generation_mark
            self._last_change_seen = now
        action = lease_action(
            record, self.identity, now=now, last_change_seen=self._last_change_seen
        )
        if action is LeaseAction.WAIT:
            return False
        spec = lease_spec(
            self.identity, duration_seconds=self.lease_seconds, now=now, previous=record
        )
        try:
            written = leases.create(spec) if current is None else leases.write(current, spec)
        except (AlreadyExistsError, ConflictError):
            return False  # another candidate wrote first; read again next round
        self._held = written
        self._last_renewed = time.monotonic()
        return True

    def _renew(self, leases: LeaseClient, held: JSON, now: datetime) -> bool:
        spec = lease_spec(
            self.identity,
            duration_seconds=self.lease_seconds,
            now=now,
            previous=lease_record(held),
        )
        # A failure other than a conflict leaves `_held` as it was: maybe written, maybe
        # not; a stale base conflicts next time, and then the round reads.
        self._held = leases.write(held, spec)
        self._last_renewed = time.monotonic()
        return True

    def round(self, leases: LeaseClient, on_leading: Callable[[], None]) -> float:
        """One round of the election loop (blocking); the seconds until the next one."""
        try:
            won = self.step(leases, datetime.now(UTC))
        except KubeError as error:
            log.warning("leader election: %s", error)
            won = False
        if won and not self.leading:
            log.info("leading as %s", self.identity)
            self.leading = True
            metrics.LEADER.set(1)
            on_leading()
        elif self.leading and not won:
            overdue = time.monotonic() - self._last_renewed > self.renew_deadline_seconds
            if overdue:
                log.error(
                    "leadership lost (no renewal for %.0fs); stopping",
                    time.monotonic() - self._last_renewed,
                )
                self.leading = False
                self._held = None
                metrics.LEADER.set(0)
                self.stop.set()
        return election_pause(
            leading=self.leading,
            renewed=won,
            renew_seconds=self.renew_seconds,
            retry_seconds=self.retry_seconds,
        )

    def run_blocking(self, leases: LeaseClient, on_leading: Callable[[], None]) -> None:
        """Forever (until `stop`): hold or wait for the Lease."""
        self.leading = False
        metrics.LEADER.set(0)
        while not self.stop.is_set() and not self._closing.is_set():
            pause = self.round(leases, on_leading)
            self._closing.wait(pause)

    def start(self, leases: LeaseClient, on_leading: Callable[[], None]) -> None:
        """Run the election in a thread of its own; `on_leading` runs in the caller's event
        loop (it wakes the resync loops) each time this replica becomes the leader."""
        loop = asyncio.get_running_loop()
        self.leading = False

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
            self._thread.join(timeout=self.retry_seconds + 5)
            self._thread = None

    def release(self, leases: LeaseClient) -> None:
        """Give the Lease up on a clean shutdown, so a follower takes over at once (blocking)."""
        if not self.leading:
            return
        self.leading = False
        self._held = None
        metrics.LEADER.set(0)
        current = leases.read()
        record = lease_record(current)
        if current is None or record is None or record.holder != self.identity:
            return
        try:
            leases.write(current, {"holderIdentity": "", "leaseDurationSeconds": 1})
        except KubeError as error:
            log.warning("leader election: could not release the Lease: %s", error)


LEADER = LeaderElection()
