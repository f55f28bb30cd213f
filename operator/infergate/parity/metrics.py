"""The measured result of a parity comparison, as JSON-ready models (camelCase on the wire).

`ParityResult` is what the runner stores and the ParityCheck status summarises; the
verdict (`verdict.py`) is computed from it and the thresholds, and the report
(`infergate.report`) renders both.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from infergate.parity.calibrated import DerivedLimits
from infergate.parity.limits import LimitSource
from infergate.parity.power import ControlResult
from infergate.parity.prompt_bounds import clustered_error
from infergate.parity.stats import wilson_bounds, wilson_interval
from infergate.parity.thresholds import DEFAULT_CONFIDENCE, Thresholds
from infergate.parity.wire import WireModel

POSITION_BUCKETS: Final[tuple[tuple[str, int, int | None], ...]] = (
    ("0-1K", 0, 1024),
    ("1-4K", 1024, 4096),
    ("4-8K", 4096, 8192),
    ("8K+", 8192, None),
)
"""Sequence-position buckets (name, first position, end exclusive); rope bugs grow with position."""


def bucket_of(positions: NDArray[np.int64]) -> NDArray[np.intp]:
    """Index into POSITION_BUCKETS of each sequence position."""
    edges = np.asarray([start for _, start, _ in POSITION_BUCKETS[1:]], dtype=np.int64)
    return np.searchsorted(edges, positions, side="right")


class Rate(WireModel):
    """A share of successes, with its 95% Wilson interval."""

    value: float | None
    successes: int
    total: int
    low: float
    high: float
    stderr: float | None = Field(
        default=None,
        description="Prompt-clustered standard error, for rates over steps (correlated within "
        "a prompt); None for rates over prompts.",
    )
    clusters: int | None = None
    prompt_mean: float | None = Field(
        default=None,
        description="For rates over steps: the mean of per-prompt rates, each prompt weighing "
        "the same, which `stderr` is the error of (what the regression test compares); None "
        "for rates over prompts and in records made before it was kept.",
    )

    @classmethod
    def of(
        cls,
        successes: int,
        total: int,
        *,
        stderr: float | None = None,
        clusters: int | None = None,
        prompt_mean: float | None = None,
    ) -> Rate:
        low, high = wilson_interval(successes, total)
        return cls(
            value=successes / total if total else None,
            successes=successes,
            total=total,
            low=low,
            high=high,
            stderr=stderr,
            clusters=clusters,
            prompt_mean=prompt_mean,
        )

    @classmethod
    def over_steps(cls, successes: Sequence[int], totals: Sequence[int]) -> Rate:
        """A rate over the steps of the suite's prompts (`successes[i]` of `totals[i]`): the
        pooled share, and the mean of per-prompt rates with its prompt-clustered error."""
        found = clustered_error([float(s) for s in successes], totals)
        return cls.of(
            sum(successes), sum(totals), stderr=found.stderr, clusters=found.clusters,
            prompt_mean=found.value,
        )  # fmt: skip


class Mean(WireModel):
    """A token-weighted mean over the suite with its prompt-clustered standard error."""

    value: float | None
    stderr: float | None
    count: int
    clusters: int | None = Field(default=None, description="Prompts the mean is taken over.")


class Estimate(WireModel):
    """A metric a threshold decides on: its value and one-sided bounds at `confidence`.

    `lower` and `upper` each hold at the check's confidence level; None means the data
    cannot bound the metric (e.g. a single prompt). `method` says how they were found.
    """

    value: float | None
    lower: float | None
    upper: float | None
    evidence: int = Field(description="How many units (see `unit`) the estimate rests on.")
    unit: str = Field(description="prompts, long prompts, steps or tokens.")
    method: str = Field(
        description="wilson (prompts), prompt means (each prompt's mean weighing the same: t "
        "and a studentized bootstrap), prompt rates (step rates: Wilson at the effective "
        "number of positions), prompt shares (a quantile from each prompt's share beyond a "
        "value), observed (an extreme), paired-t (one value per long prompt) or paired "
        "binomial (the long prompts' same-top drop over their positions)."
    )

    @classmethod
    def wilson(cls, successes: int, total: int, confidence: float, unit: str) -> Estimate:
        """A rate over `total` units (prompts, long prompts) with its Wilson bounds."""
        low, high = wilson_bounds(successes, total, confidence)
        return cls(
            value=successes / total if total else None,
            lower=low,
            upper=high,
            evidence=total,
            unit=unit,
            method="wilson",
        )


class Evidence(WireModel):
    """How much the comparison rests on, against a profile's minimum evidence."""

    prompts: int
    long_prompts: int
    scored_steps: int = Field(description="Teacher-forced positions scored on both sides.")
    hidden_tokens: int


