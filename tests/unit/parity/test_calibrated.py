"""Limits from a model's own noise: k x noise, the depth rule, the static fallback, and
Inconclusive when a profile needs a calibration it does not have."""

from __future__ import annotations

import math

import pytest

from infergate.parity.calibrated import (
    DEEPEST_MEASURED_LAYERS,
    K_LINEAR,
    K_QUADRATIC,
    CalibrationNeed,
    FamilyNoise,
    ModelNoise,
    NeedKind,
    NoiseFamily,
    calibration_need,
    derive_limits,
    provenance_lines,
)
from infergate.parity.noise_families import family_noise
from infergate.parity.profiles import resolve_thresholds
from infergate.parity.thresholds import ProfileName, Thresholds


def _noise(layers: int | None = 28, **families: float) -> ModelNoise:
    table = {
        NoiseFamily(k): FamilyNoise(upper=v, bounded=True, pairs=["aa"])
        for k, v in families.items()
    }
    return ModelNoise(
        model="m", engine="vllm", dtype="bfloat16", layers=layers, suite_digest="sha256:x",
        prompts=64, measured="2026-12-07T00:00:00Z", method="test", self_noise=table,
        changes={"dtype float32": {NoiseFamily.KL_MEAN: FamilyNoise(upper=5e-5, bounded=True, pairs=["bf16-vs-fp32"])}},
    )  # fmt: skip


STATIC = Thresholds(
    max_mean_kl=1e-3, max_kl_p99=1e-2, min_same_top_rate=0.985, max_hidden_rel_l2_p99=0.05,
    min_hidden_cosine_p1=0.99, max_divergence_logprob_gap=0.1,
)  # fmt: skip
SELF = CalibrationNeed(NeedKind.SELF)
TIGHT = Thresholds(
    max_mean_kl=1e-9, max_kl_p99=1e-9, min_same_top_rate=0.99999, max_hidden_rel_l2_p99=1e-6,
    min_hidden_cosine_p1=0.9999999, max_divergence_logprob_gap=1e-4,
    max_decode_self_delta=1e-6, max_decode_excess=1e-6,
)  # fmt: skip
"""Static limits tighter than k x the noise in these tables: self noise loosens them."""


@pytest.mark.parametrize(
    ("family", "upper", "key", "expected"),
    [
        ("klMean", 4e-6, "max_mean_kl", K_QUADRATIC * 4e-6),
        ("klP99", 2e-4, "max_kl_p99", K_QUADRATIC * 2e-4),
        ("sameTopMiss", 3e-4, "min_same_top_rate", 1 - K_LINEAR * 3e-4),
        ("hiddenRelL2P99", 6e-3, "max_hidden_rel_l2_p99", K_LINEAR * 6e-3),
        ("hiddenCosineShortfall", 2e-5, "min_hidden_cosine_p1", 1 - K_QUADRATIC * 2e-5),
        ("forkMargin", 0.02, "max_divergence_logprob_gap", K_LINEAR * 0.02),
        ("decodeSelfDelta", 5e-3, "max_decode_self_delta", K_LINEAR * 5e-3),
        ("decodeExcess", 1e-3, "max_decode_excess", K_LINEAR * 1e-3),
    ],
)
def test_each_family_becomes_k_times_its_noise(
    family: str, upper: float, key: str, expected: float
) -> None:
    derived = derive_limits(
        TIGHT, need=SELF, noise=_noise(**{family: upper}), layers=28, static_layers=2
    )
    assert getattr(derived.thresholds, key) == pytest.approx(expected)
    item = next(p for p in derived.provenance if p.key == key)
    assert (item.source, item.noise, item.depth_factor) == ("measured", upper, 1.0)
    assert derived.inconclusive is None


def test_noise_measured_at_another_depth_is_scaled_by_the_one_depth_rule() -> None:
    derived = derive_limits(
        TIGHT, need=SELF, noise=_noise(layers=7, klMean=1e-6, hiddenRelL2P99=0.01),
        layers=28, static_layers=2,
    )  # fmt: skip
    assert derived.thresholds.max_mean_kl == pytest.approx(K_QUADRATIC * 1e-6 * 4)
    assert derived.thresholds.max_hidden_rel_l2_p99 == pytest.approx(K_LINEAR * 0.01 * 2)


def test_self_noise_loosens_a_static_limit_but_never_tightens_it() -> None:
    # k x A/A noise below the static limit: a kernel change brings more than A/A noise.
    derived = derive_limits(
        STATIC, need=SELF, noise=_noise(klMean=1e-6), layers=28, static_layers=2
    )
    assert derived.thresholds.max_mean_kl == STATIC.max_mean_kl
    item = next(p for p in derived.provenance if p.key == "max_mean_kl")
    assert item.source == "measured"
    assert item.note.startswith("k x self noise is tighter than the static limit")
    # The expected change's own noise (dtype pair) sets the limit as measured, either way.
    change = CalibrationNeed(NeedKind.CHANGE, "dtype float32")
    derived = derive_limits(STATIC, need=change, noise=_noise(), layers=28, static_layers=2)
    assert derived.thresholds.max_mean_kl == pytest.approx(K_QUADRATIC * 5e-5)


