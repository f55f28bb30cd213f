"""Per-prompt comparison of greedy outputs: first divergence and whether the fork is legitimate.

Legitimacy follows vLLM's `check_logprobs_close`: at the first position where the
greedy tokens differ, both sides saw the same context, so each side's token should be
in the other side's top-k; and on each side the margin between its own token and the
other side's token should be small (a near tie that rounding can flip), under that
side's tau.

Tau is the larger of the profile's floor (`maxDivergenceLogprobGap`) and the rounding
step of the side's dtype at the logit's magnitude: two logits of magnitude |z| each carry
a rounding error of up to u|z|, so their gap moves by up to 2u|z|, where u is the unit
roundoff 2^-p of a format with p significand bits (IEEE 754; Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., section 2.1; torch.finfo's eps is 2u):
bfloat16 2^-8, float16 2^-11, float32 2^-24. The magnitude is the chosen token's raw
logit where the engine reports it (our adapters do); elsewhere the floor alone applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from infergate.parity.record import PromptRecord, TopLogprobs

COLLAPSE_MIN_RUN = 16
"""A trailing run of one token at least this long (and half the output) is a collapse."""

ROUNDING_UNIT: dict[str, float] = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}
"""Unit roundoff u = 2^-p per compute dtype (p = significand bits, the implicit one included)."""


def fork_tau(dtype: str, floor: float | None, logit_magnitude: float | None) -> float | None:
    """Largest margin a fork may have on a side of `dtype`: max(floor, 2 u |z|).

    None when there is neither a floor nor a scale (the margin is then not judged). An
    unknown dtype or magnitude leaves the floor alone: never a more lenient tau by guess.
    """
    unit = ROUNDING_UNIT.get(dtype.lower())
    scaled = None
    if unit is not None and logit_magnitude is not None and math.isfinite(logit_magnitude):
        scaled = 2.0 * unit * abs(logit_magnitude)
    if floor is None:
        return scaled
    return floor if scaled is None else max(floor, scaled)


@dataclass(frozen=True)
class TokenComparison:
    """How the two greedy outputs of one prompt relate."""

    first_divergence: int | None
    """Index of the first differing output token; None when the outputs are identical."""
    agreed: int
    """Tokens that agree before the first divergence (the whole output when identical)."""
    length: int
    """The longer of the two outputs, in tokens."""
    legitimate: bool | None
    """Whether the fork is legitimate; None when identical or when top-k was not recorded."""
    legitimacy_note: str
    """Why the fork is or is not legitimate, for reports."""
    logprob_gap: float | None
    """Baseline logprob of its own token minus that of the candidate's token at the fork."""
    candidate_gap: float | None = None
    """Candidate logprob of its own token minus that of the baseline's token at the fork."""

    @property
    def identical(self) -> bool:
        return self.first_divergence is None


def compare_tokens(
    baseline: PromptRecord,
    candidate: PromptRecord,
    tau: float | None,
    *,
    dtypes: tuple[str, str] = ("", ""),
) -> TokenComparison:
    """Compare the greedy outputs of one prompt.

    `tau` is the profile's floor of the margin at a fork; `dtypes` (baseline, candidate)
    scale each side's tau to its rounding step at the logit magnitude the side reported.
    """
    a, b = baseline.output_token_ids, candidate.output_token_ids
    common = min(a.shape[0], b.shape[0])
    length = max(a.shape[0], b.shape[0])
    mismatch = np.flatnonzero(a[:common] != b[:common])
    if mismatch.size == 0 and a.shape[0] == b.shape[0]:
        return TokenComparison(None, length, length, None, "identical", None)
    fork = int(mismatch[0]) if mismatch.size else common
    if fork >= common:
        stopped = "baseline" if a.shape[0] == common else "candidate"
        return TokenComparison(
            fork, fork, length, False, f"{stopped} stopped at {fork}; the other went on", None
        )
    a_tok, b_tok = int(a[fork]), int(b[fork])
    a_top, b_top = baseline.top_logprobs, candidate.top_logprobs
    if a_top.k == 0 or b_top.k == 0:
        return TokenComparison(fork, fork, length, None, "top-k logprobs not recorded", None)
    a_lp_own = _logprob_of(a_top, fork, a_tok)
    a_lp_other = _logprob_of(a_top, fork, b_tok)
    b_lp_own = _logprob_of(b_top, fork, b_tok)
    b_lp_other = _logprob_of(b_top, fork, a_tok)
    gap = None if a_lp_own is None or a_lp_other is None else abs(a_lp_own - a_lp_other)
    c_gap = None if b_lp_own is None or b_lp_other is None else abs(b_lp_own - b_lp_other)
    tau_a = fork_tau(dtypes[0], tau, _scale(baseline, fork))
    tau_b = fork_tau(dtypes[1], tau, _scale(candidate, fork))
    if a_lp_other is None:
        note = f"candidate token {b_tok} not in baseline top-{a_top.k}"
    elif b_lp_other is None:
        note = f"baseline token {a_tok} not in candidate top-{b_top.k}"
    elif gap is None or c_gap is None:
        note = "a side's own token has no logprob in its own top-k"
    elif tau_a is not None and gap > tau_a:
        note = f"baseline margin {gap:.3g} > tau {tau_a:.3g}"
    elif tau_b is not None and c_gap > tau_b:
        note = f"candidate margin {c_gap:.3g} > tau {tau_b:.3g}"
    else:
        note = f"both tokens in each other's top-k, margins {gap:.3g} / {c_gap:.3g}"
        return TokenComparison(fork, fork, length, True, note, gap, c_gap)
    return TokenComparison(fork, fork, length, False, note, gap, c_gap)


def _scale(record: PromptRecord, step: int) -> float | None:
    scale = record.logit_scale
    if scale is None or step >= scale.shape[0]:
        return None
    return float(scale[step])


def _logprob_of(top: TopLogprobs, step: int, token_id: int) -> float | None:
    hits = np.flatnonzero(top.token_ids[step] == token_id)
    if hits.size == 0:
        return None
    value = float(top.logprobs[step, hits[0]])
    return value if math.isfinite(value) else None


def is_collapsed(output_token_ids: NDArray[np.int64]) -> bool:
    """Whether an output ends in one token repeated (the fp16-overflow signature)."""
    n = int(output_token_ids.shape[0])
    if n < COLLAPSE_MIN_RUN:
        return False
    changes = np.flatnonzero(output_token_ids[1:] != output_token_ids[:-1])
    run = n - (int(changes[-1]) + 1 if changes.size else 0)
    return run >= COLLAPSE_MIN_RUN and 2 * run >= n
