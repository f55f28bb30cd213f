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
    assert resolved.max_hidden_rel_l2_p99 == 3e-2  # untouched keys keep the profile's value


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
        ({"engine": "transformers"}, {"engine": "vllm"}, ProfileName.BF16_KERNEL),
    ],
)
def test_suggest_profile(
    baseline: dict[str, str], candidate: dict[str, str], expected: ProfileName
) -> None:
    name, why = suggest_profile(meta(**baseline), meta(**candidate))
    assert name == expected
    assert why


@pytest.mark.parametrize("name", list(ProfileName))
def test_every_profile_states_its_minimum_evidence_and_confidence(name: ProfileName) -> None:
    block = PROFILES[name].block
    assert block.confidence == 0.95
    assert block.min_prompts is not None
    assert block.min_prompts >= 32
    assert block.min_long_prompts is not None
    assert block.min_scored_steps is not None


@pytest.mark.parametrize("name", list(ProfileName))
def test_every_reported_metric_is_decided_or_said_to_be_reported_only(name: ProfileName) -> None:
    profile = PROFILES[name]
    decided = {
        Thresholds.model_fields[f].alias
        for f in Thresholds.model_fields
        if getattr(profile.block, f) is not None
    }
    assert decided
    assert profile.reported_only


def test_hidden_states_off_takes_every_hidden_threshold_with_it() -> None:
    from infergate.parity.profiles import HIDDEN_KEYS, disabled_checks

    resolved = resolve_thresholds(ProfileName.BF16_KERNEL, hidden_states=False)
    assert all(getattr(resolved, k) is None for k in HIDDEN_KEYS)
    why = disabled_checks(ProfileName.BF16_KERNEL, hidden_states=False)
    assert "hiddenStates.enabled: false" in why["maxHiddenRelL2P99"]
    assert "maxMeanKl" not in why


def test_regression_allowances_derive_from_the_limits_unless_set() -> None:
    from infergate.parity.profiles import resolve_regression
    from infergate.parity.thresholds import RegressionTolerance

    limits = resolve_thresholds(ProfileName.BF16_KERNEL)
    derived = resolve_regression(limits)
    assert derived.max_mean_kl_increase == pytest.approx(0.25 * 1e-4)
    assert derived.max_same_top_rate_drop == pytest.approx(0.25 * 0.015)
    assert derived.max_token_match_rate_drop is None  # no limit: not tested
    explicit = RegressionTolerance.model_validate({"maxMeanKlIncrease": 0.0})
    assert resolve_regression(limits, explicit).max_mean_kl_increase == 0.0
