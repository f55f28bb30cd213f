"""Tolerance profiles: default thresholds per kind of change, each number with its source.

Numbers are starting points to calibrate with A/A runs (PARITY.md): run a baseline
against itself on each engine and dtype and set the noise floor from what is measured.
`block` thresholds decide the verdict; `warn` thresholds only add warnings.
Thresholds given explicitly override the profile's, key by key; an explicit null
switches a check off.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import ProfileName, Thresholds


@dataclass(frozen=True)
class Profile:
    name: ProfileName
    summary: str
    block: Thresholds
    warn: Thresholds
    sources: MappingProxyType[str, str]
    """Where each block threshold's number comes from, by threshold key (camelCase)."""
    allowed_config_differences: tuple[str, ...] = ()
    """Effective-config keys (fnmatch patterns) that this kind of change is expected to alter."""


_LLAMA_CPP = "llama.cpp perplexity --kl-divergence, LLaMA-3-8B BF16 vs FP16: mean KLD 2.5e-5"
_BF16_TABLE = "PARITY.md starting thresholds, bf16 kernel/version row"
_LEGIT = "vLLM check_logprobs_close: both tokens in each other's top-5 at the first fork"
_TAU_BF16 = "PARITY.md: baseline logprob gap at the fork under ~0.1 nat (bf16)"
_LONG = "PARITY.md long context: 8K+ bucket KLD over 3x the 0-1K bucket's fails"
_LONG_TOP = "PARITY.md long context: 8K+ same-top rate drop over half a point fails"
_MSPROBE_COS = "msprobe guidance: cosine > 0.99"
_FORK_BF16 = (
    "ours, to calibrate: vLLM without batch invariance forks around token 100 "
    "(Qwen3-235B, 80/1000 completions); fewer than 10% forking in 16 tokens"
)
_LONG_RATE = "ours, to calibrate: at most 1 in 10 long prompts diverging early"

_BF16_SOURCES = {
    "maxMeanKl": f"{_BF16_TABLE}; {_LLAMA_CPP}, q8_0 1.36e-3",
    "minSameTopRate": f"{_BF16_TABLE}; llama.cpp BF16 vs FP16 same top 99.74%",
    "minHiddenCosineP1": f"{_BF16_TABLE}; {_MSPROBE_COS}; vLLM embedding tests >= 0.99",
    "maxHiddenRelL2P99": f"{_BF16_TABLE}; a few bf16 epsilons (7.8e-3) of drift",
    "minLegitimateDivergenceRate": f"{_LEGIT}; ours 0.95 to allow rare near-ties past tau",
    "maxDivergenceLogprobGap": _TAU_BF16,
    "minFirstDivergenceP10": _FORK_BF16,
    "maxLongSeqDivergenceRate": _LONG_RATE,
    "maxLongToShortKlRatio": _LONG,
    "maxLongSameTopDrop": _LONG_TOP,
}

_BF16_BLOCK = Thresholds(
    max_mean_kl=1e-3,
    min_same_top_rate=0.985,
    min_hidden_cosine_p1=0.99,
    max_hidden_rel_l2_p99=5e-2,
    min_legitimate_divergence_rate=0.95,
    max_divergence_logprob_gap=0.1,
    min_first_divergence_p10=16,
    max_long_seq_divergence_rate=0.1,
    max_long_to_short_kl_ratio=3.0,
    max_long_same_top_drop=0.005,
)

