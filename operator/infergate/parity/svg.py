"""Tiny inline-SVG charts for the parity report: no scripts, no external assets."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

_W, _H = 560, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 16, 40
_COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700")


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-2:
        return f"{value:.1e}"
    return f"{value:.3g}"


def _frame(title: str, body: str, x_label: str, y_label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
        f'height="{_H - _TOP - _BOTTOM}" fill="none" stroke="#d0d7de"/>'
        f"{body}"
        f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 6}" text-anchor="middle" '
        f'font-size="12">{escape(x_label)}</text>'
        f'<text x="14" y="{(_TOP + _H - _BOTTOM) / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {(_TOP + _H - _BOTTOM) / 2})">{escape(y_label)}</text>'
        "</svg>"
    )


def _y_axis(low: float, high: float, log: bool) -> tuple[str, Callable[[float], float]]:
    plot_h = _H - _TOP - _BOTTOM

    def scale(v: float) -> float:
        if log:
            v = math.log10(max(v, 10**low))
        frac = 0.0 if high == low else (v - low) / (high - low)
        return _TOP + plot_h * (1.0 - min(max(frac, 0.0), 1.0))

    ticks = []
    for i in range(5):
        v = low + (high - low) * i / 4
        shown = 10**v if log else v
        y = scale(10**v if log else v)
        ticks.append(
            f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
            f"{_fmt(shown)}</text>"
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#eaeef2"/>'
        )
    return "".join(ticks), scale


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
        return _frame(title, _empty(), x_label, y_label)
    x_max = max(*xs, 1.0)
    plot_w = _W - _LEFT - _RIGHT
    ticks, scale = _y_axis(y_range[0], y_range[1], log=False)

    def sx(x: float) -> float:
        return _LEFT + plot_w * x / x_max

    points = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if i:
            points.append(f"{sx(x):.1f},{scale(ys[i - 1]):.1f}")
        points.append(f"{sx(x):.1f},{scale(y):.1f}")
    x_ticks = "".join(
        f'<text x="{sx(x_max * i / 4):.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle" '
        f'font-size="10">{_fmt(x_max * i / 4)}</text>'
        for i in range(5)
    )
    line = (
        f'<polyline fill="none" stroke="{_COLOURS[0]}" stroke-width="2" '
        f'points="{" ".join(points)}"/>'
    )
    return _frame(title, ticks + x_ticks + line, x_label, y_label)


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
        return _frame(title, _empty(), "", y_label)
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
    plot_w = _W - _LEFT - _RIGHT
    group_w = plot_w / len(labels)
    bar_w = max(group_w * 0.8 / len(series), 1.0)
    base = scale(10**low if log else 0.0)
    bars = []
    for g, label in enumerate(labels):
        for s, (name, vs) in enumerate(series):
            v = vs[g]
            if v is None or not math.isfinite(v):
                continue
            x = _LEFT + g * group_w + group_w * 0.1 + s * bar_w
            y = scale(v)
            bars.append(
                f'<rect x="{x:.1f}" y="{min(y, base):.1f}" width="{bar_w:.1f}" '
                f'height="{abs(base - y):.1f}" fill="{_COLOURS[s % len(_COLOURS)]}">'
                f"<title>{escape(label)} {escape(name)}: {_fmt(v)}</title></rect>"
            )
        if len(labels) <= 16:
            bars.append(
                f'<text x="{_LEFT + (g + 0.5) * group_w:.1f}" y="{_H - _BOTTOM + 14}" '
                f'text-anchor="middle" font-size="10">{escape(label[:12])}</text>'
            )
    legend = "".join(
        f'<rect x="{_W - _RIGHT - 150}" y="{_TOP + 6 + 14 * s}" width="10" height="10" '
        f'fill="{_COLOURS[s % len(_COLOURS)]}"/><text x="{_W - _RIGHT - 136}" '
        f'y="{_TOP + 15 + 14 * s}" font-size="10">{escape(name)}</text>'
        for s, (name, _) in enumerate(series)
    )
    return _frame(title, ticks + "".join(bars) + legend, "", y_label)


def _empty() -> str:
    return (
        f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" font-size="12" '
        'fill="#57606a">not measured</text>'
    )
