"""Limits from a model's own measured noise: k x noise per metric family, and their provenance.

A stable revision's A/A noise (self against self at another batch size or concurrency;
`ModelNoise.self_noise`) and, where a profile judges an expected change, the noise of
that change measured on the same weights (`ModelNoise.changes`, e.g. `dtype float32`)
is kept with its golden record (`infergate.golden.noise`). `derive_limits` turns it
into the check's limits: each metric family's limit is k x its noise's upper bound,
scaled to the judged model's depth by the one depth rule (`parity.depth`) when the noise
was measured at another depth. Without a calibration the profile's static limits stay
(already depth-scaled by `profiles.resolve_thresholds`), except where the profile needs
one (`calibration_need`): then the decision is Inconclusive, with the reason.

k, one per family (stated in `FAMILIES`, with the source):
- linear errors (relative L2, same-top miss, fork margin): k = 3. Benign noise of one
  kind varies up to ~2x between kernels and runs (bf16 vs fp32 KL 1.26e-5 / 1.47e-5 with
  and without AMX; fp32 across frameworks 4.6e-7 / 5.6e-7 relative: experiments/
  RESULTS.md), so 3x the upper bound keeps a benign rerun inside; and 3 is above the
  2.49 standard errors (z 0.05 + z 0.2) PARITY.md's TensorRT-LLM anchor uses for a
  one-sided test at 80% power.
- quadratic errors (mean KL, KL P99, 1 - cosine): k^2 = 9, since they grow as the square
  of the perturbation (PARITY.md: KL grows roughly with the square of the hidden error),
  so a 3x larger perturbation shows as 9x.
Measured on the fixture (experiments/gate_bench_calibration.md, 68 prompts, 2026-12-03):
bf16 kernel A/A-like noise (AVX2 against default kernels) mean KL <= 3.84e-6, so 9 x
gives 3.5e-5, 5x below the harmful final norm x1.02's mean KL 1.72e-4 (its lower 95%
bound, experiments/GATE_BENCH.md); the same-top miss <= 2.88e-4, x3 = 8.6e-4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pydantic import Field

from infergate.parity.depth import NoiseGrowth, depth_scale
from infergate.parity.limits import LimitSource
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.parity.wire import WireModel

K_LINEAR: Final = 3.0
K_QUADRATIC: Final = K_LINEAR**2
K_SOURCE: Final = (
    "k = 3 for linear errors: benign reruns of one kind vary up to ~2x (experiments/"
    "RESULTS.md) and 3 exceeds the 2.49 standard errors of PARITY.md's TensorRT-LLM anchor "
    "(alpha 0.05, beta 0.2); k^2 = 9 for KL and 1 - cosine, quadratic in the perturbation "
    "(PARITY.md)"
)
DEEPEST_MEASURED_LAYERS: Final = 28
"""The deepest model the depth rule was measured at (parity.depth's anchor: Qwen2.5-7B
shape, 28 layers). Static limits scaled past it are an extrapolation."""


class NoiseFamily(StrEnum):
    """A metric family whose noise a calibration keeps."""

    KL_MEAN = "klMean"
    KL_P99 = "klP99"
    SAME_TOP = "sameTopMiss"
    FORK_MARGIN = "forkMargin"
    HIDDEN_REL_L2 = "hiddenRelL2P99"
    HIDDEN_COSINE = "hiddenCosineShortfall"
    DECODE_SELF = "decodeSelfDelta"
    DECODE_EXCESS = "decodeExcess"


class FamilyNoise(WireModel):
    """One family's noise: the upper bound of the error measure, and what it came from."""

    upper: float = Field(ge=0, description="Upper bound (or point) of the noise, as an error.")
    observed: float | None = Field(
        default=None, ge=0, description="The noise observed (as an error), before its bound."
    )
    bounded: bool = Field(description="True: a confidence bound; False: a point value.")
    pairs: list[str] = Field(description="The measured pairs it is the worst of.")


