"""The binomial interval tests/integration/test_gateway_traefik.py judges request shares with."""

from __future__ import annotations

import math

import pytest

from tests.integration.traefik import binomial_interval


def test_degenerate_weights_allow_exactly_none_or_all() -> None:
    assert binomial_interval(200, 0.0) == (0, 0)
    assert binomial_interval(200, 1.0) == (200, 200)


def test_a_fair_split_is_symmetric_around_its_mean() -> None:
    low, high = binomial_interval(200, 0.5)
    assert (low, high) == (200 - high, 200 - low)
    assert 75 <= low < 100 < high <= 125


@pytest.mark.parametrize(("n", "p"), [(200, 0.3), (200, 0.5), (50, 0.1), (1000, 0.3)])
def test_each_tail_outside_the_interval_holds_at_most_its_share(n: int, p: float) -> None:
    low, high = binomial_interval(n, p, 0.999)

    def pmf(k: int) -> float:
        return math.comb(n, k) * p**k * (1 - p) ** (n - k)

    below = sum(pmf(k) for k in range(low))
    above = sum(pmf(k) for k in range(high + 1, n + 1))
    assert below <= 0.0005
    assert above <= 0.0005
    # ...and the interval is the narrowest such: one count less on either side breaks it.
    assert below + pmf(low) > 0.0005
    assert above + pmf(high) > 0.0005
