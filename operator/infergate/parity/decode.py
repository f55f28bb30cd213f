"""Decode-path evidence: the generated tokens' own logprobs, before the first fork.

Every KL, same-top and hidden-state number compares prefill: both sides scored along
one reference sequence in one forward pass. A serving engine generates through another
path (the KV cache and its dtype, CUDA graphs, prefix-cache hits, chunked prefill), seen
otherwise only through greedy forks. Here, at each generated step before the first fork
(both sides then had the same context and chose the same token):

- cross: the candidate's decode logprob of the generated token minus the baseline's
  (each from its own generation top-k): the decode paths compared with each other;
- self (each side): its decode logprob of the token minus its own prefill logprob of the
  same token at the same position (its teacher-forced scoring): a decode path that
  drifts from the side's own prefill shows here even when the other side agrees.

Reported, not yet decided on: no limit is set until the benign spread of these numbers
is measured across engines and batch sizes (a threshold comes from a measurement).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from infergate.parity.metrics import DecodeMetrics, Estimate
from infergate.parity.prompt_bounds import clustered_bounds
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs


@dataclass(frozen=True)
class PromptDecode:
    """One prompt's decode-path differences (nats), NaN where a logprob is unknown."""

    cross: NDArray[np.float64]
    baseline_self: NDArray[np.float64]
    candidate_self: NDArray[np.float64]


def decode_evidence(
    baseline: PromptRecord, candidate: PromptRecord, first_divergence: int | None
) -> PromptDecode:
    """The differences at every generated step both sides share before the first fork."""
    steps = min(baseline.output_token_ids.shape[0], candidate.output_token_ids.shape[0])
    if first_divergence is not None:
        steps = min(steps, first_divergence)
    tokens = baseline.output_token_ids[:steps]
    prompt_len = int(baseline.prompt_token_ids.shape[0])
    b_decode = chosen_logprobs(baseline.top_logprobs, tokens)
    c_decode = chosen_logprobs(candidate.top_logprobs, tokens)
    return PromptDecode(
        cross=c_decode - b_decode,
        baseline_self=b_decode - prefill_logprobs(baseline.teacher_forced, prompt_len, tokens),
        candidate_self=c_decode - prefill_logprobs(candidate.teacher_forced, prompt_len, tokens),
    )


def chosen_logprobs(top: TopLogprobs, tokens: NDArray[np.int64]) -> NDArray[np.float64]:
    """Each step's logprob of `tokens[step]` in the generation top-k (NaN: not in it)."""
    out = np.full(tokens.shape[0], np.nan)
    if top.k == 0 or tokens.shape[0] == 0:
        return out
    ids, logprobs = top.token_ids[: tokens.shape[0]], top.logprobs[: tokens.shape[0]]
    hit = ids == tokens[:, None]
    found = hit.any(axis=1)
    out[found] = logprobs[found, hit[found].argmax(axis=1)]
    return out


def prefill_logprobs(
    scored: TeacherForced | None, prompt_len: int, tokens: NDArray[np.int64]
) -> NDArray[np.float64]:
    """The side's teacher-forced logprob of `tokens[i]` at position prompt_len + i (NaN
    where it did not score that position or scored another token there)."""
    out = np.full(tokens.shape[0], np.nan)
    if scored is None or tokens.shape[0] == 0:
        return out
    start = scored.first_position(prompt_len)
    index = prompt_len + np.arange(tokens.shape[0]) - start
    inside = (index >= 0) & (index < scored.token_ids.shape[0])
    rows = index[inside]
    same = scored.token_ids[rows] == tokens[inside]
    values = np.where(same, scored.target_logprobs[rows], np.nan)
    out[inside] = values
    return out


def decode_metrics(prompts: Sequence[PromptDecode], confidence: float) -> DecodeMetrics | None:
    """The suite's decode-path evidence; None when no step could be compared."""
    cross = [np.abs(p.cross[np.isfinite(p.cross)]) for p in prompts]
    kept = [c for c in cross if c.size]
    if not kept:
        return None
    bounds = clustered_bounds(
        [float(c.sum()) for c in kept], [int(c.size) for c in kept], confidence
    )
    return DecodeMetrics(
        prompts=len(kept),
        steps=sum(int(c.size) for c in kept),
        cross_mean_abs=Estimate(
            value=bounds.value,
            lower=bounds.lower,
            upper=bounds.upper,
            evidence=bounds.clusters,
            unit="prompts",
            method="prompt means",
        ),
        cross_max_abs=max(float(c.max()) for c in kept),
        baseline_self_max_abs=_max_abs([p.baseline_self for p in prompts]),
        candidate_self_max_abs=_max_abs([p.candidate_self for p in prompts]),
    )


def _max_abs(values: Sequence[NDArray[np.float64]]) -> float | None:
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    found = [float(v.max()) for v in finite if v.size]
    return max(found) if found else None