class LayerNoise(WireModel):
    """Self noise of every layer's hidden states (A/A through the side's layer probe)."""

    names: list[str] = Field(description="The states, embeddings first, final norm last.")
    rel_l2: list[float] = Field(description="Relative L2 P99 over positions, per state.")
    positions: int = Field(ge=1, description="Positions compared per state.")
    method: str = Field(description="The pair measured.")


class ModelNoise(WireModel):
    """A revision's own measured noise, kept beside its golden record."""

    format: str = "infergate.io/model-noise"
    version: int = 1
    revision: str | None = None
    model: str
    engine: str
    dtype: str
    layers: int | None = Field(description="Depth of the model measured (None: unknown).")
    suite_digest: str
    prompts: int
    measured: str = Field(description="When it was measured (ISO 8601, UTC).")
    method: str = Field(description="How: the pairs recorded, by whom.")
    self_noise: dict[NoiseFamily, FamilyNoise] = Field(
        description="Self against self (other batch sizes, concurrency)."
    )
    changes: dict[str, dict[NoiseFamily, FamilyNoise]] = Field(
        default_factory=dict,
        description="An expected change's noise on the same weights, by change (`dtype X`).",
    )
    layer_rel_l2: LayerNoise | None = Field(
        default=None,
        description="Per-layer self noise, where the revision's layer probe answers.",
    )


@dataclass(frozen=True)
class FamilyRule:
    """How one family's noise becomes one threshold."""

    family: NoiseFamily
    key: str
    """Threshold field (snake_case)."""
    growth: NoiseGrowth
    form: str
    """'max': k x noise; 'min': 1 - k x noise (rates and cosines, noise as a shortfall)."""

    @property
    def k(self) -> float:
        return K_LINEAR if self.growth is NoiseGrowth.LINEAR else K_QUADRATIC


FAMILIES: Final[tuple[FamilyRule, ...]] = (
    FamilyRule(NoiseFamily.KL_MEAN, "max_mean_kl", NoiseGrowth.QUADRATIC, "max"),
    FamilyRule(NoiseFamily.KL_P99, "max_kl_p99", NoiseGrowth.QUADRATIC, "max"),
    FamilyRule(NoiseFamily.SAME_TOP, "min_same_top_rate", NoiseGrowth.LINEAR, "min"),
    FamilyRule(NoiseFamily.FORK_MARGIN, "max_divergence_logprob_gap", NoiseGrowth.LINEAR, "max"),
    FamilyRule(NoiseFamily.HIDDEN_REL_L2, "max_hidden_rel_l2_p99", NoiseGrowth.LINEAR, "max"),
    FamilyRule(NoiseFamily.HIDDEN_COSINE, "min_hidden_cosine_p1", NoiseGrowth.QUADRATIC, "min"),
    FamilyRule(NoiseFamily.DECODE_SELF, "max_decode_self_delta", NoiseGrowth.LINEAR, "max"),
    FamilyRule(NoiseFamily.DECODE_EXCESS, "max_decode_excess", NoiseGrowth.LINEAR, "max"),
)


class NeedKind(StrEnum):
    NONE = "none"
    """Static limits only (bit-exact profiles, cross-framework fp32)."""
    SELF = "self"
    """Self noise when kept, else static."""
    CHANGE = "change"
    """The expected change's noise on the same weights when kept, else static."""
    ENVELOPE = "envelope"
    """A bf16 kernel change: the same weights' bfloat16-vs-float32 pair bounds it, where
    kept (`ENVELOPE_FAMILIES`); self noise, as for SELF, for the rest and without it."""


@dataclass(frozen=True)
class CalibrationNeed:
    kind: NeedKind
    change: str | None = None
    """Which change's noise (`dtype float32`), for NeedKind.CHANGE."""
    required: str | None = None
    """Why static limits cannot stand in (None: they can)."""

    @property
    def uses_self_noise(self) -> bool:
        """Whether a kept self noise (A/A) changes these limits (`_noise_set`)."""
        return self.kind in (NeedKind.SELF, NeedKind.ENVELOPE)


