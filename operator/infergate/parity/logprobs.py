"""Step-level logprob comparison: KL over top-k with a tail bucket, same top token, delta-p.

At each step both distributions must come from the same context. With teacher forcing
(the candidate scored on the baseline's tokens) that holds at every baseline step;
without it, only up to and including the first divergence, so only those steps count.

KL over top-k plus a tail bucket: the support is the baseline's top-k tokens whose
candidate logprob is known (in the candidate's top-k, or the teacher-forced target),
plus one bucket holding the rest of each side's mass. That is the KL between the two
distributions coarsened onto the same partition, so it never exceeds the full KL (data
processing inequality) and is exactly zero when the two sides agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.parity.metrics import POSITION_BUCKETS, LogprobMetrics, Mean, Rate, bucket_of
from infergate.parity.record import PAD_TOKEN_ID, ParityInputError, PromptRecord, TopLogprobs
from infergate.parity.stats import clustered_mean

TAIL_FLOOR = 1e-12
"""Smallest tail mass assumed for the candidate, so KL stays finite when its top-k covers all."""


@dataclass(frozen=True)
class StepLogprobs:
    """Per-step measures of one prompt; NaN where a step could not be measured."""

    kl: NDArray[np.float64]
    same_top: NDArray[np.bool_]
    same_top_measured: NDArray[np.bool_]
    delta_p: NDArray[np.float64]
    positions: NDArray[np.int64]
    """Sequence position of each step: prompt length + step index."""
    teacher_forced: bool


def compare_logprobs(
    baseline: PromptRecord, candidate: PromptRecord, first_divergence: int | None
) -> StepLogprobs:
    """Compare the two sides' next-token distributions of one prompt, step by step."""
    reference = baseline.output_token_ids
    forced = candidate.teacher_forced
    if forced is not None:
        if forced.token_ids.shape != reference.shape or not np.array_equal(
            forced.token_ids, reference
        ):
            raise ParityInputError(
                f"prompt {baseline.prompt_id!r}: the candidate's teacher-forced tokens "
                f"({forced.token_ids.shape[0]}) are not the baseline's output tokens "
                f"({reference.shape[0]}); it was scored on something else"
            )
        steps = reference.shape[0]
        q_top, target_lp = forced.top, forced.target_logprobs
    else:
        shortest = min(reference.shape[0], candidate.output_token_ids.shape[0])
        steps = shortest if first_divergence is None else min(first_divergence + 1, shortest)
        q_top, target_lp = _head(candidate.top_logprobs, steps), None
    p_top = _head(baseline.top_logprobs, steps)
    ref = reference[:steps]
    q_ref = target_lp[:steps] if target_lp is not None else _lookup(q_top, ref)
    kl = kl_top_k(p_top, q_top, ref if target_lp is not None else None, target_lp)
    measured = np.full(steps, p_top.k > 0 and q_top.k > 0)
    same = measured & (_top1(p_top) == _top1(q_top))
    with np.errstate(invalid="ignore"):
        delta_p = np.exp(q_ref) - np.exp(_lookup(p_top, ref))
    positions = baseline.prompt_token_ids.shape[0] + np.arange(steps, dtype=np.int64)
    return StepLogprobs(kl, same, measured, delta_p, positions, forced is not None)


