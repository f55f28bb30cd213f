"""Leader election: of the operator's replicas, only the holder of its Lease acts.

Every replica watches and keeps its indexes warm; only the leader reconciles (both
controllers ask `LEADER.leading` first). A candidate checks the Lease every
`retry_seconds`; the leader renews it. A leader that cannot renew within
`renew_deadline_seconds` stops leading at once and stops the process (it restarts
as a follower): two replicas never act together. A new leader reconciles every
object at once. Failover takes at most `lease_seconds` plus one retry.
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
from infergate.kube.lease import LeaseClient
from infergate.plan.leadership import LeaseAction, lease_action, lease_record, lease_spec

log = logging.getLogger(__name__)


@dataclass
class LeaderElection:
    """One replica's side of the election; `leading` is what the controllers read."""

    identity: str = ""
    lease_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0
    leading: bool = True
    """True until an election is started (one replica, or none asked for)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when leadership is lost: the process stops and restarts as a follower."""
    _last_mark: object = None
    _last_change_seen: datetime | None = None
    _last_renewed: float = 0.0

    def step(self, leases: LeaseClient, now: datetime) -> bool:
        """One round: read, decide, write; whether this replica leads now (blocking)."""
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
            if current is None:
                leases.create(spec)
            else:
                leases.write(current, spec)
        except (AlreadyExistsError, ConflictError):
            return False  # another candidate wrote first; read again next round
        self._last_renewed = time.monotonic()
        return True

    async def run(self, leases: LeaseClient, on_leading: Callable[[], None]) -> None:
        """Forever: hold or wait for the Lease; stop the process when leadership is lost."""
        self.leading = False
        metrics.LEADER.set(0)
        while not self.stop.is_set():
            try:
                won = await asyncio.to_thread(self.step, leases, datetime.now(UTC))
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
                    metrics.LEADER.set(0)
                    self.stop.set()
                    return
            await asyncio.sleep(self.retry_seconds)

    def release(self, leases: LeaseClient) -> None:
        """Give the Lease up on a clean shutdown, so a follower takes over at once (blocking)."""
        if not self.leading:
            return
        self.leading = False
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
