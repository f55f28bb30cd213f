"""Tolerance profiles: default thresholds per kind of change, each number with its source.

Each profile states:

- `block` thresholds that decide the verdict, every one on a one-sided confidence bound
  at `confidence` (0.95), and the minimum evidence (prompts, long prompts, scored
  teacher-forced steps) below which the verdict is Inconclusive;
- `warn` thresholds that only add warnings;
- `sources`: where each number comes from (`profile_sources`, the one place that prose
  lives);
- `reported_only`: metrics measured and shown but not decided on, and why;
- `expected_differences`: fingerprint and config keys this kind of change may alter.

Noise grows with depth (bf16 vs fp32 last-layer relative L2 at Qwen2.5-7B shape: 0.014
after 1 layer, 0.066 after 28, close to sqrt(depth); KL like its square), while the
numbers here were measured on the 2-layer fixture. Every limit of a metric that grows
with depth (`depth.DEPTH_SCALED`: logprob and hidden-state limits alike) is therefore
scaled to the model's depth when it is known, by the one rule calibration uses too
(`depth.scale_limit`): linear errors by sqrt(layers / calibrated_layers), KL and
1 - cosine by layers / calibrated_layers. Never scaled below the calibrated value.

Thresholds given explicitly override the profile's, key by key; an explicit null
switches a check off, and the verdict then lists it as not part of the decision.

docs/parity-profiles.md tables every profile from this module (`make crds` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from infergate.parity import profile_sources as sources
from infergate.parity.decode import DECODE_K, DECODE_NOISE
from infergate.parity.depth import DEPTH_SCALED, scale_limit
from infergate.parity.limits import LimitSource, limit_source
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import ProfileName, RegressionTolerance, Thresholds


class ProfileChoiceError(ValueError):
    """No profile can be chosen by guess for these two sides; spec.profile must say."""


@dataclass(frozen=True)
class Profile:
    name: ProfileName
    summary: str
    block: Thresholds
    warn: Thresholds
    sources: MappingProxyType[str, str]
    """Where each block threshold's number comes from, by threshold key (camelCase)."""
    allowed_config_differences: tuple[str, ...] = ()
    """Config and fingerprint keys (fnmatch patterns) this kind of change is expected to alter."""
    reported_only: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Metrics measured and reported that no threshold of this profile decides on, and why."""
    calibrated_layers: int | None = None
    """Depth of the model the limits were measured on (None: never scaled)."""

    @property
    def expected_differences(self) -> tuple[str, ...]:
        return self.allowed_config_differences


HIDDEN_KEYS: tuple[str, ...] = (
    "max_hidden_max_abs_err",
    "max_hidden_mean_abs_err",
    "max_hidden_rel_l2_p99",
    "min_hidden_cosine_p1",
    "min_hidden_cosine",
    "max_hidden_norm_log_ratio",
    "max_long_to_short_hidden_ratio",
)
"""Thresholds that need the probe channel; off together with hiddenStates.enabled."""

LONG_KEYS: tuple[str, ...] = (
    "max_long_seq_divergence_rate",
    "max_long_to_short_kl_ratio",
    "max_long_same_top_drop",
    "max_long_to_short_hidden_ratio",
)
"""Thresholds judged on long prompts only."""

_BF16_BLOCK = Thresholds(
    confidence=0.95,
    min_prompts=32,
    min_long_prompts=4,
    min_scored_steps=4096,
    max_mean_kl=1e-4,
    max_kl_p99=1e-3,
    min_same_top_rate=0.985,
    max_delta_p_rms=1e-2,
    max_delta_p_mean=2e-3,
    max_log_perplexity_ratio=1e-2,
    max_hidden_norm_log_ratio=5e-3,
    min_hidden_cosine_p1=0.9995,
    min_hidden_cosine=0.99,
    max_hidden_rel_l2_p99=3e-2,
    max_illegitimate_divergence_rate=0.1,
    max_divergence_logprob_gap=0.1,
    min_first_divergence_p10=16,
    max_long_seq_divergence_rate=0.5,
    max_long_to_short_kl_ratio=3.0,
    max_long_same_top_drop=0.005,
    max_long_to_short_hidden_ratio=2.0,
    long_prompt_tokens=8192,
    max_decode_self_delta=DECODE_K * DECODE_NOISE,
    max_decode_excess=DECODE_K * DECODE_NOISE,
    require_decode_evidence=True,
)

# Another engine or version runs other kernels on the same weights and configuration: the
# numeric limits judge its effect, so its fingerprint keys may differ. A dtype change
# usually brings other kernels with it too.
_VERSIONS = ("versions.*", "engine.kind")
_DTYPE_KEYS = ("dtype", "*dtype", "*_dtype", "*.dtype", *_VERSIONS)

PROFILES: Final[MappingProxyType[ProfileName, Profile]] = MappingProxyType(
    {
        ProfileName.BF16_KERNEL: Profile(
            name=ProfileName.BF16_KERNEL,
            summary="same dtype (bfloat16), new kernel or engine version",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=3e-5, min_same_top_rate=0.995),
            sources=sources.BF16,
            allowed_config_differences=_VERSIONS,
            reported_only=sources.BF16_REPORTED,
            calibrated_layers=2,
        ),
        ProfileName.DTYPE_CHANGE: Profile(
            name=ProfileName.DTYPE_CHANGE,
            summary="compute dtype change, e.g. float16 against bfloat16",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=3e-5, min_same_top_rate=0.993),
            sources=sources.DTYPE_CHANGE,
            allowed_config_differences=_DTYPE_KEYS,
            reported_only=sources.BF16_REPORTED,
            calibrated_layers=2,
        ),
        ProfileName.FP32_CROSS_FRAMEWORK: Profile(
            name=ProfileName.FP32_CROSS_FRAMEWORK,
            summary="both float32, different frameworks",
            block=Thresholds(
                confidence=0.95,
                min_prompts=32,
                min_long_prompts=4,
                min_scored_steps=4096,
                max_mean_kl=1e-6,
                max_kl_p99=1e-5,
                min_same_top_rate=0.999,
                max_delta_p_rms=1e-4,
                max_delta_p_mean=2e-5,
                max_log_perplexity_ratio=1e-4,
                max_hidden_norm_log_ratio=1e-5,
                min_hidden_cosine_p1=0.99999,
                min_hidden_cosine=0.9999,
                max_hidden_rel_l2_p99=2e-5,
                max_hidden_max_abs_err=1e-3,
                max_illegitimate_divergence_rate=0.1,
                max_divergence_logprob_gap=1e-3,
                min_first_divergence_p10=64,
                max_long_seq_divergence_rate=0.5,
                max_long_to_short_kl_ratio=3.0,
                max_long_same_top_drop=0.001,
                max_long_to_short_hidden_ratio=2.0,
                long_prompt_tokens=8192,
            ),
            warn=Thresholds(max_mean_kl=1e-7, min_same_top_rate=0.9999),
            sources=sources.FP32_CROSS_FRAMEWORK,
            allowed_config_differences=_VERSIONS,
            reported_only=sources.FP32_REPORTED,
            calibrated_layers=2,
        ),
        ProfileName.GPU_TO_ASCEND_BF16: Profile(
            name=ProfileName.GPU_TO_ASCEND_BF16,
            summary="vLLM on NVIDIA GPU against MindFormers on Ascend, both bfloat16",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=3e-5, min_same_top_rate=0.995),
            sources=sources.GPU_TO_ASCEND_BF16,
            allowed_config_differences=_VERSIONS,
            reported_only=sources.BF16_REPORTED,
            calibrated_layers=2,
        ),
        ProfileName.STRICT: Profile(
            name=ProfileName.STRICT,
            summary="bit-exact replay with batch invariance",
            block=Thresholds(
                confidence=0.95,
                min_prompts=32,
                min_long_prompts=0,
                min_scored_steps=1024,
                min_token_match_rate=1.0,
                min_token_agreement=1.0,
                max_mean_kl=0.0,
                min_same_top_rate=1.0,
                max_hidden_max_abs_err=0.0,
                max_hidden_rel_l2_p99=0.0,
                min_hidden_cosine_p1=1.0,
                max_long_seq_divergence_rate=0.0,
            ),
            warn=Thresholds(),
            sources=sources.STRICT,
            reported_only=sources.STRICT_REPORTED,
        ),
    }
)


def resolve_thresholds(
    profile: ProfileName,
    explicit: Thresholds | None = None,
    *,
    hidden_states: bool = True,
    layers: int | None = None,
) -> Thresholds:
    """The profile's block thresholds with every explicitly set key of `explicit` on top.

    `hidden_states=False` (the probe channel switched off) drops every hidden-state
    threshold with it; `layers` (the model's depth, when known) scales the limits of
    DEPTH_SCALED. Explicit values are never scaled.
    """
    chosen = PROFILES[profile]
    base = scale_for_depth(chosen.block, chosen.calibrated_layers, layers)
    if explicit is not None:
        update = {name: getattr(explicit, name) for name in explicit.model_fields_set}
        base = base.model_copy(update=update)
    if not hidden_states:
        base = base.model_copy(update=dict.fromkeys(HIDDEN_KEYS))
    return base


def scale_for_depth(block: Thresholds, calibrated: int | None, layers: int | None) -> Thresholds:
    """The limits of DEPTH_SCALED scaled from `calibrated` to `layers` layers."""
    if calibrated is None or layers is None or layers <= calibrated:
        return block
    update = {
        name: scale_limit(name, limit, layers, calibrated)
        for name in DEPTH_SCALED
        if (limit := getattr(block, name)) is not None
    }
    return block.model_copy(update=update)


def resolve_warnings(profile: ProfileName, explicit: Thresholds | None = None) -> Thresholds:
    """The profile's warn thresholds, minus any key the user set explicitly."""
    warn = PROFILES[profile].warn
    if explicit is None:
        return warn
    return warn.model_copy(update=dict.fromkeys(explicit.model_fields_set))


def disabled_checks(
    profile: ProfileName,
    explicit: Thresholds | None = None,
    *,
    hidden_states: bool = True,
) -> dict[str, str]:
    """Threshold keys the profile sets that will not be part of the verdict, and why."""
    chosen = PROFILES[profile].block
    out: dict[str, str] = {}
    for name, info in Thresholds.model_fields.items():
        if getattr(chosen, name) is None:
            continue
        key = info.alias or name
        if not hidden_states and name in HIDDEN_KEYS:
            out[key] = "hidden states are not compared (hiddenStates.enabled: false)"
        elif (
            explicit is not None
            and name in explicit.model_fields_set
            and getattr(explicit, name) is None
        ):
            out[key] = "switched off in the check's spec (disabledChecks or a null threshold)"
    return out


def resolve_regression(
    thresholds: Thresholds, explicit: RegressionTolerance | None = None
) -> RegressionTolerance:
    """Regression allowances: the explicitly set ones, the rest derived from the limits.

    An allowance not set is a quarter of the distance from a perfect value to the
    resolved limit of the same metric (0 KL, rate 1, relative error 0): limits are
    multiples of measured A/A noise, so the allowance is too. A metric without a limit
    gets no allowance (None: not tested) unless one is set.
    """
    given = explicit or RegressionTolerance()
    derived = {
        "max_token_match_rate_drop": _share(1.0 - thresholds.min_token_match_rate)
        if thresholds.min_token_match_rate is not None else None,
        "max_token_agreement_drop": _share(1.0 - thresholds.min_token_agreement)
        if thresholds.min_token_agreement is not None else None,
        "max_same_top_rate_drop": _share(1.0 - thresholds.min_same_top_rate)
        if thresholds.min_same_top_rate is not None else None,
        "max_mean_kl_increase": _share(thresholds.max_mean_kl)
        if thresholds.max_mean_kl is not None else None,
        "max_hidden_rel_l2_increase": _share(thresholds.max_hidden_rel_l2_p99)
        if thresholds.max_hidden_rel_l2_p99 is not None else None,
    }  # fmt: skip
    update = {k: v for k, v in derived.items() if k not in given.model_fields_set}
    return given.model_copy(update=update)


REGRESSION_SHARE = 0.25
"""Share of a limit's distance from perfect that a metric may worsen between two checks."""


def _share(distance: float) -> float:
    return REGRESSION_SHARE * max(distance, 0.0)


def suggest_profile(baseline: RecordMeta, candidate: RecordMeta) -> tuple[ProfileName, str]:
    """The profile that fits what changed between two records, and why.

    Fails closed: a side whose dtype is unknown (an endpoint that does not say) gets no
    profile by guess; `ProfileChoiceError` asks for spec.profile instead.
    """
    known = {"float32", "float16", "bfloat16"}
    unknown = [
        f"{side} ({meta.engine} at dtype {meta.dtype!r})"
        for side, meta in (("baseline", baseline), ("candidate", candidate))
        if meta.dtype.lower() not in known
    ]
    if unknown:
        raise ProfileChoiceError(
            f"cannot choose a tolerance profile: the compute dtype of {' and '.join(unknown)} "
            "is unknown; set spec.profile to one of " + ", ".join(p.value for p in ProfileName)
        )
    dtypes = {baseline.dtype.lower(), candidate.dtype.lower()}
    engines = {baseline.engine.lower(), candidate.engine.lower()}
    if len(dtypes) > 1:
        return (
            ProfileName.DTYPE_CHANGE,
            f"dtype changes: {baseline.dtype} -> {candidate.dtype}",
        )
    if dtypes == {"float32"}:
        return (
            ProfileName.FP32_CROSS_FRAMEWORK,
            f"float32 on both sides ({baseline.engine} -> {candidate.engine})",
        )
    if engines == {"vllm", "mindformers"}:
        return (
            ProfileName.GPU_TO_ASCEND_BF16,
            f"{baseline.engine} -> {candidate.engine} in {baseline.dtype}",
        )
    # Never strict by guess: a replay is bit-exact only with batch invariance switched on.
    return (
        ProfileName.BF16_KERNEL,
        (
            f"same dtype ({baseline.dtype}), {baseline.engine} {baseline.engine_version} -> "
            f"{candidate.engine} {candidate.engine_version}"
        ),
    )


@dataclass(frozen=True)
class Gate:
    """Everything a comparison and its verdict need from the profile, resolved once."""

    profile: ProfileName
    reason: str
    """Why this profile: given in the spec, or what differs between the sides."""
    thresholds: Thresholds
    warn: Thresholds
    disabled: dict[str, str]
    """Threshold keys the profile sets that are not part of the verdict, and why."""
    expected_differences: tuple[str, ...]
    """Config and fingerprint keys this kind of change may alter."""
    layers: int | None
    """Model depth the limits were scaled to (None: not known, not scaled)."""
    limits: LimitSource
    """Where the limits come from (static profile or measured noise, k, depth rule, depth)."""


def model_depth(baseline: RecordMeta, candidate: RecordMeta) -> int | None:
    """The model's depth from both sides' fingerprints (model_config.num_hidden_layers).

    None unless both sides report the same depth (a differing depth fails as hygiene).
    """
    key = "model_config.num_hidden_layers"
    a, b = baseline.fingerprints.get(key), candidate.fingerprints.get(key)
    if isinstance(a, int) and not isinstance(a, bool) and a == b and a > 0:
        return a
    return None


def plan_gate(
    baseline: RecordMeta,
    candidate: RecordMeta,
    *,
    profile: ProfileName | None = None,
    explicit: Thresholds | None = None,
    hidden_states: bool = True,
) -> Gate:
    """The profile (given, or suggested from the two sides) and its resolved thresholds.

    Raises `ProfileChoiceError` when no profile is given and a side's dtype is unknown.
    """
    if profile is None:
        profile, reason = suggest_profile(baseline, candidate)
    else:
        reason = "set in spec.profile"
    layers = model_depth(baseline, candidate)
    return Gate(
        profile=profile,
        reason=reason,
        thresholds=resolve_thresholds(
            profile, explicit, hidden_states=hidden_states, layers=layers
        ),
        warn=resolve_warnings(profile, explicit),
        disabled=disabled_checks(profile, explicit, hidden_states=hidden_states),
        expected_differences=PROFILES[profile].expected_differences,
        layers=layers,
        limits=limit_source(
            profile.value,
            PROFILES[profile].calibrated_layers,
            layers,
            [
                Thresholds.model_fields[n].alias or n
                for n in (explicit.model_fields_set if explicit else ())
                if getattr(explicit, n) is not None
            ],
        ),
    )
