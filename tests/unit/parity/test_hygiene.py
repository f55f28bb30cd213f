"""Effective-config comparison and non-finite logprob detection."""

from __future__ import annotations

import numpy as np

from infergate.parity.hygiene import config_differences, nonfinite_logprobs
from infergate.parity.record import TopLogprobs

from .builders import prompt, replace


def test_config_differences_compare_nested_keys_shared_by_both_sides() -> None:
    baseline = {"model": {"rms_norm_eps": 1e-6, "rope_theta": 1e6}, "dtype": "bfloat16", "a": 1}
    candidate = {"model": {"rms_norm_eps": 1e-5, "rope_theta": 1e6}, "dtype": "float16", "b": 2}
    differing, one_sided = config_differences(baseline, candidate)
    assert differing == ["dtype: 'bfloat16' -> 'float16'", "model.rms_norm_eps: 1e-06 -> 1e-05"]
    assert one_sided == ["a", "b"]


def test_allowed_patterns_let_expected_changes_through() -> None:
    differing, _ = config_differences(
        {"dtype": "bfloat16", "model": {"params_dtype": "bf16"}},
        {"dtype": "float16", "model": {"params_dtype": "fp16"}},
        allowed=("dtype", "*.params_dtype"),
    )
    assert differing == []


def test_padding_is_not_a_non_finite_logprob() -> None:
    padded = TopLogprobs.from_pairs([[(1, -0.1), (2, -3.0)], [(3, -0.2)]])
    assert np.isneginf(padded.logprobs[1, 1])
    p = prompt("p", output_tokens=2)
    assert not nonfinite_logprobs(replace(p, top_logprobs=padded))
    broken = padded.logprobs.copy()
    broken[0, 1] = np.inf
    assert nonfinite_logprobs(replace(p, top_logprobs=TopLogprobs(padded.token_ids, broken)))


def test_nan_in_full_vocabulary_rows_is_non_finite_but_minus_infinity_is_not() -> None:
    from infergate.parity.record import TeacherForced

    from .builders import scored

    base = scored(prompt("p", output_tokens=3))
    forced = base.teacher_forced
    assert forced is not None
    rows = np.log(np.full((2, 4), 0.25, np.float32))
    rows[0, 3] = -np.inf
    fine = TeacherForced(forced.token_ids, forced.target_logprobs, forced.top, 1, rows)
    assert not nonfinite_logprobs(replace(base, teacher_forced=fine))
    rows = rows.copy()
    rows[1, 1] = np.nan
    broken = TeacherForced(forced.token_ids, forced.target_logprobs, forced.top, 1, rows)
    assert nonfinite_logprobs(replace(base, teacher_forced=broken))
