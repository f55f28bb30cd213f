"""A calibration's pair reports read as per-family noise, and the per-layer band.

Pure: the pair reports `calibration.noise.pair_report` writes (camelCase paths) in, the
families `parity.calibrated` derives limits from out; and the band a failed check's layers
are localised against, from the per-layer self noise a revision keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from infergate.parity.calibrated import K_LINEAR, FamilyNoise, ModelNoise, NoiseFamily

_PATHS: Final[Mapping[NoiseFamily, str]] = {
    NoiseFamily.KL_MEAN: "logprobs.meanKl",
    NoiseFamily.KL_P99: "logprobs.klP99",
    NoiseFamily.SAME_TOP: "logprobs.sameTopRate",
    NoiseFamily.FORK_MARGIN: "tokens.divergenceLogprobGapMax",
    NoiseFamily.HIDDEN_REL_L2: "hidden.relL2P99",
    NoiseFamily.HIDDEN_COSINE: "hidden.cosineP1",
    NoiseFamily.DECODE_SELF: "decode.candidateSelfMeanAbs",
    NoiseFamily.DECODE_EXCESS: "decode.excess",
}


def family_noise(reports: Sequence[Mapping[str, object]]) -> dict[NoiseFamily, FamilyNoise]:
    """Each family's worst noise over `reports` (each `{"label", "noise": {path: {...}}}`)."""
    out: dict[NoiseFamily, FamilyNoise] = {}
    for family, path in _PATHS.items():
        worst: float | None = None
        seen: float | None = 0.0
        bounded, labels = True, []
        for report in reports:
            table = report.get("noise")
            metric = table.get(path) if isinstance(table, Mapping) else None
            if not isinstance(metric, Mapping) or metric.get("upper") is None:
                continue
            upper = max(0.0, float(metric["upper"]))
            labels.append(str(report.get("label")))
            bounded = bounded and bool(metric.get("bounded"))
            worst = upper if worst is None else max(worst, upper)
            observed = _observed(metric)
            seen = None if seen is None or observed is None else max(seen, observed)
        if worst is not None:
            out[family] = FamilyNoise(upper=worst, observed=seen, bounded=bounded, pairs=labels)
    return out


def _observed(metric: Mapping[str, object]) -> float | None:
    """A pair report's observed value as an error (1 - rate for misses, 1 - cosine)."""
    value = metric.get("value")
    if not isinstance(value, int | float):
        return None
    error = 1.0 - float(value) if metric.get("noise") in ("miss", "shortfall") else abs(value)
    return max(0.0, float(error))


def layer_band(
    static: Sequence[float], names: Sequence[str], noise: ModelNoise | None
) -> tuple[tuple[float, ...], str]:
    """The band a failed check's layers are localised against, and where it comes from.

    k (linear: relative L2) x the baseline revision's per-layer self noise where it was
    measured on the same states, never below the static depth ramp: like every self (A/A)
    noise it only loosens (a change of kernel brings more than the revision's own noise).
    """
    layers = None if noise is None else noise.layer_rel_l2
    if layers is None:
        return tuple(static), "static depth ramp (no per-layer noise kept for the baseline)"
    if list(layers.names) != list(names) or len(layers.rel_l2) != len(static):
        return tuple(static), (
            f"static depth ramp (the kept per-layer noise has {len(layers.names)} states, "
            f"the probe {len(names)})"
        )
    band = tuple(max(s, K_LINEAR * n) for s, n in zip(static, layers.rel_l2, strict=True))
    raised = sum(1 for s, b in zip(static, band, strict=True) if b > s)
    return band, (
        f"k {K_LINEAR:g} x per-layer self noise ({layers.method}, {layers.positions} "
        f"positions; {raised} of {len(band)} states above the static depth ramp)"
    )
