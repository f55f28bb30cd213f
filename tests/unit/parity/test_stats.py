"""Known answers for the statistics the verdicts rest on."""

from __future__ import annotations

import math

import pytest

from infergate.parity.prompt_bounds import clustered_mean
from infergate.parity.stats import (
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


# -- one-sided bounds: hand-computed values -------------------------------------------------


def test_one_sided_wilson_bound_of_no_failure_in_32_prompts() -> None:
    from infergate.parity.stats import wilson_bounds

    z = 1.6448536269514722  # one-sided 95%
    low, high = wilson_bounds(0, 32, 0.95)
    assert low == 0.0
    assert high == pytest.approx(z * z / (32 + z * z))  # 0.0780
    assert high == pytest.approx(0.07796, abs=1e-5)


def test_one_sided_wilson_bounds_of_8_in_10() -> None:
    from infergate.parity.stats import wilson_bounds

    z, n, p = 1.6448536269514722, 10, 0.8
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson_bounds(8, 10, 0.95)
    assert low == pytest.approx(centre - half)
    assert high == pytest.approx(centre + half)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.95, 1, 6.313752), (0.95, 3, 2.353363), (0.95, 7, 1.894579), (0.95, 31, 1.695519),
     (0.975, 10, 2.228139), (0.99, 30, 2.457262)],
)  # fmt: skip
def test_student_t_quantiles_match_the_tables(p: float, df: int, expected: float) -> None:
    from infergate.parity.stats import student_t_quantile

    assert student_t_quantile(p, df) == pytest.approx(expected, abs=2e-6)
    assert student_t_quantile(1 - p, df) == pytest.approx(-expected, abs=2e-6)


def test_clustered_bounds_by_hand() -> None:
    from infergate.parity.prompt_bounds import clustered_bounds

    # Three prompts of 10 steps with sums 1, 2, 3: mean 0.2; residuals -1, 0, 1;
    # variance 2 / 30^2 * 3/2; t(0.95, 2 df) = 2.919986.
    found = clustered_bounds([1.0, 2.0, 3.0], [10, 10, 10], 0.95)
    se = math.sqrt(2 / 900 * 1.5)
    assert found.value == pytest.approx(0.2)
    assert found.stderr == pytest.approx(se)
    assert found.upper == pytest.approx(0.2 + 2.919986 * se, abs=1e-6)
    assert found.lower == pytest.approx(0.2 - 2.919986 * se, abs=1e-6)


def test_a_standard_error_of_zero_gives_bounds_at_the_mean_not_infinity() -> None:
    from infergate.parity.prompt_bounds import clustered_bounds

    found = clustered_bounds([0.5, 1.0], [5, 10], 0.95)
    assert found.stderr == 0.0
    assert found.lower == found.upper == pytest.approx(0.1)


def test_a_single_prompt_gives_no_bound() -> None:
    from infergate.parity.prompt_bounds import clustered_bounds

    found = clustered_bounds([1.0], [10], 0.95)
    assert found.value == pytest.approx(0.1)
    assert found.lower is None
    assert found.upper is None


def test_step_rate_bounds_take_the_wider_of_cluster_and_wilson() -> None:
    from infergate.parity.prompt_bounds import clustered_rate_bounds
    from infergate.parity.stats import wilson_bounds

    # Every step agrees: the clustered error is 0, Wilson over 200 steps still bounds it.
    value, low, high = clustered_rate_bounds([100, 100], [100, 100], 0.95)
    assert value == 1.0
    assert high == 1.0
    assert low == pytest.approx(wilson_bounds(200, 200, 0.95)[0])


def test_quantile_bounds_are_fixed_and_identical_prompts_leave_the_positions_uncertainty() -> None:
    import numpy as np

    from infergate.parity.prompt_bounds import clustered_quantile_bounds

    # Five identical prompts of 0..99: no spread between prompts, so the share above a
    # value is bounded as a binomial rate over the 500 positions. Above 98 lies 1% (not
    # certifiably under 1%), above 99 nothing (Wilson's upper bound 0.0054 < 1%).
    same = [np.arange(100, dtype=float)] * 5
    value, low, high = clustered_quantile_bounds(same, 0.99, 0.95)
    assert (value, low, high) == (98.0, 98.0, 99.0)
    spread = [np.arange(100, dtype=float) * (i + 1) for i in range(6)]
    first = clustered_quantile_bounds(spread, 0.99, 0.95)
    assert first == clustered_quantile_bounds(spread, 0.99, 0.95)  # no randomness
    assert first[1] is not None
    assert first[2] is not None
    assert first[1] < first[0] < first[2]


