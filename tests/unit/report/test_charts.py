"""The report's bar and step charts: well-formed SVG, labels escaped, gaps left undrawn."""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import infergate.report
from infergate.report.charts import bar_chart, step_chart

_SVG = "{http://www.w3.org/2000/svg}"
_REPO = Path(__file__).resolve().parents[3]


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own output, parsed to prove it is well formed


def test_a_bar_chart_draws_one_bar_per_finite_value_and_escapes_its_labels() -> None:
    svg = bar_chart("KL <by> prompt", ["p&1", "p2"], [("mean", [1e-5, None]), ("P99", [2e-3, 0.1])], "nats", log=True)  # fmt: skip
    root = _parse(svg)
    assert root.get("aria-label") == "KL <by> prompt"
    bars = [r for r in root.iter(f"{_SVG}rect") if r.find(f"{_SVG}title") is not None]
    assert len(bars) == 3
    assert "p&1 mean: 1.0e-05" in "".join(root.itertext())
    assert "<by>" not in svg


def test_a_chart_with_nothing_to_draw_says_not_measured() -> None:
    for svg in (bar_chart("empty", [], [], "y"), step_chart("s", xs=[], ys=[], x_label="x", y_label="y")):  # fmt: skip
        assert "not measured" in "".join(_parse(svg).itertext())


def test_a_step_chart_steps_down_at_each_point() -> None:
    svg = step_chart("survival", xs=[0, 4, 8], ys=[1.0, 0.5, 0.25], x_label="x", y_label="y")
    [line] = _parse(svg).iter(f"{_SVG}polyline")
    assert len(line.get("points", "").split()) == 5  # each later point adds a step


def test_the_templates_ship_as_package_data() -> None:
    """An installed operator image renders its reports from these files."""
    patterns = tomllib.loads((_REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["package-data"]["infergate"]
    package = Path(infergate.report.__file__).parent
    templates = [p for p in (package / "templates").rglob("*") if p.is_file()]
    assert templates
    root = package.parent
    for path in templates:
        relative = path.relative_to(root)
        assert any(relative.match(p) or path.match(p) for p in patterns), relative
