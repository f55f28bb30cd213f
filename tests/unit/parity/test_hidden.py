"""Hidden-state errors on constructed tensors with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from infergate.parity.hidden import HiddenStateAccumulator, token_errors
from infergate.parity.record import ParityInputError


def _f32(rows: list[list[float]]) -> np.ndarray:
    return np.asarray(rows, dtype=np.float32)


def test_known_cosines() -> None:
    a = _f32([[1, 0], [1, 0], [1, 0], [2, 2]])
    b = _f32([[0, 1], [1, 1], [-1, 0], [4, 4]])
    errors = token_errors(a, b)
    assert errors.cosine == pytest.approx([0.0, 1 / math.sqrt(2), -1.0, 1.0])


def test_known_relative_and_absolute_errors() -> None:
    a = _f32([[3, 4, 0, 0]])
    b = _f32([[3, 4.5, 0, -0.25]])
    errors = token_errors(a, b)
    assert errors.rel_l2[0] == pytest.approx(math.hypot(0.5, 0.25) / 5.0)
    assert errors.max_abs[0] == pytest.approx(0.5)
    assert errors.mean_abs[0] == pytest.approx(0.75 / 4)


def test_zero_rows_compare_without_dividing_by_zero() -> None:
    a = _f32([[0, 0], [0, 0], [1, 1]])
    b = _f32([[0, 0], [1, 0], [0, 0]])
    errors = token_errors(a, b)
    assert errors.rel_l2[0] == 0.0
    assert errors.cosine[0] == 1.0
    assert math.isinf(errors.rel_l2[1])
    assert errors.cosine[1] == 0.0
    assert errors.rel_l2[2] == pytest.approx(1.0)
    assert errors.cosine[2] == 0.0


def test_chunked_kernel_agrees_with_a_float64_reference() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((257, 96)).astype(np.float32)
    b = (a + rng.normal(0, 1e-3, a.shape)).astype(np.float32)
    # 96 floats a row, 400 bytes a chunk: one row a chunk, many chunks and a ragged end.
    errors = token_errors(a, b, chunk_bytes=400)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = a64 - b64
    ref_rel = np.linalg.norm(d, axis=1) / np.linalg.norm(a64, axis=1)
    ref_cos = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    np.testing.assert_allclose(errors.rel_l2, ref_rel, rtol=1e-4)
    np.testing.assert_allclose(errors.cosine, ref_cos, atol=1e-6)
    np.testing.assert_allclose(errors.max_abs, np.abs(d).max(1), rtol=1e-6)
    np.testing.assert_allclose(errors.mean_abs, np.abs(d).mean(1), rtol=1e-4)


def test_non_finite_rows_are_counted_per_side_and_left_out() -> None:
    a = _f32([[1, 2], [np.nan, 1], [1, 1], [3e20, 3e20]])
    b = _f32([[1, 2], [1, 1], [np.inf, 1], [3e20, 3e20]])
    errors = token_errors(a, b)
    assert (errors.nonfinite_baseline, errors.nonfinite_candidate) == (1, 1)
    # Row 3 overflows float32 when squared but holds finite values: it is not flagged.
    assert errors.valid.tolist() == [True, False, False, True]


def test_shape_mismatch_is_an_input_error() -> None:
    with pytest.raises(ParityInputError, match=r"baseline \(3, 4\), candidate \(3, 5\)"):
        HiddenStateAccumulator().add(
            "p0", np.zeros((3, 4), np.float32), np.zeros((3, 5), np.float32)
        )


def test_accumulator_suite_metrics_and_position_buckets() -> None:
    acc = HiddenStateAccumulator()
    rng = np.random.default_rng(0)
    base = rng.standard_normal((1100, 8)).astype(np.float32) + 1.0
    # Error grows with position (a rope-theta mismatch): 1e-3 before 1024, 1e-1 after.
    scale = np.where(np.arange(1100) < 1024, 1e-3, 1e-1).astype(np.float32)[:, None]
    cand = base * (1 + scale)
    acc.add("long", base, cand)
    acc.add("short", base[:10], base[:10])
    metrics, buckets = acc.finalize()
    assert metrics.tokens == 1110
    assert metrics.prompts == 2
    assert buckets[0].hidden_tokens == 1034
    assert buckets[1].hidden_tokens == 76
    assert buckets[0].rel_l2_mean == pytest.approx((1024 * 1e-3) / 1034, rel=1e-3)
    assert buckets[1].rel_l2_mean == pytest.approx(0.1, rel=1e-3)
    assert metrics.rel_l2_p99 == pytest.approx(0.1, rel=1e-3)
    assert buckets[2].hidden_tokens == 0
    assert buckets[2].rel_l2_mean is None


finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 40), st.integers(1, 64)), elements=finite))
def test_a_tensor_compared_with_itself_is_exact(a: np.ndarray) -> None:
    errors = token_errors(a, a.copy())
    assert np.all(errors.max_abs == 0.0)
    assert np.all(errors.rel_l2 == 0.0)
    assert np.all(errors.cosine == 1.0)


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float32,
        st.tuples(st.integers(1, 20), st.integers(2, 64)),
        elements=st.floats(0.5, 10, width=32),
    ),
    st.floats(1e-3, 0.5),
)
def test_scaling_one_side_by_one_plus_e_gives_relative_error_e(a: np.ndarray, e: float) -> None:
    b = (a.astype(np.float64) * (1 + e)).astype(np.float32)
    errors = token_errors(a, b)
    np.testing.assert_allclose(errors.rel_l2, e, rtol=1e-3)
    np.testing.assert_allclose(errors.cosine, 1.0, atol=1e-6)


def test_a_two_percent_scale_moves_the_log_norm_ratio_and_nothing_cosine_sees() -> None:
    import math

    from infergate.parity.hidden import token_errors

    rng = np.random.default_rng(0)
    base = rng.standard_normal((50, 64)).astype(np.float32)
    errors = token_errors(base, base * np.float32(1.02))
    np.testing.assert_allclose(errors.log_norm_ratio, math.log(1.02), rtol=1e-5)
    np.testing.assert_allclose(errors.cosine, 1.0, atol=1e-6)
    np.testing.assert_allclose(errors.rel_l2, 0.02, rtol=1e-4)
    same = token_errors(base, base)
    assert (same.log_norm_ratio == 0.0).all()
