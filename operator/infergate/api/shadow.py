"""Shadow parity: judge a canary on mirrored live requests instead of (or besides) a suite.

`Mirror` is the proxy an InferenceDeployment runs in front of its stable Service
(`spec.rollout.mirror`); `ShadowSettings` is what a `source: shadow` ParityCheck asks of
it: which share of live requests to copy to the dark canary, at which rate, and how
many scored requests a verdict needs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from infergate.api.base import KubeModel
from infergate.api.common import ResourceRequirements

MIRROR_QUEUE_MAX = 1024
MIRROR_BODY_MAX = 8 * 1024 * 1024


class CheckSource(StrEnum):
    """Where a check's prompts come from: suite (spec.suite, answered by both sides) or shadow
    (live requests reaching the stable revision, copied by the deployment's mirror).
    """

    SUITE = "suite"
    SHADOW = "shadow"


class Mirror(KubeModel):
    """A mirroring proxy in front of the stable Service: Deployment and Service `<name>-mirror`.

    It forwards every request to the stable Service untouched and answers with stable's
    answer; only while a shadow check runs does it copy a sampled share (at a bounded rate,
    through a bounded queue, after the client's answer is complete) to the canary. A mirror
    failure never delays or fails a client's request.
    """

    replicas: int = Field(default=1, ge=1, le=16)
    """Proxy pods. A shadow check pools the scored copies of all of them into one
    comparison, so its evidence floor is met by the pods together."""
    resources: ResourceRequirements | None = None
    """CPU and memory of the proxy container."""


WINDOW_DEFAULT = 600
"""Seconds a shadow check collects when its settings leave windowSeconds out."""


class ShadowSettings(KubeModel):
    """What a shadow check copies, and how much evidence its verdict needs."""

    sample_rate: float = Field(default=0.2, gt=0.0, le=1.0)
    """Share of live requests copied to the canary (0 < rate <= 1)."""
    max_requests_per_second: float = Field(default=2.0, gt=0.0, le=1000.0)
    """At most this many copies per second and mirror pod (a token bucket); the rest are not
    copied."""
    max_queue: int = Field(default=32, ge=1, le=MIRROR_QUEUE_MAX)
    """Copies waiting to be scored per mirror pod; a copy that finds the queue full is dropped
    (counted), never waited for."""
    min_requests: int = Field(default=50, ge=1, le=100000)
    """Scored requests (one prompt each, summed over every mirror pod) needed before a
    verdict; fewer by the end of windowSeconds: Inconclusive. Each mirror pod keeps its
    scored copies in a bounded budget (128 MiB over all pods, at most 32 MiB each); once
    it is spent the pod copies nothing more (counted as dropped). The canary's decode path
    is judged only on greedy copies (temperature 0 or top_k 1): with none scored, or too
    few for the profile's floor, the check is Inconclusive."""
    window_seconds: int = Field(default=WINDOW_DEFAULT, ge=10, le=86400)
    """Seconds to collect mirrored requests before deciding with what was scored."""
    store_prompts: bool = False
    """Keep the text and token ids of the worst requests in the report. Off: metrics only, no
    prompt or answer leaves the mirror."""


class ShadowStatus(KubeModel):
    """What the mirror saw while the shadow check ran."""

    mirrored: int = Field(default=0, ge=0)
    """Live requests forwarded to stable while the check ran (no unit: a count)."""
    sampled: int = Field(default=0, ge=0)
    """Requests copied for scoring, after sampleRate and the rate limit (no unit: a count)."""
    scored: int = Field(default=0, ge=0)
    """Copies scored on both sides and compared (prompts)."""
    greedy: int = Field(default=0, ge=0)
    """Scored copies that were greedy requests, also compared token by token (prompts)."""
    dropped: int = Field(default=0, ge=0)
    """Copies dropped: queue full, rate limit, unusable request, a side failing to score, or a
    mirror pod's budget for scored copies spent (no unit: a count)."""
    pods: int = Field(default=0, ge=0)
    """Mirror pods whose copies were pooled into these counts and the verdict (no unit: a
    count)."""
    started_at: datetime | None = None
    """When the mirror started copying for this check."""