class SurvivalPoint(WireModel):
    position: int = Field(description="Output tokens generated.")
    surviving: float = Field(description="Share of prompts whose outputs still agree.")


class FirstDivergence(WireModel):
    prompts: int
    diverged: int
    median: int
    median_censored: bool = Field(description="True when fewer than half diverged: median >= it.")
    p10: int
    p10_censored: bool = Field(description="True when fewer than 10% diverged: p10 >= it.")
    horizon: int = Field(description="Longest output position observed.")
    survival: list[SurvivalPoint]


class TokenMetrics(WireModel):
    match_rate: Rate = Field(description="Prompts whose greedy outputs are identical.")
    agreement: Rate = Field(description="Output tokens agreeing before each first divergence.")
    first_divergence: FirstDivergence
    legitimate_divergence_rate: Rate | None = Field(
        description="Diverging prompts whose fork is legitimate; None when not measurable."
    )
    divergence_logprob_gap_median: float | None
    divergence_logprob_gap_max: float | None


class LogprobMetrics(WireModel):
    steps: int
    teacher_forced_prompts: int
    mean_kl: Mean
    kl_p99: float | None
    kl_max: float | None
    same_top_rate: Rate
    delta_p_mean: float | None
    delta_p_rms: float | None
    delta_p_max_abs: float | None
    generated_steps: int = Field(default=0, description="Scored steps past the prompt.")
    prompt_steps: int = Field(default=0, description="Scored positions inside the prompt.")
    full_vocab_steps: int = Field(
        default=0, description="Steps whose KL is over the full vocabulary (exact)."
    )
    covered_mass: float | None = Field(
        default=None,
        description="Mean baseline probability inside the top-k it reported: how much of "
        "each distribution the top-k KL sees (1 for full-vocabulary steps).",
    )
    target_logprob_delta: Mean | None = Field(
        default=None,
        description="Mean candidate minus baseline logprob of the reference token; the log "
        "perplexity ratio is its negative.",
    )


class HiddenMetrics(WireModel):
    prompts: int
    tokens: int
    max_abs_err: float | None
    mean_abs_err: Mean
    rel_l2: Mean
    rel_l2_p99: float | None
    cosine: Mean
    cosine_p1: float | None
    cosine_min: float | None
    nonfinite_tokens_baseline: int
    nonfinite_tokens_candidate: int
    norm_log_ratio: Mean | None = Field(
        default=None,
        description="Mean per-token log(||candidate|| / ||baseline||): a scale cosine cannot see.",
    )
    norm_abs_log_ratio: Mean | None = Field(
        default=None, description="Mean per-token |log(||candidate|| / ||baseline||)|."
    )


class BucketMetrics(WireModel):
    name: str
    start: int
    end: int | None
    kl_steps: int
    mean_kl: float | None
    same_top_rate: float | None
    hidden_tokens: int
    rel_l2_mean: float | None
    rel_l2_p99: float | None
    cosine_mean: float | None
    cosine_p1: float | None
    max_abs_err: float | None