def calibration_need(
    profile: ProfileName, candidate_dtype: str, layers: int | None
) -> CalibrationNeed:
    """What calibration a check under `profile` uses, and whether it cannot do without.

    Static limits are the fallback up to the deepest depth the depth rule was measured
    at; past it they are an extrapolation, so a model deeper than that needs its own
    noise measured.
    """
    if profile in (ProfileName.STRICT, ProfileName.FP32_CROSS_FRAMEWORK):
        return CalibrationNeed(NeedKind.NONE)
    required = None
    if layers is not None and layers > DEEPEST_MEASURED_LAYERS:
        required = (
            f"the model has {layers} layers, deeper than the {DEEPEST_MEASURED_LAYERS} the "
            "static limits' depth rule was measured at (parity.depth)"
        )
    if profile is ProfileName.DTYPE_CHANGE:
        return CalibrationNeed(NeedKind.CHANGE, f"dtype {candidate_dtype}", required)
    if profile is ProfileName.BF16_KERNEL:
        return CalibrationNeed(NeedKind.ENVELOPE, None, required)
    return CalibrationNeed(NeedKind.SELF, None, required)


ENVELOPE_FAMILIES: Final = frozenset(
    {
        NoiseFamily.KL_MEAN,
        NoiseFamily.KL_P99,
        NoiseFamily.SAME_TOP,
        NoiseFamily.FORK_MARGIN,
        NoiseFamily.HIDDEN_REL_L2,
        NoiseFamily.HIDDEN_COSINE,
    }
)
"""The families a bf16 kernel change is judged on against the envelope: those comparing
the two sides' outputs. The decode families compare a side's decode with its own
prefill; rounding to bf16 does not bound how another kernel's decode path drifts (eager
attention's decode excess, upper 5.5e-4, exceeded 3 x the bf16-vs-fp32 pair's 1.5e-4:
experiments/GPU_GATE_TABLE.md), so they keep self noise and its floor."""
ENVELOPE_SOURCE: Final = (
    "bf16-kernel limits are k x the bfloat16-vs-float32 pair of the same weights: two bf16 "
    "kernels each within e of float32 differ by at most 2e (4e for KL and 1 - cosine), "
    "inside k = 3 (k^2 = 9); at 28 layers (H100, experiments/GPU_GATE_TABLE.md) the benign "
    "kernel changes pass under them and a transposed query head fails, which the static "
    "and self-floored limits let pass"
)
ENVELOPE_CAP_NOTE: Final = (
    "the static limit is tighter than k x the envelope, and stays: the envelope bounds a "
    "benign bf16 kernel change from above (on the 2-layer fixture k x its bf16-vs-fp32 pair "
    "is 4.3e-4 mean KL, above the static 1e-4 that already passes the kernel changes "
    "measured there: experiments/GATE_BENCH.md)"
)
_ENVELOPE_OTHER: Final = {"bfloat16": "float32", "float32": "bfloat16"}


def _envelope(
    noise: ModelNoise | None, need: CalibrationNeed
) -> tuple[str, Mapping[NoiseFamily, FamilyNoise]] | None:
    """The bfloat16-vs-float32 pair kept for a bf16 kernel check (None: not that need,
    or no such pair kept)."""
    if noise is None or need.kind is not NeedKind.ENVELOPE:
        return None
    other = _ENVELOPE_OTHER.get(noise.dtype)
    key = f"dtype {other}"
    found = None if other is None else noise.changes.get(key)
    return None if found is None else (key, found)


class LimitProvenance(WireModel):
    """Where one limit of a check comes from."""

    key: str = Field(description="Threshold field (snake_case).")
    value: float | None
    source: str = Field(description="'measured' (k x noise), 'static' or 'explicit'.")
    noise: float | None = None
    k: float | None = None
    depth_factor: float = 1.0
    noise_layers: int | None = None
    layers: int | None = None
    pairs: list[str] = Field(default_factory=list)
    note: str = ""


class DerivedLimits(WireModel):
    """The thresholds a check is judged under, each limit's provenance, and whether the
    check can be judged at all (`inconclusive`: why not)."""

    thresholds: Thresholds
    provenance: list[LimitProvenance]
    calibration: str = Field(description="Which noise was used, in words.")
    k_source: str = K_SOURCE
    inconclusive: str | None = None


