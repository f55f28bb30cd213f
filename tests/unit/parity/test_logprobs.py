"""KL over top-k with a tail bucket, same top token and delta-p on known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infergate.parity.logprob_suite import LogprobAccumulator
from infergate.parity.logprobs import compare_logprobs, kl_full, kl_top_k
from infergate.parity.record import ParityInputError, TopLogprobs

from .builders import (
    candidate_of,
    fork_pair,
    prompt,
    replace,
    scored,
    scores_along,
    teacher_forced_on,
)

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
    with pytest.raises(ParityInputError, match="not the baseline's sequence"):
        compare_logprobs(base, cand, first_divergence=None)


def test_both_sides_scored_cover_prompt_positions_too() -> None:
    base = scored(prompt("p", prompt_tokens=12, output_tokens=20))
    steps = compare_logprobs(base, candidate_of(base), first_divergence=None)
    assert steps.positions[0] == 1
    assert steps.kl.shape == (31,)  # positions 1..31 of 12 + 20 tokens
    assert int(steps.generated.sum()) == 20
    assert (steps.kl == 0).all()


@pytest.mark.parametrize("shift", [-0.3, -0.01, 0.002])
def test_a_constant_logprob_shift_moves_the_log_perplexity_ratio_by_exactly_that(
    shift: float,
) -> None:
    accumulator = LogprobAccumulator()
    for seed in range(4):
        base = scored(prompt(f"p{seed}", seed=seed))
        accumulator.add(compare_logprobs(base, candidate_of(base, shift=shift), None))
    ratio = accumulator.estimates(0.95)["logPerplexityRatio"]
    assert ratio.value == pytest.approx(-shift, abs=1e-12)
    # Every prompt moved by the same amount: no spread, so the bounds are the value.
    assert ratio.lower == pytest.approx(-shift, abs=1e-12)
    assert ratio.upper == pytest.approx(-shift, abs=1e-12)


def test_full_vocabulary_rows_give_the_exact_kl_where_both_sides_have_them() -> None:
    base = scored(prompt("p", prompt_tokens=4, output_tokens=3))
    p_rows = np.log(np.asarray([[0.7, 0.2, 0.1]] * 2, np.float32))
    q_rows = np.log(np.asarray([[0.6, 0.3, 0.1]] * 2, np.float32))
    forced_b, forced_c = base.teacher_forced, scores_along(base)
    assert forced_b is not None
    b = replace(base, teacher_forced=replace_full(forced_b, p_rows))
    c = replace(base, teacher_forced=replace_full(forced_c, q_rows))
    steps = compare_logprobs(b, c, first_divergence=None)
    expected = 0.7 * math.log(0.7 / 0.6) + 0.2 * math.log(0.2 / 0.3)
    np.testing.assert_allclose(steps.kl[-2:], expected, rtol=1e-5)
    assert steps.full_vocab.tolist() == [False] * 4 + [True, True]
    assert steps.covered_mass[-1] == 1.0
    np.testing.assert_allclose(kl_full(p_rows, p_rows), 0.0, atol=1e-12)


def replace_full(forced: object, rows: np.ndarray) -> object:  # type: ignore[type-arg]
    from infergate.parity.record import TeacherForced

    assert isinstance(forced, TeacherForced)
    return TeacherForced(forced.token_ids, forced.target_logprobs, forced.top, forced.start, rows)


def test_covered_mass_reports_how_much_of_the_baseline_the_top_k_sees() -> None:
    base = scored(prompt("p", output_tokens=5))
    steps = compare_logprobs(base, candidate_of(base), first_divergence=None)
    # builders' rows hold 0.9 + 0.05 + 0.02 + 0.01 + 0.005 of the mass.
    np.testing.assert_allclose(steps.covered_mass, 0.985)


def test_non_finite_scores_travel_as_data() -> None:
    base = scored(prompt("p", output_tokens=5))
    forced = scores_along(base)
    lps = forced.top.logprobs.copy()
    lps[3, 0] = np.nan
    broken = replace(
        base,
        teacher_forced=type(forced)(
            forced.token_ids, forced.target_logprobs, TopLogprobs(forced.top.token_ids, lps), 1
        ),
    )
    steps = compare_logprobs(base, broken, first_divergence=None)
    assert np.isfinite(steps.kl[:3]).all()
