"""Parity under load, and performance beside numerics.

`Load` has the runner drive the candidate at stated concurrency levels with background
requests, and compare each level's answers with the baseline's at concurrency 1, so
drift from batch composition, preemption and recompute is caught. `Performance` limits
a throughput or latency regression measured by the same drive, both sides under the
same load at the same moment, decided on confidence bounds over repeated runs.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Self

from pydantic import Field, model_validator

from infergate.api.base import KubeModel, cel, cel_rules
from infergate.api.enums import CheckPhase

LEVELS_MAX = 8
CONCURRENCY_MAX = 512
_INCREASING = f"give increasing levels between 1 and {CONCURRENCY_MAX}, each once"


class Load(KubeModel):
    """Concurrency levels the candidate is driven at, besides the suite's own run."""

    concurrency: list[Annotated[int, Field(ge=1, le=CONCURRENCY_MAX)]] = Field(
        default_factory=lambda: [1, 8, 32],
        min_length=1,
        max_length=LEVELS_MAX,
        json_schema_extra={
            "default": [1, 8, 32],
            # The Kubernetes CEL list library: sorted, and no level twice.
            **cel_rules(
                cel(
                    "self.isSorted() && self.all(c, self.indexOf(c) == self.lastIndexOf(c))",
                    _INCREASING,
                )
            ),
        },
    )
    """Requests in flight at once at each level (increasing). At each level the suite's prompts
    are mixed among the background requests, so they are batched with strangers."""
    background_requests: int = Field(default=200, ge=0, le=100000)
    """Requests of synthetic prompts sent at each level besides the suite (not compared)."""
    background_max_tokens: int = Field(default=128, ge=1, le=32768)
    """Tokens each background request generates: long outputs fill the KV cache, so requests
    are preempted and recomputed where the engine runs out of it."""

    @model_validator(mode="after")
    def _increasing(self) -> Self:
        levels = self.concurrency
        if any(c < 1 or c > CONCURRENCY_MAX for c in levels) or any(
            b <= a for a, b in pairwise(levels)
        ):
            raise ValueError(f"load.concurrency: {levels} is not allowed; {_INCREASING}")
        return self


class Performance(KubeModel):
    """Limits on how much slower the candidate may be than the baseline under the same load."""

    max_throughput_drop: float | None = Field(default=None, ge=0.0, lt=1.0)
    """Largest allowed drop of output tokens per second, as a share of the baseline's (0.1: the
    candidate may be at most 10% slower). Allowed: 0 <= x < 1 (a drop of 1 is no throughput at
    all, which no measurement exceeds, so it could never fail). Unset: not limited."""
    max_ttft_p99_increase: float | None = Field(default=None, ge=0.0, le=100.0)
    """Largest allowed rise of the 99th percentile time to first token, as a share of the
    baseline's (0.2: at most 20% higher). Unset: not limited."""
    max_itl_p99_increase: float | None = Field(default=None, ge=0.0, le=100.0)
    """Largest allowed rise of the 99th percentile inter-token latency, as a share of the
    baseline's. Unset: not limited."""
    repeats: int = Field(default=4, ge=2, le=20, multiple_of=2)
    """Paired runs of the load at the highest concurrency level, an even number (2..20): the
    side whose requests start first gets ahead of the other, so each side starts first in
    half of them. The limits are judged on the confidence bounds of the mean over them
    (Student t), never on one run."""
    requests: int = Field(default=64, ge=8, le=100000)
    """Requests per run and side (8..100000)."""
    confidence: float = Field(default=0.9, ge=0.5, lt=1.0)
    """One-sided confidence of the bounds (0.5..1, no unit)."""


class LevelStatus(KubeModel):
    """One concurrency level's answers against the baseline's at concurrency 1."""

    concurrency: int = Field(ge=1)
    """Requests in flight at once (no unit: a count)."""
    phase: CheckPhase
    """Passed, Failed, Inconclusive or Error for this level alone, under the check's limits."""
    prompts: int = Field(default=0, ge=0)
    """Suite prompts compared at this level."""
    token_match_rate: float | None = None
    """Share of suite prompts whose greedy output equals the baseline's at concurrency 1."""
    mean_kl: float | None = None
    """Mean teacher-forced KL (nats) against the baseline."""
    same_top_rate: float | None = None
    """Share of steps with the same top token as the baseline."""
    preemptions: int | None = Field(default=None, ge=0)
    """Preemptions the candidate engine counted during this level (its own /metrics), when it
    reports them (no unit: a count)."""
    summary: str | None = Field(default=None, max_length=4096)
    """One line for people."""


class SideFigures(KubeModel):
    """One side's serving figures under the load, means over the repeats."""

    output_tokens_per_second: float | None = None
    """Output tokens per second over the run."""
    ttft_p50_seconds: float | None = None
    """Median time to first token."""
    ttft_p99_seconds: float | None = None
    """99th percentile time to first token."""
    itl_p50_seconds: float | None = None
    """Median inter-token latency."""
    itl_p99_seconds: float | None = None
    """99th percentile inter-token latency."""


class RelativeChange(KubeModel):
    """A candidate/baseline change over the paired repeats, with its confidence bounds."""

    mean: float
    """Mean relative change, as a share of the baseline's figure (0.1: 10% worse)."""
    low: float
    """Lower confidence bound of the mean (a share of the baseline's figure)."""
    high: float
    """Upper confidence bound of the mean (a share of the baseline's figure)."""
    limit: float | None = None
    """Allowed change, a share of the baseline's figure (performance.*); unset when not
    limited."""


class PerformanceStatus(KubeModel):
    """Both sides' serving figures under the same load, and the judged changes."""

    phase: CheckPhase
    """Passed (every limit's bound within it), Failed (a bound past it) or Inconclusive (a
    bound straddles a limit)."""
    concurrency: int = Field(ge=1)
    """Concurrency level the repeats ran at (no unit: requests in flight)."""
    repeats: int = Field(ge=0)
    """Paired runs measured (no unit: a count)."""
    baseline: SideFigures
    """The baseline's figures."""
    candidate: SideFigures
    """The candidate's figures."""
    throughput_drop: RelativeChange | None = None
    """1 - candidate/baseline output tokens per second, per repeat."""
    ttft_p99_increase: RelativeChange | None = None
    """candidate/baseline - 1 of the TTFT P99, per repeat."""
    itl_p99_increase: RelativeChange | None = None
    """candidate/baseline - 1 of the ITL P99, per repeat."""
