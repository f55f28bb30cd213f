"""First divergence, fork legitimacy and collapse on constructed outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infergate.parity.record import TopLogprobs
from infergate.parity.tokens import compare_tokens, is_collapsed

from .builders import fork_pair, prompt, replace


def test_identical_outputs_agree_throughout() -> None:
    p = prompt("p", output_tokens=10)
    result = compare_tokens(p, p, tau=0.1)
    assert result.identical
    assert result.agreed == 10
    assert result.legitimate is None


@pytest.mark.parametrize(
    ("legitimate", "tau", "expected", "note"),
    [
        (True, 0.1, True, "both tokens in each other's top-k"),
        (True, None, True, "both tokens in each other's top-k"),
        (True, 0.01, False, "baseline margin 0.0445 > tau 0.01"),
        (False, 0.1, False, "not in baseline top-5"),
    ],
)
def test_fork_legitimacy(legitimate: bool, tau: float | None, expected: bool, note: str) -> None:
    base, cand = fork_pair(prompt("p", output_tokens=12), at=4, legitimate=legitimate)
    result = compare_tokens(base, cand, tau=tau)
    assert result.first_divergence == 4
    assert result.agreed == 4
    assert result.legitimate is expected
    assert note in result.legitimacy_note


def test_fork_gap_is_the_baseline_logprob_gap() -> None:
    base, cand = fork_pair(prompt("p", output_tokens=12), at=4)
    assert compare_tokens(base, cand, tau=0.1).logprob_gap == pytest.approx(math.log(0.46 / 0.44))


def test_one_side_stopping_early_is_a_divergence_that_is_not_legitimate() -> None:
    p = prompt("p", output_tokens=10)
    short = replace(
        p,
        output_token_ids=p.output_token_ids[:7],
        top_logprobs=TopLogprobs(p.top_logprobs.token_ids[:7], p.top_logprobs.logprobs[:7]),
    )
    result = compare_tokens(p, short, tau=0.1)
    assert result.first_divergence == 7
    assert result.length == 10
    assert result.legitimate is False
    assert "candidate stopped at 7" in result.legitimacy_note


def test_fork_without_recorded_logprobs_cannot_be_judged() -> None:
    base, cand = fork_pair(prompt("p", output_tokens=12), at=4)
    bare = replace(cand, top_logprobs=TopLogprobs.empty(12))
    result = compare_tokens(base, bare, tau=0.1)
    assert result.first_divergence == 4
    assert result.legitimate is None


@pytest.mark.parametrize(
    ("tokens", "collapsed"),
    [
        ([5, 6, 7] + [0] * 20, True),
        ([0] * 16, True),
        ([5, 6, 7] + [0] * 15, False),  # run of 15 is under the minimum
        (list(range(20)) + [0] * 16, False),  # run of 16 is under half of 36 tokens
        (list(range(40)), False),
        ([], False),
    ],
)
def test_collapse_to_one_repeated_token(tokens: list[int], collapsed: bool) -> None:
    assert is_collapsed(np.asarray(tokens, dtype=np.int64)) is collapsed


def test_fork_tau_scales_with_the_dtype_rounding_step_at_the_logit() -> None:
    from infergate.parity.tokens import fork_tau

    # Two logits of magnitude 30 in bfloat16 can each be off by 2^-8 * 30.
    assert fork_tau("bfloat16", 0.1, 30.0) == pytest.approx(2 * 30 / 256)
    assert fork_tau("float16", 0.1, 30.0) == 0.1  # 2 * 30 / 2048 = 0.029 < floor
    assert fork_tau("float32", None, 30.0) == pytest.approx(2 * 30 * 2.0**-24)
    assert fork_tau("bfloat16", 0.1, None) == 0.1  # magnitude unknown: the floor alone
    assert fork_tau("unknown", 0.1, 30.0) == 0.1  # never more lenient by guess


def test_both_sides_margins_must_be_within_tau() -> None:
    base, cand = fork_pair(prompt("p", output_tokens=12), at=4)
    # The candidate prefers its token by far more than a near tie: not a rounding flip.
    lps = cand.top_logprobs.logprobs.copy()
    lps[4, 0] = math.log(0.9)
    lps[4, 1] = math.log(0.01)
    wide = replace(cand, top_logprobs=TopLogprobs(cand.top_logprobs.token_ids, lps))
    result = compare_tokens(base, wide, tau=0.1)
    assert result.legitimate is False
    assert "candidate margin" in result.legitimacy_note


def test_a_reported_logit_magnitude_widens_tau_in_bfloat16() -> None:
    base, cand = fork_pair(prompt("p", output_tokens=12), at=4)
    # Margins of 0.0445: past a floor of 0.01 unless the logits are large enough.
    assert compare_tokens(base, cand, tau=0.01, dtypes=("bfloat16", "bfloat16")).legitimate is False
    scale = np.full(12, 40.0)  # 2 * 40 / 256 = 0.31 > 0.0445
    wide_b, wide_c = replace(base, logit_scale=scale), replace(cand, logit_scale=scale)
    result = compare_tokens(wide_b, wide_c, tau=0.01, dtypes=("bfloat16", "bfloat16"))
    assert result.legitimate is True
    result = compare_tokens(wide_b, wide_c, tau=0.01, dtypes=("float32", "float32"))
    assert result.legitimate is False
