"""The per-layer error plot of the HTML report: inline SVG, no scripts, every string escaped.

One point per state (embeddings, layer 0 .. n-1, final norm) on a log scale, the band
the profile allows as a dashed line, and the first diverging layer marked. Errors of
exactly zero (identical states) sit on the bottom edge and are labelled 0 on hover.
Python places the points; `templates/charts/layers.svg.j2` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from infergate.report.templates import polyline, template

_W: Final = 640
_H: Final = 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 24, 56
_ERROR: Final = "#1f6feb"
_BAND: Final = "#9a6700"
_MARK: Final = "#d1242f"
_NAMES_SHOWN: Final = 16
"""At most this many state names under the axis (every k-th), so they never overlap."""


@dataclass(frozen=True)
class _State:
    """One state's point: where it is drawn and what its hover title says."""

    x: float
    y: float
    name: str
    error: float
    band: float
    colour: str
    named: bool
    """Whether its name is written under the axis."""


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

    step = max(1, math.ceil(count / _NAMES_SHOWN))
    states = [
        _State(
            x=sx(i), y=sy(value), name=name, error=value, band=limit,
            colour=_MARK if i == first else _ERROR,
            named=not (i % step and i not in (count - 1, first)),
        )
        for i, (name, value, limit) in enumerate(zip(names, errors, band, strict=True))
    ]  # fmt: skip
    decades = [(e, sy(10.0**e)) for e in range(math.ceil(lo), math.floor(hi) + 1)]
    return template("charts/layers.svg.j2").render(
        width=_W, height=_H, left=_LEFT, right=_RIGHT, top=_TOP, plot_width=plot_w,
        plot_height=plot_h, title=title, metric=metric, note=note, decades=decades,
        band_points=polyline((sx(i), sy(b)) for i, b in enumerate(band)),
        error_points=polyline((s.x, s.y) for s in states), states=states,
        first=None if first is None else states[first], band_colour=_BAND,
        error_colour=_ERROR, mark_colour=_MARK,
    )  # fmt: skip