def test_without_noise_the_static_limits_stay_and_say_so() -> None:
    derived = derive_limits(STATIC, need=SELF, noise=None, layers=28, static_layers=2)
    assert derived.thresholds == STATIC
    assert {p.source for p in derived.provenance} == {"static"}
    kl = next(p for p in derived.provenance if p.key == "max_mean_kl")
    assert kl.depth_factor == pytest.approx(14.0)
    assert derived.inconclusive is None


def test_bit_exact_noise_keeps_the_static_limit() -> None:
    derived = derive_limits(STATIC, need=SELF, noise=_noise(klMean=0.0), layers=28, static_layers=2)
    assert derived.thresholds.max_mean_kl == STATIC.max_mean_kl
    assert "bit-exact" in next(p for p in derived.provenance if p.key == "max_mean_kl").note


def test_a_rate_with_no_miss_observed_carries_no_scale() -> None:
    # Zero misses over the suite: the Wilson bound (3e-4 here) measures the suite's size,
    # not the model's noise, so the static limit stays.
    table = {
        NoiseFamily.SAME_TOP: FamilyNoise(upper=3e-4, observed=0.0, bounded=True, pairs=["aa"])
    }
    noise = _noise().model_copy(update={"self_noise": table})
    derived = derive_limits(STATIC, need=SELF, noise=noise, layers=28, static_layers=2)
    assert derived.thresholds.min_same_top_rate == STATIC.min_same_top_rate


def test_explicit_limits_are_never_replaced() -> None:
    derived = derive_limits(
        STATIC, need=SELF, noise=_noise(klMean=1e-6), layers=28, static_layers=2,
        explicit={"max_mean_kl"},
    )  # fmt: skip
    assert derived.thresholds.max_mean_kl == STATIC.max_mean_kl


def test_dtype_change_uses_the_expected_change_pair_not_self_noise() -> None:
    need = calibration_need(ProfileName.DTYPE_CHANGE, "float32", 28)
    derived = derive_limits(
        STATIC, need=need, noise=_noise(klMean=1e-7), layers=28, static_layers=28
    )
    assert derived.thresholds.max_mean_kl == pytest.approx(K_QUADRATIC * 5e-5)
    missing = calibration_need(ProfileName.DTYPE_CHANGE, "float16", 28)
    fallback = derive_limits(
        STATIC, need=missing, noise=_noise(klMean=1e-7), layers=28, static_layers=28
    )
    assert fallback.thresholds == STATIC
    assert "no 'dtype float16' pair kept" in fallback.calibration


@pytest.mark.parametrize(
    ("profile", "layers", "noise", "inconclusive"),
    [
        (ProfileName.BF16_KERNEL, 28, None, False),
        (ProfileName.BF16_KERNEL, None, None, False),
        (ProfileName.BF16_KERNEL, DEEPEST_MEASURED_LAYERS + 1, None, True),
        (ProfileName.BF16_KERNEL, 80, _noise(layers=80, klMean=1e-5), False),
        (ProfileName.DTYPE_CHANGE, 80, _noise(layers=80, klMean=1e-5), False),
        (ProfileName.GPU_TO_ASCEND_BF16, 64, None, True),
        (ProfileName.STRICT, 80, None, False),
        (ProfileName.FP32_CROSS_FRAMEWORK, 80, None, False),
    ],
)
def test_a_profile_that_needs_a_calibration_it_lacks_is_inconclusive(
    profile: ProfileName, layers: int | None, noise: ModelNoise | None, inconclusive: bool
) -> None:
    need = calibration_need(profile, "float32", layers)
    derived = derive_limits(
        resolve_thresholds(profile), need=need, noise=noise, layers=layers, static_layers=2
    )
    assert (derived.inconclusive is not None) is inconclusive
    if inconclusive:
        assert derived.inconclusive is not None
        assert f"{layers} layers" in derived.inconclusive
        assert any(
            line.startswith("Inconclusive: calibration needed")
            for line in provenance_lines(derived)
        )


def test_provenance_names_noise_k_and_depth() -> None:
    derived = derive_limits(
        TIGHT, need=SELF, noise=_noise(layers=7, klMean=1e-6), layers=28, static_layers=2
    )
    lines = provenance_lines(derived)
    assert any(
        line.startswith("max_mean_kl 3.6e-05 = k 9 x noise 1e-06, depth x4 (7 -> 28 layers)")
        for line in lines
    )
    assert any(
        line.startswith(
            "max_hidden_rel_l2_p99 1e-06: static profile limit, depth x3.74 (2 -> 28 layers)"
        )
        for line in lines
    )
    assert lines[-1].startswith("k: k = 3 for linear errors")


