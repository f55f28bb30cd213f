"""Position-level logprob comparison: KL, same top token, target logprob change, delta-p.

At each position both distributions must come from the same context. Three sources, best
first:

1. both sides scored along the reference sequence (the baseline's prompt plus output):
   every position both scored counts, prompt positions included, and both sides' numbers
   come from the same prefill path;
2. the candidate scored along the reference, the baseline's side from its generation
   top-k (records made before baselines scored themselves): generated positions only;
3. no scoring: generated positions up to and including the first divergence.

KL over top-k plus a tail bucket: the support is the baseline's top-k tokens whose
candidate logprob is known (in the candidate's top-k, or the scored target), plus one
bucket holding the rest of each side's mass. That is the KL between the two
distributions coarsened onto the same partition, so it never exceeds the full KL (data
processing inequality) and is exactly zero when the two sides agree. How much of the
baseline's mass its top-k holds is reported as the covered mass. Where both sides gave
their full next-token distributions, the KL is over the full vocabulary (exact).

Signed measures, which KL (a divergence, always >= 0) cannot give:

- target logprob delta: candidate minus baseline logprob of the reference token; its
  mean is minus the log perplexity ratio, so a constant shift d of the candidate's
  logprobs moves it by exactly d;
- delta-p: candidate minus baseline probability of the reference token.

This module measures one prompt; `logprob_suite` folds the prompts into the suite's
metrics and bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from infergate.parity.record import (
    PAD_TOKEN_ID,
    ParityInputError,
    PromptRecord,
    TeacherForced,
    TopLogprobs,
)

TAIL_FLOOR = 1e-12
"""Smallest tail mass assumed for the candidate, so KL stays finite when its top-k covers all."""


@dataclass(frozen=True)
class StepLogprobs:
    """Per-position measures of one prompt; NaN where a position could not be measured."""

    kl: NDArray[np.float64]
    same_top: NDArray[np.bool_]
    same_top_measured: NDArray[np.bool_]
    delta_p: NDArray[np.float64]
    positions: NDArray[np.int64]
    """Sequence position of each step (the prompt's first token is position 0)."""
    teacher_forced: bool
    target_delta: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Candidate minus baseline logprob of the reference token; NaN where unknown."""
    covered_mass: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Baseline probability inside its reported top-k (1 where full-vocabulary)."""
    full_vocab: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))
    generated: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))
    """Whether each position lies past the prompt (a generated token)."""


def compare_logprobs(
    baseline: PromptRecord, candidate: PromptRecord, first_divergence: int | None
) -> StepLogprobs:
    """Compare the two sides' next-token distributions of one prompt, position by position."""
    prompt_len = int(baseline.prompt_token_ids.shape[0])
    reference = np.concatenate([baseline.prompt_token_ids, baseline.output_token_ids])
    forced = candidate.teacher_forced
    if forced is not None:
        c_start = _check_reference(baseline.prompt_id, forced, prompt_len, reference, "candidate")
        own = baseline.teacher_forced
        if own is not None:
            b_start = _check_reference(baseline.prompt_id, own, prompt_len, reference, "baseline")
            return _both_scored(own, b_start, forced, c_start, prompt_len)
        return _candidate_scored(baseline, forced, c_start, prompt_len)
    return _unscored(baseline, candidate, first_divergence, prompt_len)


def _check_reference(
    pid: str, scored: TeacherForced, prompt_len: int, reference: NDArray[np.int64], side: str
) -> int:
    start = scored.first_position(prompt_len)
    n = int(scored.token_ids.shape[0])
    expected = reference[start : start + n]
    if expected.shape[0] != n or not np.array_equal(scored.token_ids, expected):
        raise ParityInputError(
            f"prompt {pid!r}: the {side}'s teacher-forced tokens ({n} from position {start}) "
            f"are not the baseline's sequence ({reference.shape[0]} tokens); it was scored "
            "on something else"
        )
    return start


def _rows(top: TopLogprobs, lo: int, hi: int) -> TopLogprobs:
    return TopLogprobs(top.token_ids[lo:hi], top.logprobs[lo:hi])