def _noise_set(
    noise: ModelNoise | None,
    need: CalibrationNeed,
    envelope: tuple[str, Mapping[NoiseFamily, FamilyNoise]] | None,
) -> tuple[Mapping[NoiseFamily, FamilyNoise] | None, str]:
    """The noise the families outside the envelope take (`envelope`: `_envelope`'s), and
    the calibration in words."""
    if need.kind is NeedKind.NONE:
        return None, "none: this profile's limits are static"
    if noise is None:
        return None, "none kept for the baseline's revision"
    if need.kind in (NeedKind.SELF, NeedKind.ENVELOPE):
        # A record may keep an expected change's pair alone (a Passed dtype-change check,
        # or `calibrate --also-dtype` without an A/A): an empty self noise is no
        # calibration, so a profile that needs one stays Inconclusive.
        table = noise.self_noise or None
        if table is None:
            kept = ", ".join(sorted(noise.changes)) or "nothing"
            said = f"no self noise measured for the baseline's revision (its record keeps: {kept})"
        else:
            said = f"self noise of {noise.model} ({noise.method}, {noise.measured})"
        if envelope is not None:
            families = ", ".join(sorted(ENVELOPE_FAMILIES))
            said = (
                f"'{envelope[0]}' pair of {noise.model} as the bf16 envelope for {families}; "
                f"{said} for the rest"
            )
        elif need.kind is NeedKind.ENVELOPE:
            said += "; no bfloat16-vs-float32 pair kept to bound a bf16 kernel change"
        return table, said
    found = noise.changes.get(need.change or "")
    if found is None:
        kept = ", ".join(sorted(noise.changes)) or "none"
        return None, f"no '{need.change}' pair kept (changes measured: {kept})"
    return found, f"'{need.change}' noise of {noise.model} ({noise.method}, {noise.measured})"


def derive_limits(
    static: Thresholds,
    *,
    need: CalibrationNeed,
    noise: ModelNoise | None,
    layers: int | None,
    static_layers: int | None,
    explicit: Iterable[str] = (),
) -> DerivedLimits:
    """The check's limits: k x the model's noise where measured, else the static ones.

    `static` are the profile's limits as resolved (depth-scaled from `static_layers` to
    `layers`); keys in `explicit` were set by the user and are never replaced. Self noise
    (A/A) only loosens a static limit, never tightens it: a kernel or version change
    brings more than the revision's own A/A noise. A bf16 kernel check takes its output
    families from the same weights' bfloat16-vs-float32 pair where kept (ENVELOPE_SOURCE),
    and that pair only tightens a static limit, never loosens it: it bounds a benign
    kernel change from above, as self noise bounds it from below. A family whose observed noise is
    exactly 0 (bit-exact A/A: no miss, no difference; a rate's bound of zero misses is
    only the suite's size) carries no scale, so its static limit stays.
    """
    envelope = _envelope(noise, need)
    chosen, calibration = _noise_set(noise, need, envelope)
    explicit = set(explicit)
    update: dict[str, float] = {}
    provenance: list[LimitProvenance] = []
    for rule in FAMILIES:
        current = getattr(static, rule.key)
        if rule.key in explicit:
            provenance.append(LimitProvenance(key=rule.key, value=current, source="explicit"))
            continue
        pair = None if envelope is None else envelope[1]
        enveloped = pair is not None and rule.family in ENVELOPE_FAMILIES
        source = pair if enveloped else chosen
        measured = None if source is None else source.get(rule.family)
        exact = measured is not None and (measured.upper <= 0 or measured.observed == 0)
        if measured is None or exact or current is None:
            note = "" if measured is None else "measured noise 0 (bit-exact): nothing to scale"
            if current is None and measured is not None:
                note = "not a limit of this profile"
            provenance.append(_static(rule, current, layers, static_layers, note))
            continue
        noise_layers = None if noise is None else noise.layers
        factor = depth_scale(rule.growth, layers, noise_layers) if layers and noise_layers else 1.0
        scaled = rule.k * measured.upper * factor
        value = scaled if rule.form == "max" else max(0.0, 1.0 - scaled)
        from_self = need.kind is NeedKind.SELF or (need.kind is NeedKind.ENVELOPE and not enveloped)
        floored = from_self and _tighter(rule, value, current)
        # Self noise is the least a benign change brings: it only loosens. The envelope is
        # the most a benign bf16 kernel change brings: it only tightens.
        capped = enveloped and _tighter(rule, current, value)
        if floored or capped:
            value = current
        update[rule.key] = value
        provenance.append(
            LimitProvenance(
                key=rule.key, value=value, source="measured", noise=measured.upper, k=rule.k,
                depth_factor=factor, noise_layers=noise_layers, layers=layers,
                pairs=list(measured.pairs),
                note="; ".join(
                    ([SELF_FLOOR_NOTE] if floored else [])
                    + ([ENVELOPE_CAP_NOTE] if capped else [])
                    + ([ENVELOPE_SOURCE] if enveloped else [])
                    + ([] if measured.bounded else ["noise is a point value, not a bound"])
                ),
            )
        )  # fmt: skip
    missing = chosen is None and need.required is not None
    return DerivedLimits(
        thresholds=static.model_copy(update=update),
        provenance=provenance,
        calibration=calibration,
        inconclusive=(
            f"calibration needed: {need.required}, and {calibration}; measure it with "
            "`infergate parity calibrate` against the stable revision"
            if missing
            else None
        ),
    )


