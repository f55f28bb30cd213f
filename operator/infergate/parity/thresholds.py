"""The threshold keys a user writes in a ParityCheck, and the names of the tolerance profiles.

This module imports pydantic only: the ParityCheck CRD schema is generated from these
models, so the API package can import them without pulling in numpy. Field names are
snake_case in Python and camelCase on the wire (`minTokenMatchRate`); every field is
optional, and a field left out takes its value from the profile (see `profiles.py`).
Setting a field explicitly to null switches that check off even when the profile has it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from infergate.parity.wire import WIRE_CONFIG


class ProfileName(StrEnum):
    """A tolerance profile: default thresholds for one kind of change (PARITY.md table)."""

    BF16_KERNEL = "bf16-kernel"
    """Same dtype (bfloat16), new kernel or engine version."""
    DTYPE_CHANGE = "dtype-change"
    """A change of compute dtype, e.g. float16 against bfloat16."""
    FP32_CROSS_FRAMEWORK = "fp32-cross-framework"
    """Both sides float32, different frameworks (e.g. PyTorch against MindSpore)."""
    GPU_TO_ASCEND_BF16 = "gpu-to-ascend-bf16"
    """vLLM on NVIDIA GPU against MindFormers on Ascend, both bfloat16."""
    STRICT = "strict"
    """Bit-exact: replays with batch invariance, where the A/A floor is exactly zero."""


DEFAULT_CONFIDENCE = 0.95
"""Level of every one-sided bound when the thresholds leave `confidence` unset."""


class Thresholds(BaseModel):
    """Pass/fail limits of a parity check; a check fails only past its limit."""

    model_config = WIRE_CONFIG

    min_token_match_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Lowest share of prompts whose greedy outputs are identical (0..1).",
    )
    min_token_agreement: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Lowest share of output tokens that agree before each prompt's first divergence (0..1)."
        ),
    )
    min_first_divergence_p10: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Lowest 10th percentile of the first-divergence position, in output tokens. "
            "Also the bound under which a long prompt's divergence counts as early."
        ),
    )
    min_legitimate_divergence_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Lowest share of diverging prompts whose fork is legitimate: each side's token in "
            "the other's top-k and the baseline logprob gap under maxDivergenceLogprobGap (0..1)."
        ),
    )
    max_divergence_logprob_gap: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest baseline logprob gap (nats) between the two tokens at a fork for the fork "
            "to count as legitimate (tau). Used by minLegitimateDivergenceRate."
        ),
    )
    max_mean_kl: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest mean KL divergence (nats) of the candidate from the baseline over top-k "
            "tokens plus a tail bucket, teacher-forced on the baseline's tokens."
        ),
    )
    min_same_top_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Lowest share of steps where both sides rank the same token first (0..1).",
    )
    max_hidden_max_abs_err: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest absolute error of any last-layer hidden-state element in the suite, in "
            "the hidden states' own units (activation values)."
        ),
    )
    max_hidden_mean_abs_err: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest suite mean of the per-token mean absolute hidden-state error, in the "
            "hidden states' own units (activation values)."
        ),
    )
    max_hidden_rel_l2_p99: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest 99th percentile over tokens of the hidden-state relative L2 error "
            "||candidate - baseline|| / ||baseline||."
        ),
    )
    min_hidden_cosine_p1: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Lowest 1st percentile over tokens of the hidden-state cosine similarity.",
    )
    max_long_seq_divergence_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Largest share of long prompts (longPromptTokens and up) that diverge early or "
            "whose own hidden-state or KL metrics fail (0..1)."
        ),
    )
    max_long_to_short_kl_ratio: float | None = Field(
        default=None,
        ge=0.0,
        description="Largest ratio of mean KL in the 8K+ position bucket to the 0-1K bucket "
        "(both plus 1% of maxMeanKl, a noise floor).",
    )
    max_long_same_top_drop: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Largest drop of the same-top rate from the 0-1K position bucket to the 8K+ "
            "bucket (0..1; 0.005 is half a point)."
        ),
    )
    long_prompt_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Prompt length, in tokens, from which a prompt counts as long (default 8192).",
    )
    confidence: float | None = Field(
        default=None,
        gt=0.5,
        lt=1.0,
        description=(
            "Level of the one-sided confidence bounds every threshold is decided on (0.5..1, no "
            "unit; the profile's 0.95 when unset): pass only if the bound on the bad side is "
            "within the limit, fail only if the bound on the good side is past it, otherwise "
            "Inconclusive."
        ),
    )
    min_prompts: int | None = Field(
        default=None,
        ge=0,
        description="Fewest prompts compared for a verdict; below it the check is Inconclusive.",
    )
    min_long_prompts: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Fewest long prompts (longPromptTokens and up) for a verdict; 0 says the long-context "
            "checks are not required, and the verdict says they were not part of it."
        ),
    )
    min_scored_steps: int | None = Field(
        default=None,
        ge=0,
        description="Fewest teacher-forced positions scored on both sides for a verdict.",
    )
    max_illegitimate_divergence_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Largest share of prompts whose first fork is not legitimate (a token outside the "
            "other side's top-k, a margin past tau on either side, or a fork that cannot be "
            "judged) (0..1)."
        ),
    )
    max_kl_p99: float | None = Field(
        default=None,
        ge=0.0,
        description="Largest 99th percentile over scored positions of the KL divergence (nats).",
    )
    max_log_perplexity_ratio: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest |log perplexity ratio|: the mean over scored positions of the baseline's "
            "minus the candidate's logprob of the reference token, in nats, either sign."
        ),
    )
    max_delta_p_mean: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Largest |mean delta-p|: the candidate's minus the baseline's probability of the "
            "reference token, averaged over scored positions, either sign (0..1)."
        ),
    )
    max_delta_p_rms: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Largest root mean square of delta-p over scored positions (0..1).",
    )
    max_hidden_norm_log_ratio: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest mean over tokens of |log(||candidate|| / ||baseline||)| of the last-layer "
            "hidden states (the log of a norm ratio, no unit): a scale of the states, which "
            "cosine cannot see (log 1.02 = 0.0198)."
        ),
    )
    min_hidden_cosine: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Lowest hidden-state cosine similarity of any token in the suite (-1..1).",
    )
    max_long_to_short_hidden_ratio: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest ratio, per long prompt, of its mean hidden relative L2 at positions 8K+ "
            "to that at 0-1K (the position signal of a rope error), bounded over long prompts."
        ),
    )
    max_decode_self_delta: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest mean |decode - prefill| logprob of the candidate's own generated tokens "
            "before the first fork, each prompt weighing the same (nats): its decode path (KV "
            "cache and its dtype, CUDA graphs, prefix-cache hits) against its own prefill."
        ),
    )
    max_decode_excess: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Largest mean over prompts of mean |candidate - baseline| decode logprob of the "
            "generated tokens minus the same for their prefill logprobs (nats): how much "
            "further apart the decode paths are than the prefill paths."
        ),
    )
    require_decode_evidence: bool | None = Field(
        default=None,
        description=(
            "true: a check without decode evidence (no generation top-k logprobs, every prompt "
            "forked at its first token, no self-scoring) is Inconclusive; false or unset: the "
            "decode limits are then not part of the verdict, which says so."
        ),
    )


class RegressionTolerance(BaseModel):
    """How much worse than the last passing check a new check may be.

    Compared only with a check of the same suite content and sampling. A metric regresses
    only when the confidence bound says the worsening exceeds the allowed amount: for
    rates over prompts, the Newcombe interval of the difference of two Wilson intervals;
    for means and rates over steps, a t bound from the two prompt-clustered standard
    errors. An allowance left unset is a quarter of the distance from a perfect value to
    the profile's limit for that metric (limits are multiples of measured A/A noise), so a
    benign kernel change after a bit-identical check is not a regression; a metric without
    a limit is not tested unless its allowance is set.
    """

    model_config = WIRE_CONFIG

    confidence: float = Field(
        default=DEFAULT_CONFIDENCE,
        gt=0.5,
        lt=1.0,
        description="Two-sided confidence level of the bounds (0.5..1, exclusive).",
    )
    max_token_match_rate_drop: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Allowed drop of the prompt-level token match rate (0..1).",
    )
    max_token_agreement_drop: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Allowed drop of the token-level agreement (0..1).",
    )
    max_same_top_rate_drop: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Allowed drop of the same-top-token rate (0..1).",
    )
    max_mean_kl_increase: float | None = Field(
        default=None,
        ge=0.0,
        description="Allowed increase of the mean KL divergence (nats).",
    )
    max_hidden_rel_l2_increase: float | None = Field(
        default=None,
        ge=0.0,
        description=(
            "Allowed increase of the suite mean hidden-state relative L2 error (a ratio with no "
            "unit; 0.01 is one percentage point)."
        ),
    )
