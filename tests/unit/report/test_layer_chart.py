"""The per-layer error plot of the report: well-formed SVG, every string escaped."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from infergate.report.layer_chart import layer_error_chart


def test_the_chart_is_valid_svg_with_every_string_escaped() -> None:
    names = ["embeddings", "layer <0>", "layer & 1", "final norm"]
    svg = layer_error_chart(
        names, [0.0, 1e-3, 0.4, math.inf], [0.01] * 4, first=2, note='stand-in "transformers"'
    )
    root = ET.fromstring(svg)  # noqa: S314 - our own output, parsed to prove it is well formed
    text = "".join(root.itertext())
    assert "layer <0>" in text
    assert "first diverging: layer & 1" in text
    assert "<0>" not in svg
    assert len(root.findall("{http://www.w3.org/2000/svg}circle")) == 4


def test_the_chart_refuses_ragged_inputs() -> None:
    with pytest.raises(ValueError, match="one of each"):
        layer_error_chart(["a", "b"], [0.1], [0.1, 0.1], first=None)
