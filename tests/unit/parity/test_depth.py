"""One depth rule for profiles and calibration, checked against the measured anchor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from infergate.calibration.proposals import depth_factor, propose
from infergate.cli import main
from infergate.parity.depth import DEPTH_SCALED, NoiseGrowth, depth_scale, scale_limit
from infergate.parity.profiles import PROFILES, resolve_thresholds
from infergate.parity.thresholds import ProfileName
from infergate.recordio import RecordWriter
from tests.unit.parity.builders import meta, scored_suite

# experiments/RESULTS.md: bf16 vs fp32 at Qwen2.5-7B shape, after 2 and after 28 layers.
REL_L2_P99 = (0.0179, 0.0678)
ONE_MINUS_COS_P1 = (1.0 - 0.99984, 1.0 - 0.99771)
LOGIT_KL = (1.8e-4, 2.3e-3)


def test_linear_errors_grow_like_sqrt_depth_and_quadratic_ones_like_depth() -> None:
    assert depth_scale(NoiseGrowth.LINEAR, 28, 2) == pytest.approx(math.sqrt(14))
    assert depth_scale(NoiseGrowth.QUADRATIC, 28, 2) == pytest.approx(14)
    assert depth_scale(NoiseGrowth.QUADRATIC, 2, 28) == 1.0  # never below the calibrated


def test_the_rule_matches_the_measured_anchor() -> None:
    linear = depth_scale(NoiseGrowth.LINEAR, 28, 2)
    quadratic = depth_scale(NoiseGrowth.QUADRATIC, 28, 2)
    assert REL_L2_P99[1] / REL_L2_P99[0] == pytest.approx(linear, rel=0.05)
    assert ONE_MINUS_COS_P1[1] / ONE_MINUS_COS_P1[0] == pytest.approx(quadratic, rel=0.05)
    assert LOGIT_KL[1] / LOGIT_KL[0] == pytest.approx(quadratic, rel=0.1)


def test_every_logprob_limit_that_grows_with_depth_is_scaled() -> None:
    block = PROFILES[ProfileName.BF16_KERNEL].block
    deep = resolve_thresholds(ProfileName.BF16_KERNEL, layers=28)
    assert block.max_mean_kl is not None
    assert block.max_kl_p99 is not None
    assert block.min_same_top_rate is not None
    assert block.max_divergence_logprob_gap is not None
    assert deep.max_mean_kl == pytest.approx(block.max_mean_kl * 14)
    assert deep.max_kl_p99 == pytest.approx(block.max_kl_p99 * 14)
    assert deep.min_same_top_rate == pytest.approx(
        1 - (1 - block.min_same_top_rate) * math.sqrt(14)
    )
    assert deep.max_divergence_logprob_gap == pytest.approx(
        block.max_divergence_logprob_gap * math.sqrt(14)
    )
    # Fork rates and ratios are not depth noise: left as calibrated.
    assert deep.max_illegitimate_divergence_rate == block.max_illegitimate_divergence_rate
    assert deep.max_long_to_short_kl_ratio == block.max_long_to_short_kl_ratio
    assert resolve_thresholds(ProfileName.BF16_KERNEL, layers=2) == block


def test_calibration_and_profiles_scale_alike() -> None:
    noise = {
        "label": "bf16-vs-fp32",
        "noise": {
            "logprobs.meanKl": {"upper": 1e-5, "bounded": True},
            "hidden.relL2P99": {"upper": 4e-3, "bounded": True},
        },
    }
    at_two = {p["key"]: p["value"] for p in propose([noise], 3.0)}
    at_28 = {p["key"]: p["value"] for p in propose([noise], 3.0, depth_factor(28, 2))}
    for key, field in (
        ("maxMeanKl", "max_mean_kl"),
        ("maxHiddenRelL2P99", "max_hidden_rel_l2_p99"),
    ):
        assert field in DEPTH_SCALED
        assert at_28[key] == pytest.approx(scale_limit(field, at_two[key], 28, 2), rel=1e-2)


def test_calibrate_scales_from_the_records_own_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = scored_suite(6, long=0)
    dirs = []
    for name in ("base", "cand"):
        dirs.append(tmp_path / name)
        with RecordWriter(dirs[-1], meta()) as writer:
            for p in prompts:
                writer.add(p)
    pair = f"aa={dirs[0]}:{dirs[1]}"
    assert main(["parity", "calibrate", "--pair", pair, "--target-layers", "28"]) == 2
    assert "--reference-layers" in capsys.readouterr().err
    out = tmp_path / "cal.json"
    assert main(["parity", "calibrate", "--pair", pair, "--target-layers", "28",
                 "--reference-layers", "2", "--json", str(out)]) == 0  # fmt: skip
    assert "x3.74 for 28 layers" in out.read_text()