class LongPrompt(WireModel):
    """One long prompt's own positions, bucket against bucket (teacher-forced on its text)."""

    prompt_id: str
    tokens: int
    short_kl: float | None = Field(description="Mean KL over its positions 0-1K.")
    far_kl: float | None = Field(description="Mean KL over its positions 8K+.")
    kl_ratio: float | None = Field(description="(far + floor) / (short + floor).")
    short_same_top: float | None
    far_same_top: float | None
    same_top_near: tuple[int, int] | None = Field(
        default=None,
        description="(positions where both sides rank the same token first, "
        "positions measured) over its positions 0-1K.",
    )
    same_top_far: tuple[int, int] | None = Field(
        default=None, description="The same over its positions 4K and beyond (4-8K and 8K+)."
    )
    short_rel_l2: float | None = Field(description="Mean hidden relative L2, positions 0-1K.")
    far_rel_l2: float | None = Field(description="Mean hidden relative L2, positions 8K+.")
    hidden_ratio: float | None = Field(description="far_rel_l2 / short_rel_l2 (plus floor).")
    failures: list[str] = Field(default_factory=list)


class LongSequenceMetrics(WireModel):
    min_prompt_tokens: int
    prompts: int
    divergence_rate: Rate | None
    diverged_prompts: list[str]
    kl_ratio: float | None = Field(
        description="Geometric mean over long prompts of each prompt's own 8K+ over 0-1K KL "
        "(each plus maxMeanKl / (limit - 1), see long_prompts.ratio_floor): the same text at both "
        "positions."
    )
    same_top_drop: float | None = Field(
        description="Mean over long prompts of the same-top rate of 0-1K minus that of 8K+."
    )
    hidden_ratio: float | None = Field(
        default=None,
        description="Geometric mean over long prompts of the 8K+ over 0-1K hidden relative L2.",
    )
    per_prompt: list[LongPrompt] = Field(default_factory=list)


class DecodeMetrics(WireModel):
    """Decode-path evidence over the suite (`parity.decode`); two of its figures decide
    (`decodeSelfDelta`, `decodeExcess`), the rest are reported."""

    prompts: int = Field(description="Prompts with at least one compared step (prompts).")
    steps: int = Field(description="Generated steps before the first fork compared (steps).")
    cross_mean_abs: Estimate | None = Field(
        description="Mean |candidate - baseline| decode logprob of the generated token, each "
        "prompt weighing the same (nats)."
    )
    cross_max_abs: float | None = Field(description="Largest such difference (nats).")
    baseline_self_max_abs: float | None = Field(
        description="Largest |decode - prefill| logprob of a generated token on the baseline "
        "(nats; None: the baseline did not score its own sequence)."
    )
    candidate_self_max_abs: float | None = Field(
        description="Largest |decode - prefill| logprob on the candidate (nats)."
    )
    candidate_self_mean_abs: Estimate | None = Field(
        default=None,
        description="Mean |decode - prefill| logprob of the candidate's generated tokens, "
        "each prompt weighing the same (nats; decides maxDecodeSelfDelta).",
    )
    excess: Estimate | None = Field(
        default=None,
        description="Mean over prompts of mean |cross decode| minus mean |cross prefill| "
        "logprob of the same tokens (nats; decides maxDecodeExcess).",
    )


class ParityMetrics(WireModel):
    prompts: int
    tokens: TokenMetrics
    logprobs: LogprobMetrics | None
    hidden: HiddenMetrics | None
    buckets: list[BucketMetrics]
    long_sequence: LongSequenceMetrics
    decode: DecodeMetrics | None = Field(
        default=None,
        description="Decode-path evidence before the first fork.",
    )
    confidence: float = Field(
        default=DEFAULT_CONFIDENCE, description="Level of every one-sided bound."
    )
    strata: dict[str, dict[str, Estimate]] = Field(
        default_factory=dict,
        description="Mean KL and same-top rate of each stratum of prompts alone (short, long, "
        "chat), prompt-clustered like the suite's: reported beside the suite's figures.",
    )
    evidence: Evidence | None = None
    estimates: dict[str, Estimate] = Field(
        default_factory=dict, description="What each threshold decides on, by metric name."
    )
    run: dict[str, Any] = Field(
        default_factory=dict,
        description="What makes two checks comparable for the regression test: the suite "
        "content digest and the sampling settings (fingerprint keys suite.* and sampling.*).",
    )


