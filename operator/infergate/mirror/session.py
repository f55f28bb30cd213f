"""A shadow session: copies admitted while a shadow check runs, scored on both sides.

The runner of a `source: shadow` ParityCheck opens one session per mirror pod, with the
candidate revision, the sampling bounds and both sides' record metadata; it polls the
counts, then takes the result: the counts, the session it belongs to (id, candidate
revision, both sides' record metadata, echoed so the runner can refuse a result of
another session), and every scored pair (`mirror.pairs`: both sides' token ids and
scores of each copy, no text). The runner compares the pairs of all mirror pods in one
comparison, so the evidence is pooled over every pod. Prompt ids are sequence numbers
(the runner prefixes them by pod); no prompt or answer text is kept.

One worker scores the queue in order, so at most `maxQueue` copies (each bounded by
the proxy's body limit) wait in memory, and the canary sees at most one scoring
request at a time from each mirror pod. Scored pairs are kept up to `maxPairBytes`
of arrays: the pair that would pass it is dropped and nothing more is copied for the
session (both counted as `poolFull`), so a long window with heavy traffic stops
collecting instead of growing; the runner then decides on what was kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from infergate.api.base import KubeModel
from infergate.mirror.capture import Captured, capture
from infergate.mirror.pairs import encode_pair, pair_bytes
from infergate.mirror.sampling import Refusal, Sampler
from infergate.mirror.scoring import CanaryFailedError, ScoredPair, StableFailedError
from infergate.parity.record import RecordMeta

log = logging.getLogger(__name__)
SESSION_GRACE_SECONDS = 600
"""A session nobody asks about for this long past its window is closed (a runner gone)."""
MAX_PAIR_BYTES_DEFAULT = 64 * 1024 * 1024
MAX_PAIR_BYTES_LIMIT = 256 * 1024 * 1024


class SessionRequest(KubeModel):
    """What the runner asks of a mirror pod (the control API's POST body)."""

    id: str = Field(min_length=1, max_length=253)
    """The check's namespace/name: one session per check."""
    candidate_revision: str = Field(pattern=r"^[0-9a-f]{10}$")
    """The canary revision; its Service `<deployment>-<revision>` is scored on."""
    model: str = Field(min_length=1, max_length=256)
    """Served model name of both sides."""
    sample_rate: float = Field(gt=0.0, le=1.0)
    max_requests_per_second: float = Field(gt=0.0, le=1000.0)
    max_queue: int = Field(ge=1, le=1024)
    window_seconds: int = Field(ge=1, le=86400)
    store_prompts: bool = False
    top_logprobs: int = Field(default=5, ge=1, le=20)
    baseline: RecordMeta
    """The stable side's record metadata, as the runner compares it (echoed in the result)."""
    candidate: RecordMeta
    """The canary side's record metadata, as the runner compares it (echoed in the result)."""
    max_pair_bytes: int = Field(
        default=MAX_PAIR_BYTES_DEFAULT, ge=64 * 1024, le=MAX_PAIR_BYTES_LIMIT
    )
    """Array bytes of scored pairs this pod keeps for the runner; past it, nothing more is
    copied for the session (refused as poolFull)."""


@dataclass(frozen=True)
class Copy:
    """An admitted exchange waiting to be scored (raw bytes: parsed off the client's path)."""

    path: str
    request: bytes
    status: int
    content_type: str
    response: bytes


Scorer = Callable[[str, Captured], Awaitable[ScoredPair | None]]


@dataclass
class Session:
    """Counts, queue and the scored pairs of one shadow check on this pod."""

    request: SessionRequest
    scorer: Scorer
    started: float = field(default_factory=time.monotonic)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    last_seen: float = field(default_factory=time.monotonic)
    mirrored: int = 0
    scored: int = 0
    greedy: int = 0
    stable_failures: int = 0
    canary_failures: int = 0
    last_error: str | None = None
    sampler: Sampler = field(init=False)
    queue: asyncio.Queue[Copy] = field(init=False)
    pairs: list[ScoredPair] = field(default_factory=list)
    pair_bytes: int = 0
    pool_full: bool = False
    worker: asyncio.Task[None] | None = None
    _draw: Callable[[], float] = field(default=random.random)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        r = self.request
        self.sampler = Sampler.of(r.sample_rate, r.max_requests_per_second, r.max_queue)
        self.queue = asyncio.Queue(maxsize=r.max_queue)

    # -- the client's path: O(1), never waits --------------------------------------------

    @property
    def collecting(self) -> bool:
        return time.monotonic() - self.started < self.request.window_seconds

    def offer(self, copy_: Copy) -> None:
        """Admit a finished exchange, or count why not; never blocks, never raises."""
        self.mirrored += 1
        if not self.collecting:
            return
        if self.pool_full:
            self.sampler.refuse(Refusal.POOL_FULL)
            return
        refusal = self.sampler.admit(
            now=time.monotonic(), draw=self._draw(), queued=self.queue.qsize()
        )
        if refusal is None:
            try:
                self.queue.put_nowait(copy_)
            except asyncio.QueueFull:
                self.sampler.refuse(Refusal.QUEUE_FULL)

    # -- the worker ------------------------------------------------------------------------

    def start(self) -> None:
        self.worker = asyncio.create_task(self._work(), name=f"shadow {self.request.id}")

    async def stop(self) -> None:
        if self.worker is not None:
            self.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.worker

    async def _work(self) -> None:
        sequence = 0
        while True:
            copy_ = await self.queue.get()
            captured = capture(
                copy_.path, copy_.request, copy_.status, copy_.content_type, copy_.response
            )
            if captured is None:
                self.sampler.refuse(Refusal.UNUSABLE)
                continue
            sequence += 1
            prompt_id = f"m{sequence:06d}"
            try:
                pair = await self.scorer(prompt_id, captured)
            except StableFailedError as err:
                self.stable_failures += 1
                self.last_error = str(err)[:500]
                continue
            except CanaryFailedError as err:
                self.canary_failures += 1
                self.last_error = str(err)[:500]
                continue
            except Exception as err:
                log.exception("scoring %s failed", prompt_id)
                self.stable_failures += 1
                self.last_error = f"{type(err).__name__}: {err}"[:500]
                continue
            if pair is None:
                self.sampler.refuse(Refusal.UNUSABLE)
                continue
            await asyncio.to_thread(self._add, pair)

    def _add(self, pair: ScoredPair) -> None:
        size = pair_bytes(pair)
        with self._lock:
            if self.pool_full or self.pair_bytes + size > self.request.max_pair_bytes:
                self.pool_full = True
                self.sampler.refuse(Refusal.POOL_FULL)
                return
            self.pairs.append(pair)
            self.pair_bytes += size
            if pair.greedy is not None:
                self.greedy += 1
            self.scored += 1

    # -- what the runner reads ---------------------------------------------------------------

    def counts(self) -> dict[str, Any]:
        self.last_seen = time.monotonic()
        refused = {reason.value: n for reason, n in self.sampler.refused.items()}
        return {
            "id": self.request.id,
            "candidateRevision": self.request.candidate_revision,
            "startedAt": self.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "collecting": self.collecting,
            "mirrored": self.mirrored,
            "sampled": self.sampler.admitted,
            "queued": self.queue.qsize(),
            "scored": self.scored,
            "greedy": self.greedy,
            "poolFull": self.pool_full,
            "refused": refused,
            "stableFailures": self.stable_failures,
            "canaryFailures": self.canary_failures,
            "lastError": self.last_error,
        }

    def result(self) -> dict[str, Any]:
        """The counts, the session they belong to, and every scored pair (token ids and
        scores, no text). CPU work: call it off the event loop."""
        with self._lock:
            r = self.request
            return {
                "counts": self.counts(),
                "session": {
                    "id": r.id,
                    "candidateRevision": r.candidate_revision,
                    "baseline": r.baseline.model_dump(mode="json", by_alias=True),
                    "candidate": r.candidate.model_dump(mode="json", by_alias=True),
                },
                "pairBytes": self.pair_bytes,
                "pairs": [encode_pair(p) for p in self.pairs],
            }

    @property
    def abandoned(self) -> bool:
        idle = time.monotonic() - self.last_seen
        return not self.collecting and idle > SESSION_GRACE_SECONDS
