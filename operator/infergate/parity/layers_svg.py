"""The per-layer error plot of the HTML report: inline SVG, no scripts, every string escaped.

One point per state (embeddings, layer 0 .. n-1, final norm) on a log scale, the band
the profile allows as a dashed line, and the first diverging layer marked. Errors of
exactly zero (identical states) sit on the bottom edge and are labelled 0 on hover.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Final

_W: Final = 640
_H: Final = 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 24, 56
_ERROR: Final = "#1f6feb"
_BAND: Final = "#9a6700"
_MARK: Final = "#d1242f"


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e4 or abs(value) < 1e-2:
        return f"{value:.1e}"
    return f"{value:.3g}"


def layer_error_chart(
    names: Sequence[str],
    errors: Sequence[float],
    band: Sequence[float],
    *,
    first: int | None,
    title: str = "Hidden-state error by layer",
    metric: str = "relative L2",
    note: str = "",
) -> str:
    """An SVG chart of `errors` against `band` per state, marking state `first`."""
    if not (len(names) == len(errors) == len(band)) or not names:
        raise ValueError(
            f"layer chart: {len(names)} names, {len(errors)} errors and {len(band)} band "
            "limits; give one of each per state"
        )
    finite = [v for v in (*errors, *band) if math.isfinite(v) and v > 0]
    low = min(finite, default=1e-8) / 2
    high = max(finite, default=1.0) * 2
    lo, hi = math.log10(low), math.log10(high)
    plot_w = _W - _LEFT - _RIGHT
    plot_h = _H - _TOP - _BOTTOM
    count = len(names)

    def sx(i: int) -> float:
        return _LEFT + (plot_w * (i + 0.5) / count)

    def sy(value: float) -> float:
        if not math.isfinite(value):
            return float(_TOP)
        if value <= 0:
            return float(_TOP + plot_h)
        fraction = (math.log10(max(value, low)) - lo) / (hi - lo)
        return _TOP + plot_h * (1 - min(max(fraction, 0.0), 1.0))

    parts: list[str] = []
    for exponent in range(math.ceil(lo), math.floor(hi) + 1):
        y = sy(10.0**exponent)
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
            f"1e{exponent}</text>"
        )
    band_points = " ".join(f"{sx(i):.1f},{sy(b):.1f}" for i, b in enumerate(band))
    parts.append(
        f'<polyline points="{band_points}" fill="none" stroke="{_BAND}" stroke-dasharray="4 3" '
        'stroke-width="1.5"><title>band</title></polyline>'
    )
    error_points = " ".join(f"{sx(i):.1f},{sy(e):.1f}" for i, e in enumerate(errors))
    parts.append(f'<polyline points="{error_points}" fill="none" stroke="{_ERROR}"/>')
    for i, (name, value, limit) in enumerate(zip(names, errors, band, strict=True)):
        colour = _MARK if i == first else _ERROR
        tip = f"{name}: {metric} {_fmt(value)} (band {_fmt(limit)})"
        parts.append(
            f'<circle cx="{sx(i):.1f}" cy="{sy(value):.1f}" r="3.5" fill="{colour}">'
            f"<title>{escape(tip)}</title></circle>"
        )
    step = max(1, math.ceil(count / 16))
    for i, name in enumerate(names):
        if i % step and i not in (count - 1, first):
            continue
        x = sx(i)
        parts.append(
            f'<text x="{x:.1f}" y="{_TOP + plot_h + 12}" font-size="10" text-anchor="end" '
            f'transform="rotate(-40 {x:.1f} {_TOP + plot_h + 12})">{escape(name)}</text>'
        )
    if first is not None:
        x = sx(first)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_TOP + plot_h}" stroke="{_MARK}" '
            'stroke-dasharray="2 2"/>'
            f'<text x="{x + 4:.1f}" y="{_TOP + 12}" font-size="11" fill="{_MARK}">'
            f"first diverging: {escape(names[first])}</text>"
        )
    caption = escape(f"{title}: {metric} (dots), band (dashed)" + (f"; {note}" if note else ""))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#d0d7de"/>'
        + "".join(parts)
        + f'<text x="{_LEFT}" y="{_TOP - 8}" font-size="11">{caption}</text>'
        "</svg>"
    )
