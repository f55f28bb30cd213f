"""One retry policy for every client of the API server: exponential backoff with jitter.

Used by both controllers (how soon a failed reconcile runs again), by the runner (status
writes) and by the local cluster's own client. The rules:

- only `RetriableKubeError` is retried (409, 429, 5xx, no answer); a permanent error
  (any other 4xx) is raised at once: repeating the request repeats the refusal;
- the delay doubles from `initial` up to `maximum`, and "full jitter" draws it
  uniformly below that bound, so clients that failed together do not retry together
  (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015);
- a server's Retry-After (429 from priority and fairness, 503) is a floor: never
  retry sooner than the server asked;
- attempts are bounded: nothing retries forever.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from infergate.errors import ConflictError, KubeError, RetriableKubeError

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how soon a retriable failure is tried again."""

    initial: float = 0.2
    """Upper bound of the first delay, in seconds."""
    maximum: float = 30.0
    """Largest upper bound of any delay, in seconds."""
    multiplier: float = 2.0
    """Growth of the bound per attempt."""
    attempts: int = 6
    """Tries in all, the first included."""

    def bound(self, attempt: int) -> float:
        """The delay bound after failed attempt number `attempt` (1 for the first failure)."""
        return min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))

    def delay(
        self,
        attempt: int,
        *,
        retry_after: float | None = None,
        draw: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait after failed attempt `attempt`: full jitter, Retry-After a floor."""
        jittered = draw() * self.bound(attempt)
        if retry_after is not None:
            return max(jittered, min(retry_after, self.maximum))
        return jittered


API_WRITES = RetryPolicy()
"""Writes guarded by resourceVersion: a conflict passes as soon as we read again."""
RECONCILES = RetryPolicy(initial=0.5, maximum=60.0, attempts=12)
"""A whole reconcile that failed: the next one is scheduled after this delay."""


def retry_call(
    call: Callable[[], _T],
    policy: RetryPolicy = API_WRITES,
    *,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = random.random,
    on_conflict: Callable[[], None] | None = None,
) -> _T:
    """`call()` until it succeeds, a permanent error, or the attempts run out.

    `on_conflict` runs after a 409 before the next try (re-read what the write was
    based on). The last error is raised when the attempts run out.
    """
    attempt = 1
    while True:
        try:
            return call()
        except RetriableKubeError as error:
            if attempt >= policy.attempts:
                raise
            if isinstance(error, ConflictError) and on_conflict is not None:
                on_conflict()
            sleep(policy.delay(attempt, retry_after=error.retry_after, draw=draw))
            attempt += 1


def reconcile_delay(error: KubeError | None, failures: int, draw: Callable[[], float]) -> float:
    """How soon to reconcile again after `failures` consecutive failed reconciles."""
    retry_after = error.retry_after if error is not None else None
    return RECONCILES.delay(failures, retry_after=retry_after, draw=draw)
