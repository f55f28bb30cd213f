"""The write fence: a write leaves this process only while its leadership is still valid.

Leadership is checked when a reconcile starts, but a reconcile takes time, and the Lease
can lapse meanwhile (renewals stuck behind a network partition, a process paused). So
every write is checked again right before it is sent: the election moves `valid_until`
(a monotonic time) to `sent + renew_deadline` at each renewal that succeeded, `sent`
being when that renewal left; a write asked for at or after `valid_until` raises
`NotLeaderError` and is never sent.

Why that fences: another replica takes the Lease no sooner than `lease_seconds` after it
saw our last renewal, which is after we sent it. A write that passed the fence left
before `sent + renew_deadline` and reached the API server, if ever, before its request
timed out, so before `sent + renew_deadline + longest write request`, which
`plan.leadership.timing_refusal` keeps below `sent + lease_seconds`. The old leader's
last write lands before the new leader exists. (`plan.leadership` states the
assumptions.)

A single replica (no election) is never fenced: its fence stays open. A replica that
gives the Lease up on purpose first `retire`s the fence and `drain`s the writes already
past it, so no write of its own lands after the follower took over.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from infergate.errors import NotLeaderError


class WriteFence:
    """Whether this replica may write now; every write of the process passes `write`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._changed = threading.Condition()
        self._valid_until = math.inf
        self._retired = False
        self._in_flight = 0

    @property
    def valid_until(self) -> float:
        """The monotonic time from which writes are refused."""
        return self._valid_until

    def is_open(self) -> bool:
        """Whether a write asked for now would be sent."""
        return not self._retired and self._clock() < self._valid_until

    def open_until(self, until: float) -> None:
        """A renewal succeeded: writes may leave until `until` (monotonic seconds); never
        reopens a retired fence."""
        with self._changed:
            if not self._retired:
                self._valid_until = until

    def shut(self) -> None:
        """Refuse every write until the next `open_until` (a candidate, not yet leading)."""
        with self._changed:
            self._valid_until = -math.inf

    def retire(self) -> None:
        """Refuse every write for good (leadership lost or given up: the process stops)."""
        with self._changed:
            self._retired = True
            self._valid_until = -math.inf

    @contextmanager
    def write(self, what: str) -> Iterator[None]:
        """Around one write request: refuse it (`NotLeaderError`) when the fence is shut,
        else count it in flight until it ends."""
        with self._changed:
            if not self.is_open():
                raise NotLeaderError(f"{what}: not sent: this replica no longer leads")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until no write that passed the fence is still under way (at most `timeout`
        seconds); whether none is."""
        with self._changed:
            return self._changed.wait_for(lambda: self._in_flight == 0, timeout)
