"""The report's inline-SVG charts: no scripts, no external assets.

Python places every mark (the arithmetic of scales and bars); the templates
`templates/charts/*.svg.j2` write the markup, escaping every label.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infergate.report.templates import polyline, template

_W, _H = 560, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 16, 40
_COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700")
_NAMED_GROUPS = 16


@dataclass(frozen=True)
class _Frame:
    """The chart's box, as every chart template draws it."""

    width: int = _W
    height: int = _H
    left: int = _LEFT
    right: int = _RIGHT
    top: int = _TOP
    bottom: int = _BOTTOM

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom


_FRAME = _Frame()


@dataclass(frozen=True)
class _Tick:
    """A labelled point of an axis: where it is drawn (x or y) and the value it shows."""

    at: float
    value: float


@dataclass(frozen=True)
class _Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    label: str
    series: str
    value: float


@dataclass(frozen=True)
class _Label:
    x: float
    text: str


def _y_axis(low: float, high: float, log: bool) -> tuple[list[_Tick], Callable[[float], float]]:
    def scale(v: float) -> float:
        if log:
            v = math.log10(max(v, 10**low))
        frac = 0.0 if high == low else (v - low) / (high - low)
        return _TOP + _FRAME.plot_height * (1.0 - min(max(frac, 0.0), 1.0))

    ticks = []
    for i in range(5):
        v = low + (high - low) * i / 4
        shown = 10**v if log else v
        ticks.append(_Tick(at=scale(shown), value=shown))
    return ticks, scale


def _empty(title: str, x_label: str, y_label: str) -> str:
    return template("charts/frame.svg.j2").render(
        frame=_FRAME, title=title, x_label=x_label, y_label=y_label
    )


def step_chart(
    title: str,
    *,
    xs: Sequence[float],
    ys: Sequence[float],
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
) -> str:
    """A right-continuous step function through the points (a survival curve)."""
    if not xs:
        return _empty(title, x_label, y_label)
    x_max = max(*xs, 1.0)
    ticks, scale = _y_axis(y_range[0], y_range[1], log=False)

    def sx(x: float) -> float:
        return _LEFT + _FRAME.plot_width * x / x_max

    points: list[tuple[float, float]] = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if i:
            points.append((sx(x), scale(ys[i - 1])))
        points.append((sx(x), scale(y)))
    x_ticks = [_Tick(at=sx(x_max * i / 4), value=x_max * i / 4) for i in range(5)]
    return template("charts/step.svg.j2").render(
        frame=_FRAME, title=title, x_label=x_label, y_label=y_label, ticks=ticks,
        x_ticks=x_ticks, points=polyline(points), colour=_COLOURS[0],
    )  # fmt: skip


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    y_label: str,
    log: bool = False,
) -> str:
    """Grouped bars, one group per label and one bar per series; None draws no bar."""
    values = [v for _, vs in series for v in vs if v is not None and math.isfinite(v)]
    if not labels or not values:
        return _empty(title, "", y_label)
    positive = [v for v in values if v > 0]
    low: float
    high: float
    if log and positive:
        low = math.floor(math.log10(min(positive)))
        high = max(math.ceil(math.log10(max(positive))), low + 1)
    else:
        log = False
        low, high = min(0.0, *values), max(values) or 1.0
    ticks, scale = _y_axis(low, high, log)
    group_w = _FRAME.plot_width / len(labels)
    bar_w = max(group_w * 0.8 / len(series), 1.0)
    base = scale(10**low if log else 0.0)
    groups: list[tuple[list[_Bar], _Label | None]] = []
    for g, label in enumerate(labels):
        bars = []
        for s, (name, vs) in enumerate(series):
            v = vs[g]
            if v is None or not math.isfinite(v):
                continue
            y = scale(v)
            bars.append(
                _Bar(
                    x=_LEFT + g * group_w + group_w * 0.1 + s * bar_w, y=min(y, base),
                    width=bar_w, height=abs(base - y), colour=_COLOURS[s % len(_COLOURS)],
                    label=label, series=name, value=v,
                )
            )  # fmt: skip
        # Past 16 groups the names would overlap: the bars' hover titles still name them.
        shown = (
            _Label(x=_LEFT + (g + 0.5) * group_w, text=label[:12]) if len(labels) <= 16 else None
        )
        groups.append((bars, shown))
    legend = [(name, _COLOURS[s % len(_COLOURS)]) for s, (name, _) in enumerate(series)]
    return template("charts/bar.svg.j2").render(
        frame=_FRAME, title=title, x_label="", y_label=y_label, ticks=ticks, groups=groups,
        legend=legend,
    )  # fmt: skip
