"""Known answers for the statistics the verdicts rest on."""

from __future__ import annotations

import math

import pytest

from infergate.parity.stats import (
    clustered_mean,
    kaplan_meier,
    newcombe_difference,
    wilson_interval,
)


def test_wilson_interval_matches_published_values() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)


def test_wilson_interval_at_zero_successes_is_the_rule_of_three_cousin() -> None:
    low, high = wilson_interval(0, 10)
    z2 = 1.959963984540054**2
    assert low == 0.0
    assert high == pytest.approx(z2 / (10 + z2))


def test_wilson_interval_of_nothing_observed_is_everything() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_interval_narrows_with_more_trials() -> None:
    small = wilson_interval(97, 100)
    large = wilson_interval(9700, 10000)
    assert large[1] - large[0] < (small[1] - small[0]) / 5


def test_newcombe_difference_matches_newcombe_1998_example() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, example (a): 56/70 - 48/80.
    low, high = newcombe_difference(56, 70, 48, 80)
    assert low == pytest.approx(0.0524, abs=1e-4)
    assert high == pytest.approx(0.3339, abs=1e-4)


def test_kaplan_meier_on_known_divergences_with_censoring() -> None:
    # Two prompts fork at index 2, one at 5; two never fork (identical over 10 and 3 tokens).
    curve = kaplan_meier([2, 2, 5, None, None], [2, 2, 5, 10, 3])
    assert curve.positions == (0, 3, 6, 10)
    assert curve.surviving == pytest.approx((1.0, 0.6, 0.3, 0.3))
    assert curve.at(0) == 1.0
    assert curve.at(2) == 1.0
    assert curve.at(3) == pytest.approx(0.6)
    assert curve.quantile(0.1) == (2, False)
    assert curve.quantile(0.5) == (5, False)
    assert curve.quantile(0.8) == (10, True)


def test_kaplan_meier_without_censoring_is_the_empirical_distribution() -> None:
    curve = kaplan_meier(list(range(10)), list(range(10)))
    assert curve.quantile(0.1) == (0, False)
    assert curve.quantile(0.5) == (4, False)
    assert curve.at(5) == pytest.approx(0.5)
    assert curve.at(10) == pytest.approx(0.0)


def test_kaplan_meier_with_no_divergence_is_flat_and_censored() -> None:
    curve = kaplan_meier([None, None], [32, 32])
    assert curve.surviving == (1.0, 1.0)
    assert curve.quantile(0.1) == (32, True)


def test_clustered_mean_uses_prompts_as_clusters() -> None:
    mean, stderr = clustered_mean([1.0, 3.0], [1, 1])
    assert mean == pytest.approx(2.0)
    assert stderr == pytest.approx(1.0)  # sd sqrt(2) over sqrt(2) prompts


def test_clustered_mean_of_one_prompt_has_unknown_error() -> None:
    mean, stderr = clustered_mean([5.0], [10])
    assert mean == pytest.approx(0.5)
    assert math.isinf(stderr)
