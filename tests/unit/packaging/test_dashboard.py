"""The Grafana dashboard reads only metrics the operator exports, and shows all of ours."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import infergate.metrics  # registers the operator's metrics
from tests.unit.packaging.lockfiles import REPO
from tests.unit.packaging.promql import metric_names

DASHBOARD = REPO / "dashboards" / "infergate.json"
# The series names prometheus_client writes for a family of each type.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}


def exported_series() -> set[str]:
    """Every series name the operator's /metrics can carry (its registry, families and all)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in _SUFFIXES[family.type]}
    return names


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _expressions() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    dashboard = _dashboard()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            # label_values(METRIC{...}, label) reads METRIC.
            inner = query.removeprefix("label_values(").rsplit(",", 1)[0]
            yield f"variable {variable['name']}", inner


EXPRESSIONS = list(_expressions())


@pytest.mark.parametrize(("where", "expression"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_expression_names_only_exported_metrics(where: str, expression: str) -> None:
    names = metric_names(expression)
    assert names, f"{where}: no metric in {expression!r}"
    unknown = names - exported_series()
    assert not unknown, f"{where}: the operator exports no {sorted(unknown)}"


def test_every_operator_metric_is_on_the_dashboard() -> None:
    shown = {name for _, expression in EXPRESSIONS for name in metric_names(expression)}
    ours = {family.name for family in REGISTRY.collect() if family.name.startswith("infergate_")}
    missing = {family for family in ours if not any(series.startswith(family) for series in shown)}
    assert not missing, f"metrics of the operator no panel shows: {sorted(missing)}"


def test_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    dashboard = _dashboard()
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_exported_series_are_what_the_metrics_endpoint_serves() -> None:
    """The name derivation above agrees with prometheus_client's own exposition."""
    from prometheus_client import generate_latest

    infergate.metrics.API_ERRORS.labels("GET", "pods", "403").inc(0)
    served = {
        line.split("{")[0].split(" ")[0]
        for line in generate_latest(REGISTRY).decode().splitlines()
        if line and not line.startswith("#")
    }
    assert served <= exported_series()
    assert "infergate_api_errors_total" in served


def test_parity_panels_name_figures_the_runner_writes_to_status() -> None:
    """A `metric="..."` selector on infergate_parity_metric must match a status.metrics key."""
    from infergate.runner.summary import headline_metrics
    from tests.unit.parity.builders import record, suite
    from tests.unit.runner.test_summary import forced, judged

    prompts = suite(4)
    result, _ = judged(record(prompts), record(forced(prompts)))
    written = set(headline_metrics(result.metrics))
    named = {
        match
        for _, expression in EXPRESSIONS
        if "infergate_parity_metric" in expression
        for match in re.findall(r'metric="([^"]+)"', expression)
    }
    assert {"tokenMatchRate", "meanKl", "hiddenCosineP1"} <= named
    assert named <= written, f"no such figure in status.metrics: {sorted(named - written)}"
