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
        (True, 0.01, False, "gap 0.0445 > tau 0.01"),
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