def test_family_noise_takes_the_worst_pair_and_reads_shortfalls_and_misses() -> None:
    reports = [
        {"label": "concurrency 8", "noise": {
            "logprobs.meanKl": {"value": 1e-6, "upper": 2e-6, "bounded": True, "noise": "error"},
            "hidden.cosineP1": {"value": 0.99999, "upper": 1e-5, "bounded": False, "noise": "shortfall"}}},
        {"label": "batch 1", "noise": {
            "logprobs.meanKl": {"value": 2e-6, "upper": 3e-6, "bounded": True, "noise": "error"},
            "logprobs.sameTopRate": {"value": 1.0, "upper": 4e-4, "bounded": True, "noise": "miss"}}},
    ]  # fmt: skip
    table = family_noise(reports)
    assert table[NoiseFamily.KL_MEAN] == FamilyNoise(
        upper=3e-6, observed=2e-6, bounded=True, pairs=["concurrency 8", "batch 1"]
    )
    assert table[NoiseFamily.SAME_TOP].observed == 0.0
    assert table[NoiseFamily.HIDDEN_COSINE].observed == pytest.approx(1e-5)
    assert table[NoiseFamily.HIDDEN_COSINE].bounded is False
    assert table[NoiseFamily.SAME_TOP].upper == 4e-4
    assert NoiseFamily.FORK_MARGIN not in table
    assert not math.isnan(table[NoiseFamily.KL_MEAN].upper)


# -- the per-layer band of a failed check's localisation ---------------------------------

LAYER_NAMES = ("embeddings", "layer 0", "layer 1", "final norm")
LAYER_STATIC = (1e-3, 2e-3, 5e-3, 1e-2)


