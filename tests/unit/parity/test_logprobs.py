"""KL over top-k with a tail bucket, same top token and delta-p on known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infergate.parity.logprobs import compare_logprobs, kl_top_k
from infergate.parity.record import ParityInputError, TopLogprobs

from .builders import fork_pair, prompt, replace, teacher_forced_on

A, B, C, D = 10, 11, 12, 13


def _top(*rows: dict[int, float]) -> TopLogprobs:
    return TopLogprobs.from_pairs([[(t, math.log(p)) for t, p in row.items()] for row in rows])


def test_kl_of_known_distributions_with_a_tail() -> None:
    p = _top({A: 0.5, B: 0.3})
    q = _top({A: 0.4, B: 0.4})
    expected = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)  # tails equal (0.2)
    assert kl_top_k(p, q)[0] == pytest.approx(expected)


def test_kl_over_the_whole_vocabulary_is_the_exact_kl() -> None:
    p = _top({A: 0.7, B: 0.2, C: 0.1})
    q = _top({B: 0.3, A: 0.6, C: 0.1})
    expected = 0.7 * math.log(0.7 / 0.6) + 0.2 * math.log(0.2 / 0.3)
    assert kl_top_k(p, q)[0] == pytest.approx(expected)


def test_token_missing_from_candidate_top_k_folds_into_the_tail() -> None:
    p = _top({A: 0.5, B: 0.3, C: 0.1})
    q = _top({A: 0.5, B: 0.3, D: 0.15})
    # C is unknown to q: both tails hold 0.2 and A, B agree, so the coarsened KL is zero.
    assert kl_top_k(p, q)[0] == pytest.approx(0.0, abs=1e-12)


def test_teacher_forced_target_supplies_a_missing_logprob() -> None:
    p = _top({A: 0.5, B: 0.3, C: 0.1})
    q = _top({A: 0.5, B: 0.3, D: 0.15})
    kl = kl_top_k(p, q, np.asarray([C]), np.asarray([math.log(0.05)]))
    expected = 0.1 * math.log(0.1 / 0.05) + 0.1 * math.log(0.1 / 0.15)
    assert kl[0] == pytest.approx(expected)


def test_kl_of_a_step_without_candidates_is_not_measured() -> None:
    kl = kl_top_k(TopLogprobs.empty(2), _top({A: 1.0}, {A: 1.0}))
    assert np.isnan(kl).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.01, 10), min_size=20, max_size=20),
    st.lists(st.floats(0.01, 10), min_size=20, max_size=20),
    st.integers(1, 8),
)
def test_top_k_kl_never_exceeds_the_full_kl(p_w: list[float], q_w: list[float], k: int) -> None:
    p = np.asarray(p_w) / sum(p_w)
    q = np.asarray(q_w) / sum(q_w)
    full = float((p * np.log(p / q)).sum())
    p_top = np.argsort(-p)[:k]
    q_top = np.argsort(-q)[:k]
    coarse = kl_top_k(
        TopLogprobs(p_top[None, :], np.log(p[p_top])[None, :]),
        TopLogprobs(q_top[None, :], np.log(q[q_top])[None, :]),
    )[0]
    assert -1e-12 <= coarse <= full + 1e-9


def test_without_teacher_forcing_only_the_shared_prefix_counts() -> None:
    base, cand = fork_pair(prompt("p", output_tokens=20), at=3)
    steps = compare_logprobs(base, cand, first_divergence=3)
    assert steps.kl.shape == (4,)  # steps 0..3: same context up to and including the fork
    assert not steps.teacher_forced
    # Positions continue the prompt: 12 prompt tokens, then steps 0..3.
    assert steps.positions.tolist() == [12, 13, 14, 15]


def test_teacher_forcing_covers_every_baseline_step_and_gives_delta_p() -> None:
    base = prompt("p", output_tokens=20)
    cand = replace(base, teacher_forced=teacher_forced_on(base, shift=math.log(0.9)))
    steps = compare_logprobs(base, cand, first_divergence=None)
    assert steps.teacher_forced
    assert steps.kl.shape == (20,)
    p_ref = 0.9
    np.testing.assert_allclose(steps.delta_p, 0.9 * p_ref - p_ref)
    assert steps.same_top.all()
    assert (steps.kl > 0).all()


def test_same_top_rate_counts_steps_where_the_best_token_changes() -> None:
    base = prompt("p", output_tokens=4)
    forced = teacher_forced_on(base, shift=-5.0)  # top-1 drops below the runner-up
    cand = replace(base, teacher_forced=forced)
    steps = compare_logprobs(base, cand, first_divergence=None)
    assert steps.same_top.sum() == 0
    assert steps.same_top_measured.all()


def test_teacher_forcing_on_other_tokens_cannot_be_compared() -> None:
    base = prompt("p", output_tokens=6)
    other = prompt("p", output_tokens=6, seed=9)
    cand = replace(base, teacher_forced=teacher_forced_on(other))
    with pytest.raises(ParityInputError, match="not the baseline's output tokens"):
        compare_logprobs(base, cand, first_divergence=None)