PROFILES: Final[MappingProxyType[ProfileName, Profile]] = MappingProxyType(
    {
        ProfileName.BF16_KERNEL: Profile(
            name=ProfileName.BF16_KERNEL,
            summary="same dtype (bfloat16), new kernel or engine version",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=1e-4, min_same_top_rate=0.995),
            sources=MappingProxyType(_BF16_SOURCES),
        ),
        ProfileName.DTYPE_CHANGE: Profile(
            name=ProfileName.DTYPE_CHANGE,
            summary="compute dtype change, e.g. float16 against bfloat16",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=2e-4, min_same_top_rate=0.993),
            sources=MappingProxyType(
                {**_BF16_SOURCES, "maxMeanKl": f"PARITY.md dtype-change row; {_LLAMA_CPP}"}
            ),
            allowed_config_differences=("dtype", "*dtype", "*_dtype", "*.dtype"),
        ),
        ProfileName.FP32_CROSS_FRAMEWORK: Profile(
            name=ProfileName.FP32_CROSS_FRAMEWORK,
            summary="both float32, different frameworks",
            block=Thresholds(
                max_mean_kl=1e-5,
                min_same_top_rate=0.999,
                min_hidden_cosine_p1=0.99999,
                max_hidden_rel_l2_p99=1e-4,
                min_legitimate_divergence_rate=0.95,
                max_divergence_logprob_gap=1e-3,
                min_first_divergence_p10=64,
                max_long_seq_divergence_rate=0.1,
                max_long_to_short_kl_ratio=3.0,
                max_long_same_top_drop=0.005,
            ),
            warn=Thresholds(max_mean_kl=1e-6, min_same_top_rate=0.9999),
            sources=MappingProxyType(
                {
                    **_BF16_SOURCES,
                    "maxMeanKl": "PARITY.md fp32-across-frameworks row",
                    "minSameTopRate": "PARITY.md fp32-across-frameworks row",
                    "minHiddenCosineP1": "PARITY.md fp32-across-frameworks row",
                    "maxHiddenRelL2P99": "PARITY.md fp32 row; torch.testing fp32 rtol 1.3e-6",
                    "maxDivergenceLogprobGap": "PARITY.md: gap under ~1e-3 nat (fp32)",
                    "minFirstDivergenceP10": "ours, to calibrate: fp32 forks are rare",
                }
            ),
        ),
        ProfileName.GPU_TO_ASCEND_BF16: Profile(
            name=ProfileName.GPU_TO_ASCEND_BF16,
            summary="vLLM on NVIDIA GPU against MindFormers on Ascend, both bfloat16",
            block=_BF16_BLOCK,
            warn=Thresholds(max_mean_kl=1e-4, min_same_top_rate=0.995),
            sources=MappingProxyType(
                {
                    k: f"PARITY.md GPU -> Ascend bf16 row: as bf16; {v}"
                    for k, v in _BF16_SOURCES.items()
                }
            ),
        ),
        ProfileName.STRICT: Profile(
            name=ProfileName.STRICT,
            summary="bit-exact replay with batch invariance",
            block=Thresholds(
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
            sources=MappingProxyType(
                dict.fromkeys(
                    (
                        "minTokenMatchRate",
                        "minTokenAgreement",
                        "maxMeanKl",
                        "minSameTopRate",
                        "maxHiddenMaxAbsErr",
                        "maxHiddenRelL2P99",
                        "minHiddenCosineP1",
                        "maxLongSeqDivergenceRate",
                    ),
                    "vLLM batch invariance: logprobs bitwise equal between batch sizes; "
                    "PARITY.md replay row (KLD 0, same top 100%, cos 1.0, relL2 0)",
                )
            ),
        ),
    }
)


def resolve_thresholds(profile: ProfileName, explicit: Thresholds | None = None) -> Thresholds:
    """The profile's block thresholds with every explicitly set key of `explicit` on top."""
    base = PROFILES[profile].block
    if explicit is None:
        return base
    update = {name: getattr(explicit, name) for name in explicit.model_fields_set}
    return base.model_copy(update=update)


def resolve_warnings(profile: ProfileName, explicit: Thresholds | None = None) -> Thresholds:
    """The profile's warn thresholds, minus any key the user set explicitly."""
    warn = PROFILES[profile].warn
    if explicit is None:
        return warn
    return warn.model_copy(update=dict.fromkeys(explicit.model_fields_set))


def suggest_profile(baseline: RecordMeta, candidate: RecordMeta) -> tuple[ProfileName, str]:
    """The profile that fits what changed between two records, and why."""
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
