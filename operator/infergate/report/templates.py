"""The Jinja2 environment the report renders with: markup in templates, numbers in Python.

The templates are package data under `templates/` (`*.html.j2` for the page, `*.svg.j2`
for the charts), and every value they show is escaped unless it is marked safe: the
report carries engine output, prompt ids and config values that are not ours. Python
keeps what is arithmetic (chart geometry, which rows a table has); a template keeps what
is markup.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined, Template, select_autoescape


def number(value: float | None, digits: int = 6) -> str:
    """A measured value for a table cell: `digits` significant digits, n/a when absent."""
    if value is None:
        return "n/a"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def tick(value: float) -> str:
    """A chart's axis or hover label: short, scientific when very large or small."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e4 or abs(value) < 1e-2:
        return f"{value:.1e}"
    return f"{value:.3g}"


def _table_cell(text: str) -> str:
    """Text for a markdown table cell: a bare | would end the cell."""
    return text.replace("|", "\\|")


def _coordinate(value: float) -> str:
    return f"{value:.1f}"


def polyline(points: Iterable[tuple[float, float]]) -> str:
    """The `points` attribute of an SVG polyline through `points` (x, y)."""
    return " ".join(f"{_coordinate(x)},{_coordinate(y)}" for x, y in points)


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("infergate.report", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html.j2", "svg.j2")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = number
    env.filters["tick"] = tick
    env.filters["xy"] = _coordinate
    env.filters["cell"] = _table_cell
    return env


def template(name: str) -> Template:
    """The template `name` under templates/ (loaded once per process)."""
    return _environment().get_template(name)
