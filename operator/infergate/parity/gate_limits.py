"""A gate's limits from the baseline revision's kept noise: the one derivation the runner
(`runner.steps.gate.plan_limits`, a shadow check) and `infergate parity compare --noise`
judge by."""

from __future__ import annotations

from dataclasses import replace

from infergate.parity.calibrated import (
    DerivedLimits,
    ModelNoise,
    calibration_need,
    derive_limits,
    with_measured,
)
from infergate.parity.profiles import PROFILES, Gate
from infergate.parity.thresholds import Thresholds


def noise_limits(
    gate: Gate, candidate_dtype: str, noise: ModelNoise | None, explicit: Thresholds | None
) -> DerivedLimits:
    """The gate's limits from the baseline revision's kept noise (k x noise,
    `parity.calibrated.derive_limits`), or its static ones, with their provenance and
    whether the check needs a calibration it has not got. The one derivation the runner
    (`runner.steps.gate.plan_limits`, a shadow check) and `infergate parity compare
    --noise` both judge by; keys set in `explicit` stay as set."""
    return derive_limits(
        gate.thresholds,
        need=calibration_need(gate.profile, candidate_dtype, gate.layers),
        noise=noise,
        layers=gate.layers,
        static_layers=PROFILES[gate.profile].calibrated_layers,
        explicit=explicit.model_fields_set if explicit is not None else (),
    )


def with_limits(gate: Gate, derived: DerivedLimits) -> Gate:
    """The gate judged under `derived` (`noise_limits`): its thresholds and provenance."""
    return replace(gate, thresholds=derived.thresholds, limits=with_measured(gate.limits, derived))