def _both_scored(
    own: TeacherForced, b_start: int, forced: TeacherForced, c_start: int, prompt_len: int
) -> StepLogprobs:
    lo = max(b_start, c_start)
    hi = min(b_start + own.token_ids.shape[0], c_start + forced.token_ids.shape[0])
    hi = max(hi, lo)
    b_lo, c_lo = lo - b_start, lo - c_start
    p_top = _rows(own.top, b_lo, b_lo + hi - lo)
    q_top = _rows(forced.top, c_lo, c_lo + hi - lo)
    targets = own.token_ids[b_lo : b_lo + hi - lo]
    p_target = own.target_logprobs[b_lo : b_lo + hi - lo]
    q_target = forced.target_logprobs[c_lo : c_lo + hi - lo]
    kl = kl_top_k(p_top, q_top, targets, q_target)
    covered = _covered_mass(p_top)
    full = np.zeros(hi - lo, np.bool_)
    p_full = _full_rows(own, b_start, lo, hi)
    q_full = _full_rows(forced, c_start, lo, hi)
    if p_full is not None and q_full is not None:
        first = hi - lo - min(p_full.shape[0], q_full.shape[0])
        rows = hi - lo - first
        kl[first:] = kl_full(p_full[-rows:], q_full[-rows:])
        covered[first:] = 1.0
        full[first:] = True
    rows = _Scored(kl, p_top, q_top, p_target, q_target, lo, covered, full)
    return _measures(rows, prompt_len, teacher_forced=True)


def _full_rows(scored: TeacherForced, start: int, lo: int, hi: int) -> NDArray[np.float32] | None:
    """The full-vocabulary rows of positions [lo, hi) that `scored` holds (its last rows)."""
    full = scored.full_logprobs
    if full is None or full.shape[0] == 0:
        return None
    first = start + scored.token_ids.shape[0] - full.shape[0]
    begin = max(first, lo)
    if begin >= hi:
        return None
    return full[begin - first : hi - first]


def _candidate_scored(
    baseline: PromptRecord, forced: TeacherForced, c_start: int, prompt_len: int
) -> StepLogprobs:
    steps = int(baseline.output_token_ids.shape[0])
    c_lo = prompt_len - c_start
    if c_lo < 0 or c_lo + steps > forced.token_ids.shape[0]:
        raise ParityInputError(
            f"prompt {baseline.prompt_id!r}: the candidate's scores do not cover the "
            f"baseline's {steps} output tokens"
        )
    p_top = _head(baseline.top_logprobs, steps)
    q_top = _rows(forced.top, c_lo, c_lo + steps)
    ref = baseline.output_token_ids
    q_target = forced.target_logprobs[c_lo : c_lo + steps]
    kl = kl_top_k(p_top, q_top, ref, q_target)
    rows = _Scored(
        kl, p_top, q_top, _lookup(p_top, ref), q_target, prompt_len, _covered_mass(p_top),
        np.zeros(steps, np.bool_),
    )  # fmt: skip
    return _measures(rows, prompt_len, teacher_forced=True)


def _unscored(
    baseline: PromptRecord, candidate: PromptRecord, first_divergence: int | None, prompt_len: int
) -> StepLogprobs:
    reference = baseline.output_token_ids
    shortest = min(reference.shape[0], candidate.output_token_ids.shape[0])
    steps = shortest if first_divergence is None else min(first_divergence + 1, shortest)
    q_top, p_top = _head(candidate.top_logprobs, steps), _head(baseline.top_logprobs, steps)
    ref = reference[:steps]
    kl = kl_top_k(p_top, q_top)
    rows = _Scored(
        kl, p_top, q_top, _lookup(p_top, ref), _lookup(q_top, ref), prompt_len,
        _covered_mass(p_top), np.zeros(steps, np.bool_),
    )  # fmt: skip
    return _measures(rows, prompt_len, teacher_forced=False)


@dataclass(frozen=True)
class _Scored:
    """One prompt's rows to compare: both sides' top-k and targets from sequence `first`."""

    kl: NDArray[np.float64]
    p_top: TopLogprobs
    q_top: TopLogprobs
    p_target: NDArray[np.float64]
    q_target: NDArray[np.float64]
    first: int
    covered: NDArray[np.float64]
    full: NDArray[np.bool_]


