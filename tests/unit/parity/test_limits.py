"""Every verdict says where its limits come from: profile, k, depth rule and depth."""

from __future__ import annotations

import math
from typing import Any

import pytest

from infergate.parity.limits import STATIC, limit_source
from infergate.parity.profiles import plan_gate
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.report.page import render_report

from .builders import SIDE_FINGERPRINTS, meta, scored_record, scored_suite

DEEP = {**SIDE_FINGERPRINTS, "model_config.num_hidden_layers": 28}
SHALLOW = {**SIDE_FINGERPRINTS, "model_config.num_hidden_layers": 2}


@pytest.mark.parametrize(
    ("fingerprints", "profile", "explicit", "layers", "scale", "shown"),
    [
        # Depth reported by both sides: scaled from the 2 layers the profile was measured at.
        (DEEP, ProfileName.BF16_KERNEL, {}, 28, {"linear": math.sqrt(14), "quadratic": 14.0},
         "scaled from 2 to 28 layers (linear x3.74, quadratic x14)"),
        # At the calibrated depth: nothing to scale, and the line says so.
        (SHALLOW, ProfileName.BF16_KERNEL, {}, 2, {}, "model depth 2 <= the 2 layers"),
        # Depth unknown (a side that does not report it): not scaled, said.
        (SIDE_FINGERPRINTS, ProfileName.DTYPE_CHANGE, {}, None, {},
         "the model's depth is not reported by both sides, so not scaled"),
        # A profile whose limits are not depth-dependent (bit-exact replay).
        (DEEP, ProfileName.STRICT, {}, 28, {}, "not scaled with depth"),
        # A limit set in the check is used as given and named.
        (DEEP, ProfileName.BF16_KERNEL, {"maxMeanKl": 2e-4}, 28,
         {"linear": math.sqrt(14), "quadratic": 14.0}, "set in the check, as given: maxMeanKl"),
    ],
)  # fmt: skip
def test_the_gate_records_where_its_limits_come_from(
    *,
    fingerprints: dict[str, Any],
    profile: ProfileName,
    explicit: dict[str, float],
    layers: int | None,
    scale: dict[str, float],
    shown: str,
) -> None:
    gate = plan_gate(
        meta(fingerprints=fingerprints),
        meta(fingerprints=fingerprints),
        profile=profile,
        explicit=Thresholds.model_validate(explicit) if explicit else None,
    )
    limits = gate.limits
    assert limits.profile == profile.value
    assert limits.source == STATIC
    assert limits.k is None  # static limits: not a multiple of measured noise
    assert limits.layers == layers
    assert limits.scale == pytest.approx(scale)
    line = limits.describe()
    assert line.startswith(f"static profile {profile.value}; k -;")
    assert shown in line, line
    if scale:
        # The factors printed are the ones the thresholds were scaled by.
        unscaled = plan_gate(meta(), meta(), profile=profile).thresholds
        if "maxMeanKl" not in explicit:
            assert gate.thresholds.max_mean_kl == pytest.approx(
                unscaled.max_mean_kl * scale["quadratic"]  # type: ignore[operator]
            )
        assert gate.thresholds.max_hidden_rel_l2_p99 == pytest.approx(
            unscaled.max_hidden_rel_l2_p99 * scale["linear"]  # type: ignore[operator]
        )


def test_a_switched_off_check_is_not_listed_as_set_in_the_check() -> None:
    source = limit_source("bf16-kernel", 2, 28, [])
    gate = plan_gate(
        meta(fingerprints=DEEP),
        meta(fingerprints=DEEP),
        profile=ProfileName.BF16_KERNEL,
        explicit=Thresholds.model_validate({"maxKlP99": None}),
    )
    assert gate.limits == source


def test_the_result_and_its_html_report_carry_the_provenance() -> None:
    from infergate.parity.compare import compare_sources
    from infergate.parity.verdict import decide

    prompts = scored_suite()
    baseline = scored_record(prompts, fingerprints=DEEP)
    candidate = scored_record(prompts, fingerprints=DEEP)
    gate = plan_gate(baseline.meta, candidate.meta, profile=ProfileName.BF16_KERNEL)
    result = compare_sources(
        baseline, candidate, gate.thresholds, gate.expected_differences, limits=gate.limits
    )
    assert result.limits == gate.limits
    html = render_report(result, decide(result), "bf16-kernel")
    assert "Limits: static profile bf16-kernel; k -; scaled from 2 to 28 layers" in html
