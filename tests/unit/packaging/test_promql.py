"""The PromQL reader the dashboard test relies on: it finds metric names, and only them."""

from __future__ import annotations

import pytest

from tests.unit.packaging.promql import metric_names


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("up", {"up"}),
        (
            'sum by (verdict) (increase(infergate_parity_checks_total{namespace=~"$namespace"}[$__rate_interval]))',
            {"infergate_parity_checks_total"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(infergate_reconcile_seconds_bucket[5m])))",
            {"infergate_reconcile_seconds_bucket"},
        ),
        (
            'a_total / on(namespace, name) group_left(engine) b_info{x="y"} > bool 0.5',
            {"a_total", "b_info"},
        ),
        (
            "max_over_time(infergate_parity_token_match_rate[1h:5m]) offset 1d",
            {"infergate_parity_token_match_rate"},
        ),
        ('count({__name__="infergate_rollouts_total"})', {"infergate_rollouts_total"}),
        ('label_replace(m1, "dst", "$1", "src", "(.*)") or vector(0)', {"m1"}),
        ("1 - (x_seconds_sum / x_seconds_count) * 1e3", {"x_seconds_sum", "x_seconds_count"}),
    ],
)
def test_finds_exactly_the_metric_names(expression: str, names: set[str]) -> None:
    assert metric_names(expression) == names