def _noise_with_layers(rel_l2: list[float], names: tuple[str, ...] = LAYER_NAMES) -> ModelNoise:
    from infergate.parity.calibrated import LayerNoise

    return ModelNoise(
        revision="aaaaaaaaaa", model="m", engine="mindformers", dtype="float16", layers=2,
        suite_digest="d", prompts=32, measured="2026-12-07T00:00:00+00:00", method="test",
        self_noise={},
        layer_rel_l2=LayerNoise(names=list(names), rel_l2=rel_l2, positions=96, method="A/A"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("noise", "band", "source"),
    [
        # Nothing kept: the static depth ramp.
        (None, LAYER_STATIC, "static depth ramp (no per-layer noise"),
        # Kept for another model shape: the ramp, and why.
        (_noise_with_layers([0.0] * 3, LAYER_NAMES[:3]), LAYER_STATIC, "has 3 states, the probe 4"),
        # A/A noise far under the ramp: self noise only loosens, the ramp stays.
        (_noise_with_layers([1e-5] * 4), LAYER_STATIC, "0 of 4 states above"),
        # Noisy deep layers (k 3 x 4e-3 = 1.2e-2 > 5e-3 and 1e-2): raised there only.
        (_noise_with_layers([1e-5, 1e-4, 4e-3, 4e-3]), (1e-3, 2e-3, 1.2e-2, 1.2e-2),
         "2 of 4 states above"),
    ],
)  # fmt: skip
def test_the_layer_band_is_k_times_the_kept_per_layer_noise_never_below_the_ramp(
    noise: ModelNoise | None, band: tuple[float, ...], source: str
) -> None:
    from infergate.parity.noise_families import layer_band

    found, why = layer_band(LAYER_STATIC, LAYER_NAMES, noise)
    assert found == pytest.approx(band)
    assert source in why


def test_a_pair_reports_decode_noise_for_its_families() -> None:
    from infergate.calibration.noise import pair_report

    estimate = {"value": 1e-5, "lower": 0.0, "upper": 4e-3, "evidence": 36, "unit": "prompts",
                "method": "prompt means"}  # fmt: skip
    excess = {**estimate, "value": -2e-4, "upper": None}
    result = {
        "baseline": {}, "candidate": {}, "prompts": [],
        "metrics": {"prompts": 36, "decode": {"candidateSelfMeanAbs": estimate, "excess": excess}},
    }  # fmt: skip
    report = pair_report("aa", result, [])
    table = family_noise([report])
    assert table[NoiseFamily.DECODE_SELF] == FamilyNoise(
        upper=4e-3, observed=1e-5, bounded=True, pairs=["aa"]
    )
    # No upper bound: the signed excess stands as a point, at its magnitude (noise in the
    # excess goes either way; a limit of k x 0 would fail any excess at all).
    assert table[NoiseFamily.DECODE_EXCESS].bounded is False
    assert table[NoiseFamily.DECODE_EXCESS].upper == pytest.approx(2e-4)


def _with_pair(stable_dtype: str, other: str, **families: float) -> ModelNoise:
    pair = {
        NoiseFamily(k): FamilyNoise(upper=v, bounded=True, pairs=[f"{other} vs {stable_dtype}"])
        for k, v in families.items()
    }
    return _noise(klMean=1e-9, decodeExcess=1e-9).model_copy(
        update={"dtype": stable_dtype, "changes": {f"dtype {other}": pair}}
    )


@pytest.mark.parametrize(("stable", "other"), [("bfloat16", "float32"), ("float32", "bfloat16")])
def test_a_bf16_kernel_check_is_judged_against_the_bf16_vs_fp32_envelope(
    stable: str, other: str
) -> None:
    noise = _with_pair(stable, other, klMean=6e-5, hiddenRelL2P99=0.012, decodeExcess=1.5e-4)
    need = calibration_need(ProfileName.BF16_KERNEL, "bfloat16", 28)
    derived = derive_limits(STATIC, need=need, noise=noise, layers=28, static_layers=28)
    # The output families: k x the pair, tighter than the static limits, no self floor.
    assert derived.thresholds.max_mean_kl == pytest.approx(K_QUADRATIC * 6e-5)
    assert derived.thresholds.max_hidden_rel_l2_p99 == pytest.approx(K_LINEAR * 0.012)
    assert f"'dtype {other}' pair of m as the bf16 envelope" in derived.calibration
    # The decode families compare a side with itself: self noise, which only loosens.
    assert derived.thresholds.max_decode_excess == STATIC.max_decode_excess


def test_without_the_pair_a_bf16_kernel_check_keeps_the_self_floor() -> None:
    need = calibration_need(ProfileName.BF16_KERNEL, "bfloat16", 28)
    fp16 = _with_pair("bfloat16", "float16", klMean=6e-5)
    derived = derive_limits(STATIC, need=need, noise=fp16, layers=28, static_layers=28)
    assert derived.thresholds == STATIC
    assert "no bfloat16-vs-float32 pair kept" in derived.calibration
    other_profile = calibration_need(ProfileName.GPU_TO_ASCEND_BF16, "bfloat16", 28)
    pair = _with_pair("bfloat16", "float32", klMean=6e-5)
    kept = derive_limits(STATIC, need=other_profile, noise=pair, layers=28, static_layers=28)
    assert kept.thresholds.max_mean_kl == STATIC.max_mean_kl


def test_the_envelope_only_tightens_a_static_limit() -> None:
    """The pair bounds a benign bf16 kernel change from above: where k x it is looser than
    the static limit (a shallow model whose static limits were measured on itself), the
    static limit stays and the provenance says why."""
    noise = _with_pair("bfloat16", "float32", klMean=1e-3, hiddenRelL2P99=0.004)
    need = calibration_need(ProfileName.BF16_KERNEL, "bfloat16", 2)
    derived = derive_limits(STATIC, need=need, noise=noise, layers=2, static_layers=2)
    assert derived.thresholds.max_mean_kl == STATIC.max_mean_kl
    assert derived.thresholds.max_hidden_rel_l2_p99 == pytest.approx(K_LINEAR * 0.004)
    kl = next(p for p in derived.provenance if p.key == "max_mean_kl")
    assert "tighter than k x the envelope, and stays" in kl.note


@pytest.mark.parametrize("profile", [ProfileName.BF16_KERNEL, ProfileName.GPU_TO_ASCEND_BF16])
def test_a_record_keeping_only_a_change_pair_is_not_a_self_calibration(
    profile: ProfileName,
) -> None:
    """A Passed dtype-change check (or `calibrate --also-dtype` without an A/A) keeps a
    record whose self noise is empty: a deep model's check that needs its self noise
    stays Inconclusive on it, and its limits are not loosened by an empty table."""
    pair = _with_pair("bfloat16", "float32", klMean=6e-5).model_copy(update={"self_noise": {}})
    layers = DEEPEST_MEASURED_LAYERS + 8
    deep = calibration_need(profile, "bfloat16", layers)
    derived = derive_limits(TIGHT, need=deep, noise=pair, layers=layers, static_layers=layers)
    assert derived.inconclusive is not None
    assert "no self noise measured for the baseline's revision" in derived.calibration
    assert "dtype float32" in derived.calibration
    assert derived.thresholds.max_decode_excess == TIGHT.max_decode_excess
    enveloped = profile is ProfileName.BF16_KERNEL
    kl = next(p for p in derived.provenance if p.key == "max_mean_kl")
    assert kl.source == ("measured" if enveloped else "static")
