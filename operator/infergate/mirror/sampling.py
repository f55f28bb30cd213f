"""Which finished exchanges are copied for scoring (pure: time and chance come in).

A copy is admitted only when a session runs, the sampled share draws it, the token
bucket has a token and the queue has room. Each refusal is counted by reason, so the
evidence a verdict stood on (and what was left out) is visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Refusal(StrEnum):
    """Why an exchange was not copied."""

    NOT_SAMPLED = "notSampled"
    RATE_LIMITED = "rateLimited"
    QUEUE_FULL = "queueFull"
    UNUSABLE = "unusable"
    POOL_FULL = "poolFull"
    """The session's scored pairs reached its byte budget: nothing more is kept."""


@dataclass
class TokenBucket:
    """`rate` tokens per second, at most `burst` banked; starts full."""

    rate: float
    burst: float
    tokens: float = -1.0
    last: float | None = None

    def take(self, now: float) -> bool:
        """Take one token at time `now` (seconds, monotonic), if there is one."""
        if self.tokens < 0.0:
            self.tokens = self.burst
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class Sampler:
    """Admits copies: sampled share, then rate, then queue room."""

    sample_rate: float
    bucket: TokenBucket
    queue_max: int
    refused: dict[Refusal, int] = field(default_factory=dict)
    admitted: int = 0

    @classmethod
    def of(cls, sample_rate: float, per_second: float, queue_max: int) -> Sampler:
        # A burst of one second's worth (at least one): short bursts of traffic still
        # yield copies, sustained ones never more than `per_second`.
        return cls(sample_rate, TokenBucket(per_second, max(1.0, per_second)), queue_max)

    def admit(self, *, now: float, draw: float, queued: int) -> Refusal | None:
        """None when the copy is admitted; else why not (and it is counted)."""
        refusal: Refusal | None = None
        if draw >= self.sample_rate:
            refusal = Refusal.NOT_SAMPLED
        elif queued >= self.queue_max:
            refusal = Refusal.QUEUE_FULL
        elif not self.bucket.take(now):
            refusal = Refusal.RATE_LIMITED
        if refusal is None:
            self.admitted += 1
        else:
            self.refuse(refusal)
        return refusal

    def refuse(self, refusal: Refusal) -> None:
        self.refused[refusal] = self.refused.get(refusal, 0) + 1
