"""First diverging layer: tables of per-layer errors with known answers, and the error
computation on synthetic states (the per-layer plot: tests/unit/report/test_layer_chart.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infergate.parity.layers import (
    band_from_noise,
    depth_band,
    first_diverging_layer,
    layer_of_state,
    layer_probe_plan,
    layer_state_names,
    localise,
    per_layer_errors,
)

FLAT = [0.05] * 8
# Noise growing with depth, as bf16 against fp32 does (0.014 after layer 1, 0.066 after 28).
GROWING_NOISE = [0.0, 0.014, 0.02, 0.03, 0.04, 0.05, 0.06, 0.066]
GROWING_BAND = band_from_noise(GROWING_NOISE, multiplier=2.0, floor=1e-3)


@pytest.mark.parametrize(
    ("errors", "band", "persist", "expected"),
    [
        pytest.param([0.0] * 8, FLAT, 2, None, id="identical runs"),
        pytest.param([0, 0, 0, 0.2, 0.3, 0.3, 0.4, 0.5], FLAT, 2, 3, id="break at state 3"),
        pytest.param([0.3] * 8, FLAT, 2, 0, id="already the embeddings differ"),
        pytest.param([0, 0, 0, 0, 0, 0, 0, 0.9], FLAT, 2, 7, id="only the last state"),
        pytest.param([0, 0.09, 0, 0, 0.2, 0.3, 0.3, 0.3], FLAT, 2, 4, id="one noisy layer ignored"),
        pytest.param(
            [0, 0.09, 0, 0, 0.2, 0.3, 0.3, 0.3], FLAT, 1, 1, id="persist 1 takes any exit"
        ),
        pytest.param([0, 0.09, 0.09, 0, 0, 0, 0, 0], FLAT, 3, None, id="excursion that returns"),
        pytest.param([0, 0, math.nan, 0, 0, 0, 0, 0], FLAT, 1, 2, id="NaN is out of band"),
        pytest.param([0, 0, 0, math.inf, math.inf, 1, 1, 1], FLAT, 2, 3, id="Inf is out of band"),
        pytest.param(GROWING_NOISE, GROWING_BAND, 2, None, id="noise growing with depth"),
        pytest.param(GROWING_NOISE, FLAT, 2, 6, id="same noise, flat band: false alarm"),
        pytest.param(
            [0.0, 0.014, 0.02, 0.2, 0.25, 0.3, 0.35, 0.4], GROWING_BAND, 2, 3, id="break in growing"
        ),
        pytest.param([0.05] * 8, FLAT, 2, None, id="on the band is in band"),
    ],
)
def test_first_diverging_layer(
    errors: list[float], band: list[float], persist: int, expected: int | None
) -> None:
    assert first_diverging_layer(errors, band, persist=persist) == expected


@pytest.mark.parametrize(
    ("errors", "band", "persist", "message"),
    [
        ([0.1, 0.2], [0.1], 2, "one per state"),
        ([0.1], [0.1], 0, "persist"),
        ([0.1], [-1.0], 1, "band"),
        ([0.1], [math.nan], 1, "band"),
    ],
)
def test_bad_inputs_are_refused(
    errors: list[float], band: list[float], persist: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        first_diverging_layer(errors, band, persist=persist)


def test_depth_band_grows_geometrically_between_the_anchors() -> None:
    band = depth_band(30, 0.014, 0.066)
    assert band[0] == pytest.approx(0.014)
    assert band[-1] == pytest.approx(0.066)
    ratios = np.diff(np.log(band))
    assert np.allclose(ratios, ratios[0])


def test_names_and_layers_of_states() -> None:
    names = layer_state_names(3)
    assert names == ("embeddings", "layer 0", "layer 1", "layer 2", "final norm")
    assert [layer_of_state(i, len(names)) for i in range(len(names))] == [None, 0, 1, 2, None]


def _states(layers: int, positions: int = 12, hidden: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((layers + 2, positions, hidden))


def test_a_corrupted_layer_is_named_from_synthetic_states() -> None:
    base = _states(6)
    cand = base.copy()
    cand[4:] += 0.5 * np.random.default_rng(1).standard_normal(cand[4:].shape)  # layer 3 on
    names = layer_state_names(6)
    errors = per_layer_errors(base, cand, names)
    assert np.all(errors.rel_l2[:4] == 0)
    assert np.all(errors.rel_l2[4:] > 0.3)
    found = localise(errors, depth_band(len(names), 1e-4, 1e-2))
    assert found.index == 4
    assert found.name == "layer 3"
    assert "first diverging layer: layer 3 of 6" in found.reason()
    by_cosine = localise(errors, [1e-3] * len(names), use="cosine")
    assert by_cosine.index == 4


def test_non_finite_states_count_as_the_worst_error() -> None:
    base = _states(2)
    cand = base.copy()
    cand[2, 5, 0] = np.nan
    errors = per_layer_errors(base, cand, layer_state_names(2))
    assert math.isinf(errors.rel_l2[2])
    assert errors.cosine[2] == -1.0
    assert first_diverging_layer(errors.rel_l2.tolist(), [0.1] * 4, persist=1) == 2


def test_errors_aggregate_by_a_high_quantile_of_positions() -> None:
    base = np.ones((3, 200, 4))
    cand = base.copy()
    cand[1, :3] *= 2.0  # three positions of 200 differ by 100%
    errors = per_layer_errors(base, cand, layer_state_names(1), quantile=0.99)
    assert errors.rel_l2[1] == pytest.approx(1.0)
    median = per_layer_errors(base, cand, layer_state_names(1), quantile=0.5)
    assert median.rel_l2[1] == 0.0


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="states, positions, hidden"):
        per_layer_errors(np.zeros((3, 2, 4)), np.zeros((3, 3, 4)), layer_state_names(1))
    with pytest.raises(ValueError, match="names"):
        per_layer_errors(np.zeros((3, 2, 4)), np.zeros((3, 2, 4)), layer_state_names(2))


def test_vllm_is_probed_through_a_stand_in_and_the_report_says_so() -> None:
    vllm = layer_probe_plan("vllm")
    assert vllm.stand_in
    assert vllm.prober == "transformers"
    assert "same weights" in vllm.note
    for engine in ("mindformers", "transformers"):
        plan = layer_probe_plan(engine)
        assert not plan.stand_in
        assert plan.prober == engine


def test_no_divergence_says_where_the_difference_must_be() -> None:
    errors = per_layer_errors(_states(2), _states(2), layer_state_names(2))
    found = localise(errors, [0.1] * 4)
    assert found.index is None
    assert "lm_head" in found.reason()
