"""Re-observation of every object of a kind: on a timer, at once when woken, and after a
failure under the one retry policy.

One loop per kind for the whole process (not a kopf daemon or timer per object: kopf
guards those with a finalizer, and a finalizer would hang deletion while the operator is
down). Each known object is reconciled every `interval` seconds (a safety net), sooner
when something it depends on changed (`wake`, at once or after a short debounce, as
`plan.deployment.wake` decides) or at the time the reconcile asked for (a deadline, the end of a
pause: scheduled, not polled), never twice at the same time, and at most `concurrency` at
once: a burst of hundreds of changes queues here, earliest due first, instead of crowding
the event loop and the API client's threads. A change the rollout acts on at once (a spec
change, a manual control, a new object: woken with no delay) goes ahead of the queue by
`urgent_lead` seconds: in a burst, every new spec is acted on before the follow-up
reconciles that only record its children's progress, and those then see more of that
progress at once (fewer reconciles, fewer status writes). The lead is bounded, so a
stream of spec changes delays a follow-up by at most that long past its due time. A
failed reconcile runs again after the backoff of `infergate.retry.RECONCILES` (jittered,
doubling per consecutive failure, a server's Retry-After as a floor), and nothing cuts
that wait short: not a wake-up (a change seen meanwhile is reconciled when the backoff
ends), not a second failure with a shorter delay, not a reconcile that succeeded while a
write it left to the background failed. A permanent
error (a spec problem, a refused request) waits for the next change or the usual
interval: repeating it now would repeat the refusal. A write refused because this replica
no longer leads (`NotLeaderError`) ends the reconcile there and schedules nothing: the
process is stopping, and the next leader reconciles everything. Nothing here is rollout
truth: a restarted process starts with an empty schedule and reconciles everything once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from infergate.errors import (
    InfergateError,
    KubeError,
    NotLeaderError,
    PermanentKubeError,
    SpecError,
)
from infergate.plan.metadata import OwnerKey
from infergate.retry import RECONCILES

# A reconcile returns how soon it wants to run again (a deadline), or None for the usual
# interval; it raises `infergate.errors` when it failed.
Reconcile = Callable[[OwnerKey], Awaitable[float | None]]
_MIN_WAIT = 0.05
URGENT_LEAD_SECONDS = 30.0
"""How far ahead of the queue a change woken at once goes (see the module's docstring)."""

log = logging.getLogger(__name__)


class Resyncer:
    """Schedules reconciles of the objects `known()` lists."""

    def __init__(
        self,
        reconcile: Reconcile,
        interval: float,
        *,
        wake_delay: float = 0.5,
        concurrency: int = 16,
        urgent_lead: float = URGENT_LEAD_SECONDS,
        draw: Callable[[], float] = random.random,
        on_start: Callable[[float], None] | None = None,
    ) -> None:
        self._reconcile = reconcile
        self.urgent_lead = urgent_lead
        # Told how long each reconcile waited past its due time (the concurrency cap).
        self._on_start = on_start
        self.interval = interval
        self.concurrency = max(1, concurrency)
        # A change of one child comes with changes of others (a Deployment, its pods, the
        # Service's endpoints): wait a moment so one reconcile sees them together.
        self.wake_delay = wake_delay
        self._draw = draw
        self._due: dict[OwnerKey, float] = {}
        # Woken at once since its last start: goes ahead of the queue by `urgent_lead`.
        self._urgent: set[OwnerKey] = set()
        self._failures: dict[OwnerKey, int] = {}
        # After a failure: not before this time, whatever wakes the key (the backoff, and a
        # server's Retry-After, hold for every trigger).
        self._hold: dict[OwnerKey, float] = {}
        # Failures seen per key so far (never reset): a reconcile that succeeds clears the
        # backoff only when no failure (a background write's) came while it ran.
        self._failed_count: dict[OwnerKey, int] = {}
        self._running: dict[OwnerKey, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()

    def wake(self, key: OwnerKey, *, delay: float | None = None) -> None:
        """Reconcile this object after `delay` seconds (default: the debounce `wake_delay`;
        0: at once, ahead of the queue), after the one in flight, if any."""
        wait = self.wake_delay if delay is None else max(0.0, delay)
        if wait == 0.0:
            self._urgent.add(key)
        soon = asyncio.get_running_loop().time() + wait
        self._due[key] = max(min(self._due.get(key, soon), soon), self._hold.get(key, soon))
        self._changed.set()

    def wake_all(self) -> None:
        """Reconcile every key soon."""
        for key in list(self._due):
            self.wake(key)

    async def run(self, known: Callable[[], Iterable[OwnerKey]]) -> None:
        """Forever: start the reconciles that are due, then sleep until the next one or a wake."""
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            now = loop.time()
            keys = set(known())
            for key in set(self._due) - keys:
                self._due.pop(key, None)
                self._urgent.discard(key)
                self._failures.pop(key, None)
                self._hold.pop(key, None)
                self._failed_count.pop(key, None)
            for key in keys:
                self._due.setdefault(key, now)
            ready = sorted(
                (key for key, due in self._due.items() if due <= now and key not in self._running),
                key=self._queue_position,
            )
            for key in ready[: max(0, self.concurrency - len(self._running))]:
                if self._on_start is not None:
                    self._on_start(now - self._due[key])
                self._urgent.discard(key)
                self._due[key] = now + self.interval
                self._running[key] = asyncio.create_task(self._one(key))
            if len(self._running) >= self.concurrency:
                timeout = self.interval  # a reconcile that ends sets `_changed`
            else:
                idle = [due - now for key, due in self._due.items() if key not in self._running]
                timeout = max(_MIN_WAIT, min(idle, default=self.interval))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def _queue_position(self, key: OwnerKey) -> float:
        """Earliest first; a key woken at once counts as due `urgent_lead` seconds earlier."""
        return self._due[key] - (self.urgent_lead if key in self._urgent else 0.0)

    def _again_in(self, key: OwnerKey, seconds: float) -> None:
        again = asyncio.get_running_loop().time() + seconds
        self._due[key] = min(self._due.get(key, again), again)

    async def _one(self, key: OwnerKey) -> None:
        failed_before = self._failed_count.get(key, 0)
        try:
            wanted = await self._reconcile(key)
        except Exception as error:  # noqa: BLE001 - every failure goes to the retry policy
            self.failed(key, error)
        else:
            if self._failed_count.get(key, 0) == failed_before:
                self._failures.pop(key, None)
                self._hold.pop(key, None)
            # else a write it left to the background failed meanwhile: its backoff (and
            # the server's Retry-After) stands.
            if wanted is not None:
                self._again_in(key, max(_MIN_WAIT, wanted))
        finally:
            self._running.pop(key, None)
            self._changed.set()

    def failed(self, key: OwnerKey, error: Exception) -> None:
        """A reconcile of `key` failed, or a write it left to run after it did: reconcile it
        again after the backoff (a permanent error: at the next change or interval; a write
        refused for want of leadership: not at all)."""
        if isinstance(error, NotLeaderError):
            log.info("%s/%s: reconcile stopped: %s", key.namespace, key.name, error)
            return
        if isinstance(error, (SpecError, PermanentKubeError)):
            self._failures.pop(key, None)
            self._hold.pop(key, None)
            log.warning("%s/%s not reconciled: %s", key.namespace, key.name, error)
            return
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self._failed_count[key] = self._failed_count.get(key, 0) + 1
        retry_after = error.retry_after if isinstance(error, KubeError) else None
        delay = RECONCILES.delay(failures, retry_after=retry_after, draw=self._draw)
        if isinstance(error, InfergateError):
            log.warning(
                "%s/%s: reconcile failed (%d in a row), again in %.1fs: %s",
                key.namespace, key.name, failures, delay, error,
            )  # fmt: skip
        else:
            log.error(
                "%s/%s: reconcile crashed, again in %.1fs",
                key.namespace, key.name, delay, exc_info=error,
            )  # fmt: skip
        # The backoff replaces whatever was due (a wake-up while it ran included), but never
        # shortens one already held: two failures of one reconcile (its own and a background
        # write's) each keep their Retry-After.
        hold = asyncio.get_running_loop().time() + delay
        self._hold[key] = max(hold, self._hold.get(key, hold))
        self._due[key] = self._hold[key]
        self._changed.set()

    async def stop(self) -> None:
        """Cancel the reconciles in flight."""
        for task in list(self._running.values()):
            task.cancel()
        for task in list(self._running.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Schedule:
    """A process's resync loop over the objects one kopf index holds, once started."""

    def __init__(self) -> None:
        self.resyncer: Resyncer | None = None
        self.task: asyncio.Task[None] | None = None

    def start(
        self,
        reconcile: Reconcile,
        interval: float,
        index: str,
        indexes: Mapping[str, Any],
        *,
        also: Sequence[str] = (),
        concurrency: int = 16,
        on_start: Callable[[float], None] | None = None,
    ) -> None:
        """Reconcile every key of the kopf index `index` (and of the indexes `also` names)
        every `interval` seconds, at most `concurrency` at once (`on_start`: told each
        one's wait past its due time)."""

        def known() -> set[OwnerKey]:
            keys: set[OwnerKey] = set()
            for name in (index, *also):
                found = indexes.get(name)
                if found is not None:
                    keys.update(found)
            return keys

        self.resyncer = Resyncer(reconcile, interval, concurrency=concurrency, on_start=on_start)
        self.task = asyncio.create_task(self.resyncer.run(known), name=f"resync-{index}")

    def wake(self, key: OwnerKey, *, delay: float | None = None) -> None:
        """Reconcile `key` after `delay` seconds (default: the debounce), when the loop runs."""
        if self.resyncer is not None:
            self.resyncer.wake(key, delay=delay)

    def failed(self, key: OwnerKey, error: Exception) -> None:
        """A write `key`'s reconcile left to run after it failed: back off, then again."""
        if self.resyncer is not None:
            self.resyncer.failed(key, error)

    def wake_all(self) -> None:
        """Reconcile every known key soon (this replica just became the leader)."""
        if self.resyncer is not None:
            self.resyncer.wake_all()

    async def stop(self) -> None:
        """Stop the loop and the reconciles it started."""
        if self.task is not None:
            self.task.cancel()
        if self.resyncer is not None:
            await self.resyncer.stop()