class PromptSummary(WireModel):
    """One prompt's headline numbers; worst-prompt lists are drawn from these."""

    prompt_id: str
    prompt_tokens: int
    baseline_output_tokens: int
    candidate_output_tokens: int
    first_divergence: int | None
    legitimate: bool | None
    legitimacy_note: str
    logprob_gap: float | None
    kl_steps: int = 0
    mean_kl: float | None = None
    same_top_rate: float | None = None
    hidden_tokens: int = 0
    hidden_max_abs_err: float | None = None
    hidden_rel_l2_p99: float | None = None
    hidden_cosine_p1: float | None = None
    hidden_cosine_min: float | None = None
    target_logprob_delta: float | None = None
    norm_abs_log_ratio: float | None = None
    fork_explained: bool | None = Field(
        default=None, description="False for a fork that is not legitimate (or cannot be judged)."
    )
    long: bool = False
    long_failures: list[str] = Field(default_factory=list)


class PromptOutputs(WireModel):
    """Both sides' outputs of one prompt, for side-by-side display."""

    prompt_id: str
    baseline_token_ids: list[int]
    candidate_token_ids: list[int]
    baseline_text: str | None
    candidate_text: str | None


class HygieneCheck(StrEnum):
    NON_FINITE = "NonFinite"
    COLLAPSE = "Collapse"
    PROMPT_TOKENS_DIFFER = "PromptTokensDiffer"
    CONFIG_DIFFERS = "ConfigDiffers"
    FINGERPRINT_DIFFERS = "FingerprintDiffers"
    FINGERPRINT_MISSING = "FingerprintMissing"


class HygieneFinding(WireModel):
    """A hard failure found outside the thresholds (or an Error when it is the baseline's)."""

    check: HygieneCheck
    severity: Literal["Failed", "Error"]
    side: Literal["baseline", "candidate", "both"]
    prompt_ids: list[str]
    detail: str


class SideInfo(WireModel):
    engine: str
    engine_version: str
    dtype: str
    config_hash: str
    model: str
    suite: str
    fingerprints: dict[str, Any] = Field(default_factory=dict)


class ParityResult(WireModel):
    """Everything measured: the input the verdict and the report are computed from."""

    baseline: SideInfo
    candidate: SideInfo
    thresholds: Thresholds
    metrics: ParityMetrics
    prompts: list[PromptSummary]
    outputs: list[PromptOutputs]
    hygiene: list[HygieneFinding]
    errors: list[str] = Field(description="Why something could not be measured.")
    unverified: list[str] = Field(
        default_factory=list,
        description="What the comparison could not verify though nothing failed (a side "
        "that reports no fingerprints): the verdict is Inconclusive, never Passed.",
    )
    notes: list[str]
    disabled: dict[str, str] = Field(
        default_factory=dict,
        description="Threshold keys the profile sets that are not part of this verdict, and why.",
    )
    control: ControlResult | None = Field(
        default=None,
        description="The positive control scored through the same suite and limits "
        "(`infergate.parity.control`); None in results made before it existed.",
    )
    calibration: DerivedLimits | None = Field(
        default=None,
        description="Where each limit came from (measured noise x k, static, explicit) and "
        "whether a needed calibration was missing (`infergate.parity.calibrated`); None "
        "when the limits were given as they are (no runner derived them).",
    )
    limits: LimitSource | None = Field(
        default=None,
        description="Where the thresholds come from: static profile or measured noise, k, "
        "the depth rule and the depth they were scaled to (None: given without a profile).",
    )