SELF_FLOOR_NOTE: Final = (
    "k x self noise is tighter than the static limit, which stays: a change of kernel "
    "brings more than the revision's own A/A noise (fixture, vLLM CPU: batch-68 A/A mean "
    "KL <= 1.7e-8 against 3.8e-6 for AVX2 against default kernels, experiments/POWER.md)"
)


def _tighter(rule: FamilyRule, value: float, static: float) -> bool:
    return value < static if rule.form == "max" else value > static


def _static(
    rule: FamilyRule, value: float | None, layers: int | None, static_layers: int | None,
    note: str,
) -> LimitProvenance:  # fmt: skip
    factor = depth_scale(rule.growth, layers, static_layers) if layers and static_layers else 1.0
    return LimitProvenance(
        key=rule.key, value=value, source="static", depth_factor=factor,
        noise_layers=static_layers, layers=layers, note=note,
    )  # fmt: skip


def provenance_lines(derived: DerivedLimits) -> list[str]:
    """The limits' provenance in words, one line each, for the report and the log."""
    lines = [f"Calibration: {derived.calibration}."]
    for item in derived.provenance:
        if item.value is None:
            continue
        depth = (
            f", depth x{item.depth_factor:.3g} ({item.noise_layers} -> {item.layers} layers)"
            if item.depth_factor != 1.0
            else ""
        )
        if item.source == "measured":
            text = (
                f"{item.key} {item.value:.4g} = k {item.k:g} x noise {item.noise:.3g}{depth} "
                f"(measured: {', '.join(item.pairs)})"
            )
        elif item.source == "explicit":
            text = f"{item.key} {item.value:.4g}: set explicitly in the check"
        else:
            text = f"{item.key} {item.value:.4g}: static profile limit{depth}"
        lines.append(text + (f"; {item.note}" if item.note else ""))
    if any(item.source == "measured" for item in derived.provenance):
        lines.append(f"k: {derived.k_source}.")
    if derived.inconclusive:
        lines.append(f"Inconclusive: {derived.inconclusive}.")
    return lines


def with_measured(source: LimitSource, derived: DerivedLimits) -> LimitSource:
    """The check's limit provenance (`parity.limits`) once `derived` replaced some limits
    by k x measured noise: k is the linear families' (the quadratic ones take k^2)."""
    measured = [p.key for p in derived.provenance if p.source == "measured"]
    if not measured:
        return source
    return source.model_copy(
        update={
            "source": f"measured noise ({derived.calibration}) for {', '.join(measured)}, "
            f"k^2 = {K_QUADRATIC:g} for KL and 1 - cosine; static profile for the rest:",
            "k": K_LINEAR,
        }
    )