def kl_top_k(
    p: TopLogprobs,
    q: TopLogprobs,
    target_ids: NDArray[np.int64] | None = None,
    target_logprobs: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """KL(p || q) per step over p's top-k tokens known in q, plus a tail bucket.

    `target_ids`/`target_logprobs` give q's logprob of one more token per step (the
    teacher-forced target) when it is missing from q's top-k. Steps where p has no
    candidates are NaN.
    """
    p_valid = (p.token_ids != PAD_TOKEN_ID) & np.isfinite(p.logprobs)
    match = (p.token_ids[:, :, None] == q.token_ids[:, None, :]) & (
        q.token_ids[:, None, :] != PAD_TOKEN_ID
    )
    q_lp = np.where(match, q.logprobs[:, None, :], -np.inf).max(axis=2, initial=-np.inf)
    if target_ids is not None and target_logprobs is not None:
        is_target = (p.token_ids == target_ids[:, None]) & ~np.isfinite(q_lp)
        q_lp = np.where(is_target, target_logprobs[:, None], q_lp)
    shared = p_valid & np.isfinite(q_lp)
    p_lp = np.where(shared, p.logprobs, 0.0)
    q_lp = np.where(shared, q_lp, 0.0)
    p_mass = np.where(shared, np.exp(p_lp), 0.0)
    q_mass = np.where(shared, np.exp(q_lp), 0.0)
    head = (p_mass * (p_lp - q_lp)).sum(axis=1)
    p_tail = np.clip(1.0 - p_mass.sum(axis=1), 0.0, 1.0)
    q_tail = np.clip(1.0 - q_mass.sum(axis=1), TAIL_FLOOR, 1.0)
    safe_p_tail = np.where(p_tail > 0.0, p_tail, 1.0)
    tail = np.where(p_tail > 0.0, p_tail * (np.log(safe_p_tail) - np.log(q_tail)), 0.0)
    kl = np.maximum(head + tail, 0.0)
    return np.where(p_valid.any(axis=1), kl, np.nan)


@dataclass
class LogprobAccumulator:
    """Folds per-prompt step measures into suite totals, per position bucket too."""

    kl_sums: list[float] = field(default_factory=list)
    kl_counts: list[int] = field(default_factory=list)
    kl_values: list[NDArray[np.float64]] = field(default_factory=list)
    delta_p: list[NDArray[np.float64]] = field(default_factory=list)
    same: int = 0
    same_total: int = 0
    forced_prompts: int = 0
    bucket_kl: NDArray[np.float64] = field(default_factory=lambda: np.zeros(len(POSITION_BUCKETS)))
    bucket_steps: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(len(POSITION_BUCKETS), np.int64)
    )
    bucket_same: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(len(POSITION_BUCKETS), np.int64)
    )
    bucket_same_total: NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(len(POSITION_BUCKETS), np.int64)
    )

    def add(self, steps: StepLogprobs) -> tuple[int, float | None, float | None]:
        """Fold one prompt in; returns its (KL steps, mean KL, same-top rate)."""
        kl_ok = ~np.isnan(steps.kl)
        kl = steps.kl[kl_ok]
        self.kl_sums.append(float(kl.sum()))
        self.kl_counts.append(int(kl.shape[0]))
        self.kl_values.append(kl)
        self.delta_p.append(steps.delta_p[~np.isnan(steps.delta_p)])
        same = int(steps.same_top.sum())
        measured = int(steps.same_top_measured.sum())
        self.same += same
        self.same_total += measured
        self.forced_prompts += int(steps.teacher_forced)
        buckets = bucket_of(steps.positions)
        n = len(POSITION_BUCKETS)
        self.bucket_kl += np.bincount(buckets[kl_ok], weights=kl, minlength=n)
        self.bucket_steps += np.bincount(buckets[kl_ok], minlength=n)
        self.bucket_same += np.bincount(buckets[steps.same_top], minlength=n)
        self.bucket_same_total += np.bincount(buckets[steps.same_top_measured], minlength=n)
        return (
            int(kl.shape[0]),
            float(kl.mean()) if kl.size else None,
            same / measured if measured else None,
        )

    def finalize(self) -> LogprobMetrics | None:
        """Suite metrics; None when no step of any prompt could be measured."""
        if sum(self.kl_counts) == 0 and self.same_total == 0:
            return None
        kl = np.concatenate(self.kl_values) if self.kl_values else np.zeros(0)
        dp = np.concatenate(self.delta_p) if self.delta_p else np.zeros(0)
        mean, stderr = clustered_mean(self.kl_sums, self.kl_counts)
        return LogprobMetrics(
            steps=int(kl.shape[0]),
            teacher_forced_prompts=self.forced_prompts,
            mean_kl=Mean(
                value=mean, stderr=stderr if math.isfinite(stderr) else None, count=kl.shape[0]
            ),
            kl_p99=float(np.quantile(kl, 0.99, method="higher")) if kl.size else None,
            kl_max=float(kl.max()) if kl.size else None,
            same_top_rate=Rate.of(self.same, self.same_total),
            delta_p_mean=float(dp.mean()) if dp.size else None,
            delta_p_rms=float(np.sqrt((dp * dp).mean())) if dp.size else None,
            delta_p_max_abs=float(np.abs(dp).max()) if dp.size else None,
        )

    def bucket(self, index: int) -> dict[str, Any]:
        """KL and same-top fields of one POSITION_BUCKETS entry, as BucketMetrics updates."""
        steps = int(self.bucket_steps[index])
        same_total = int(self.bucket_same_total[index])
        return {
            "kl_steps": steps,
            "mean_kl": float(self.bucket_kl[index]) / steps if steps else None,
            "same_top_rate": int(self.bucket_same[index]) / same_total if same_total else None,
        }


def _head(top: TopLogprobs, steps: int) -> TopLogprobs:
    if top.steps < steps:
        raise ParityInputError(f"top-k logprobs cover {top.steps} steps; {steps} are needed")
    return TopLogprobs(top.token_ids[:steps], top.logprobs[:steps])


def _top1(top: TopLogprobs) -> NDArray[np.int64]:
    if top.k == 0:
        return np.full(top.steps, PAD_TOKEN_ID, np.int64)
    best = np.argmax(np.where(top.token_ids != PAD_TOKEN_ID, top.logprobs, -np.inf), axis=1)
    return np.take_along_axis(top.token_ids, best[:, None], axis=1)[:, 0]


def _lookup(top: TopLogprobs, token_ids: NDArray[np.int64]) -> NDArray[np.float64]:
    """Each step's logprob of the given token, NaN where it is not in the top-k."""
    hit = top.token_ids == token_ids[:, None]
    found = np.where(hit, top.logprobs, -np.inf).max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(found), found, np.nan)