def _measures(rows: _Scored, prompt_len: int, *, teacher_forced: bool) -> StepLogprobs:
    kl, p_top, q_top = rows.kl, rows.p_top, rows.q_top
    steps = kl.shape[0]
    measured = np.full(steps, p_top.k > 0 and q_top.k > 0)
    same = measured & (_top1(p_top) == _top1(q_top))
    with np.errstate(invalid="ignore", over="ignore"):
        p_target = np.asarray(rows.p_target, np.float64)
        q_target = np.asarray(rows.q_target, np.float64)
        target_delta = q_target - p_target
        delta_p = np.exp(q_target) - np.exp(p_target)
    positions = rows.first + np.arange(steps, dtype=np.int64)
    return StepLogprobs(
        kl=kl,
        same_top=same,
        same_top_measured=measured,
        delta_p=np.where(np.isfinite(delta_p), delta_p, np.nan),
        positions=positions,
        teacher_forced=teacher_forced,
        target_delta=np.where(np.isfinite(target_delta), target_delta, np.nan),
        covered_mass=rows.covered,
        full_vocab=rows.full,
        generated=positions >= prompt_len,
    )


def kl_top_k(
    p: TopLogprobs,
    q: TopLogprobs,
    target_ids: NDArray[np.int64] | None = None,
    target_logprobs: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """KL(p || q) per step over p's top-k tokens known in q, plus a tail bucket.

    `target_ids`/`target_logprobs` give q's logprob of one more token per step (the
    teacher-forced target) when it is missing from q's top-k. Steps where p has no
    candidates (or holds a non-finite logprob) are NaN.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        p_valid = (p.token_ids != PAD_TOKEN_ID) & np.isfinite(p.logprobs)
        p_broken = (p.token_ids != PAD_TOKEN_ID) & np.isnan(p.logprobs)
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
    return np.where(p_valid.any(axis=1) & ~p_broken.any(axis=1), kl, np.nan)


def kl_full(p: NDArray[np.float32], q: NDArray[np.float32]) -> NDArray[np.float64]:
    """KL(p || q) per row of two [steps, vocab] logprob arrays; NaN for non-finite rows."""
    a = p.astype(np.float64)
    b = q.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        mass = np.exp(a)
        terms = np.where(mass > 0.0, mass * (a - b), 0.0)
        kl = np.maximum(terms.sum(axis=1), 0.0)
    broken = np.isnan(a).any(axis=1) | np.isnan(b).any(axis=1)
    return np.where(broken, np.nan, kl)


def _covered_mass(top: TopLogprobs) -> NDArray[np.float64]:
    valid = (top.token_ids != PAD_TOKEN_ID) & np.isfinite(top.logprobs)
    with np.errstate(over="ignore"):
        mass = np.where(valid, np.exp(np.where(valid, top.logprobs, 0.0)), 0.0).sum(axis=1)
    return np.asarray(np.minimum(mass, 1.0), np.float64)


def _head(top: TopLogprobs, steps: int) -> TopLogprobs:
    if top.steps < steps:
        raise ParityInputError(f"top-k logprobs cover {top.steps} steps; {steps} are needed")
    return TopLogprobs(top.token_ids[:steps], top.logprobs[:steps])


def _top1(top: TopLogprobs) -> NDArray[np.int64]:
    if top.k == 0:
        return np.full(top.steps, PAD_TOKEN_ID, np.int64)
    with np.errstate(invalid="ignore"):
        scores = np.where(top.token_ids != PAD_TOKEN_ID, top.logprobs, -np.inf)
        scores = np.where(np.isnan(scores), -np.inf, scores)
    best = np.argmax(scores, axis=1)
    return np.take_along_axis(top.token_ids, best[:, None], axis=1)[:, 0]


def _lookup(top: TopLogprobs, token_ids: NDArray[np.int64]) -> NDArray[np.float64]:
    """Each step's logprob of the given token, NaN where it is not in the top-k."""
    hit = top.token_ids == token_ids[:, None]
    found = np.where(hit, top.logprobs, -np.inf).max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(found), found, np.nan)