@pytest.mark.parametrize("df", [1, 2, 3, 7, 9, 37, 100, 1000])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.975, 0.99, 0.999])
def test_student_t_matches_scipy(p: float, df: int) -> None:
    from scipy import stats as scipy_stats

    from infergate.parity.stats import student_t_cdf, student_t_quantile

    expected = float(scipy_stats.t.ppf(p, df))
    assert student_t_quantile(p, df) == pytest.approx(expected, rel=1e-8, abs=1e-9)
    assert student_t_cdf(expected, df) == pytest.approx(p, rel=1e-10)


def test_prompt_mean_t_bound_matches_scipy_interval() -> None:
    import numpy as np
    from scipy import stats as scipy_stats

    from infergate.parity.prompt_bounds import clustered_bounds

    # Nine prompts (under the bootstrap's minimum): the bound is the one-sample t bound of
    # the per-prompt means, whatever each prompt's length.
    counts = [10, 200, 35, 8000, 12, 60, 700, 3, 40]
    means = np.linspace(1e-5, 9e-5, 9)
    found = clustered_bounds((means * counts).tolist(), counts, 0.95)
    low, high = scipy_stats.t.interval(
        0.90, len(means) - 1, loc=means.mean(), scale=scipy_stats.sem(means)
    )
    assert found.value == pytest.approx(means.mean())
    assert found.lower == pytest.approx(low)
    assert found.upper == pytest.approx(high)


# -- the hand-written statistics against scipy.stats (an audited implementation) --------


@pytest.mark.parametrize("df", [1.5, 2.5, 8.7, 36.2])
@pytest.mark.parametrize("p", [0.05, 0.9, 0.95, 0.99])
def test_student_t_matches_scipy_at_fractional_df(p: float, df: float) -> None:
    from scipy import stats as scipy_stats

    from infergate.parity.stats import student_t_quantile

    expected = float(scipy_stats.t.ppf(p, df))
    assert student_t_quantile(p, df) == pytest.approx(expected, rel=1e-8, abs=1e-9)


@pytest.mark.parametrize("values", [[0.9, 1.4, 1.1, 2.3], [-0.0008, 0.004, -0.006, 0.001],
                                    [3.0, 3.5, 2.0, 4.0, 3.3, 2.9, 3.1, 3.6, 2.2]])  # fmt: skip
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_per_prompt_t_bounds_match_scipy_interval(values: list[float], confidence: float) -> None:
    """The paired bound of the long-prompt checks (one value per long prompt, under the
    bootstrap's minimum): scipy's t interval at level 2c - 1 has the one-sided bounds."""
    import numpy as np
    from scipy import stats as scipy_stats

    from infergate.parity.prompt_bounds import per_prompt_bounds

    found = per_prompt_bounds(values, confidence)
    array = np.asarray(values)
    low, high = scipy_stats.t.interval(
        2 * confidence - 1, array.size - 1, loc=array.mean(), scale=scipy_stats.sem(array)
    )
    assert found.lower == pytest.approx(low, rel=1e-9)
    assert found.upper == pytest.approx(high, rel=1e-9)


@pytest.mark.parametrize(("successes", "total"), [(0, 4), (1, 4), (7, 10), (37, 38), (38, 38),
                                                  (3961, 4096), (12, 1000)])  # fmt: skip
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(successes: int, total: int, confidence: float) -> None:
    from scipy import stats as scipy_stats

    from infergate.parity.stats import wilson_bounds, wilson_interval

    ci = scipy_stats.binomtest(successes, total).proportion_ci(confidence, method="wilson")
    low, high = wilson_interval(successes, total, confidence)
    assert low == pytest.approx(float(ci.low), abs=1e-12)
    assert high == pytest.approx(float(ci.high), abs=1e-12)
    one_sided = scipy_stats.binomtest(successes, total).proportion_ci(
        2 * confidence - 1, method="wilson"
    )
    assert wilson_bounds(successes, total, confidence) == pytest.approx(
        (float(one_sided.low), float(one_sided.high)), abs=1e-12
    )


@pytest.mark.parametrize(("a", "n_a", "b", "n_b"), [(990, 1000, 985, 1000), (3, 40, 0, 40),
                                                     (4000, 4096, 3990, 4096)])  # fmt: skip
def test_newcombe_difference_is_built_on_scipys_wilson_intervals(
    a: int, n_a: int, b: int, n_b: int
) -> None:
    """Newcombe's method 10 from scipy's Wilson intervals, written out: the same numbers."""
    import math

    from scipy import stats as scipy_stats

    from infergate.parity.stats import newcombe_difference

    ci_a = scipy_stats.binomtest(a, n_a).proportion_ci(0.9, method="wilson")
    ci_b = scipy_stats.binomtest(b, n_b).proportion_ci(0.9, method="wilson")
    p_a, p_b = a / n_a, b / n_b
    low = p_a - p_b - math.hypot(p_a - ci_a.low, ci_b.high - p_b)
    high = p_a - p_b + math.hypot(ci_a.high - p_a, p_b - ci_b.low)
    assert newcombe_difference(a, n_a, b, n_b, 0.9) == pytest.approx((low, high), abs=1e-12)
