"""Profiles: every default has a source, explicit thresholds override, auto-selection."""

from __future__ import annotations

import pytest

from infergate.parity.profiles import PROFILES, resolve_thresholds, suggest_profile
from infergate.parity.thresholds import ProfileName, Thresholds

from .builders import meta

_PARAMETERS = {"maxDivergenceLogprobGap", "longPromptTokens"}


@pytest.mark.parametrize("name", list(ProfileName))
def test_every_blocking_threshold_names_its_source(name: ProfileName) -> None:
    profile = PROFILES[name]
    set_keys = {
        Thresholds.model_fields[f].alias
        for f in profile.block.model_fields_set
        if getattr(profile.block, f) is not None
    }
    assert set_keys
    assert set_keys <= set(profile.sources), set_keys - set(profile.sources)


def test_profiles_order_by_tightness() -> None:
    fp32 = PROFILES[ProfileName.FP32_CROSS_FRAMEWORK].block
    bf16 = PROFILES[ProfileName.BF16_KERNEL].block
    strict = PROFILES[ProfileName.STRICT].block
    assert strict.max_mean_kl == 0.0
    assert fp32.max_mean_kl is not None
    assert bf16.max_mean_kl is not None
    assert fp32.max_mean_kl < bf16.max_mean_kl
    assert fp32.min_hidden_cosine_p1 is not None
    assert bf16.min_hidden_cosine_p1 is not None
    assert fp32.min_hidden_cosine_p1 > bf16.min_hidden_cosine_p1


def test_explicit_thresholds_override_and_null_switches_off() -> None:
    explicit = Thresholds.model_validate({"maxMeanKl": 5e-4, "minHiddenCosineP1": None})
    resolved = resolve_thresholds(ProfileName.BF16_KERNEL, explicit)
    assert resolved.max_mean_kl == 5e-4
    assert resolved.min_hidden_cosine_p1 is None
    assert resolved.max_hidden_rel_l2_p99 == 5e-2  # untouched keys keep the profile's value


def test_thresholds_refuse_unknown_keys_and_out_of_range_values() -> None:
    with pytest.raises(ValueError, match="maxKl"):
        Thresholds.model_validate({"maxKl": 1.0})
    with pytest.raises(ValueError, match="minTokenMatchRate"):
        Thresholds.model_validate({"minTokenMatchRate": 1.5})


@pytest.mark.parametrize(
    ("baseline", "candidate", "expected"),
    [
        ({}, {"engine_version": "0.33.0"}, ProfileName.BF16_KERNEL),
        ({}, {"dtype": "float16"}, ProfileName.DTYPE_CHANGE),
        (
            {"dtype": "float32", "engine": "transformers"},
            {"dtype": "float32", "engine": "mindformers"},
            ProfileName.FP32_CROSS_FRAMEWORK,
        ),
        ({}, {"engine": "mindformers"}, ProfileName.GPU_TO_ASCEND_BF16),
        ({}, {}, ProfileName.BF16_KERNEL),  # never strict by guess
    ],
)
def test_suggest_profile(
    baseline: dict[str, str], candidate: dict[str, str], expected: ProfileName
) -> None:
    name, why = suggest_profile(meta(**baseline), meta(**candidate))
    assert name == expected
    assert why
