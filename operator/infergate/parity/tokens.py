"""Per-prompt comparison of greedy outputs: first divergence and whether the fork is legitimate.

Legitimacy follows vLLM's `check_logprobs_close`: at the first position where the
greedy tokens differ, both sides saw the same context, so each side's token should be
in the other side's top-k; and the baseline's logprob gap between the two tokens should
be small (a near tie that rounding can flip), under tau.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from infergate.parity.record import PromptRecord, TopLogprobs

COLLAPSE_MIN_RUN = 16
"""A trailing run of one token at least this long (and half the output) is a collapse."""


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

    @property
    def identical(self) -> bool:
        return self.first_divergence is None


def compare_tokens(
    baseline: PromptRecord, candidate: PromptRecord, tau: float | None
) -> TokenComparison:
    """Compare the greedy outputs of one prompt; `tau` bounds the logprob gap at a fork."""
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
    b_has_a = _logprob_of(b_top, fork, a_tok) is not None
    gap = None if a_lp_own is None or a_lp_other is None else abs(a_lp_own - a_lp_other)
    if a_lp_other is None:
        note = f"candidate token {b_tok} not in baseline top-{a_top.k}"
    elif not b_has_a:
        note = f"baseline token {a_tok} not in candidate top-{b_top.k}"
    elif gap is None:
        note = f"baseline token {a_tok} has no logprob in its own top-{a_top.k}"
    elif tau is not None and gap > tau:
        note = f"baseline logprob gap {gap:.3g} > tau {tau:.3g}"
    else:
        note = "both tokens in each other's top-k" + ("" if gap is None else f", gap {gap:.3g}")
        return TokenComparison(fork, fork, length, True, note, gap)
    return TokenComparison(fork, fork, length, False, note, gap)


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
