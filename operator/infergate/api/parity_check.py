"""The ParityCheck resource: compare two sides on one prompt suite and give a verdict.

`ParityCheckTemplate` is what an InferenceDeployment carries in
`spec.rollout.parity`; the operator adds the two sides (stable as baseline,
canary as candidate) to make a `ParityCheckSpec`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)

from infergate.api.base import SHORT_TEXT_MAX, URI_MAX, KubeModel, cel, cel_rules
from infergate.api.check_status import ParityCheckStatus
from infergate.api.common import (
    LocalObjectReference,
    ResourceRequirements,
    ShortHash,
)
from infergate.api.golden import GoldenBaseline
from infergate.api.load import Load, Performance
from infergate.api.prompts import CheckSuite, PromptSuite
from infergate.api.shadow import WINDOW_DEFAULT, CheckSource, ShadowSettings
from infergate.api.threshold_ranges import (
    MAX_TOKENS_MAX,
    REGRESSION_RANGES,
    THRESHOLD_RANGES,
    AdmittedRanges,
)
from infergate.parity.fingerprints import FingerprintExpectation
from infergate.parity.thresholds import ProfileName, RegressionTolerance, Thresholds

# Fields of Thresholds and RegressionTolerance that tune how a check measures
# rather than being a check of their own: they cannot be switched off.
CHECK_PARAMETERS = frozenset(
    {
        "maxDivergenceLogprobGap",
        "longPromptTokens",
        "confidence",
        "minPrompts",
        "minLongPrompts",
        "minScoredSteps",
    }
)


# A check is switched off by naming it here rather than by a null threshold:
# `kubectl apply` drops nulls from a manifest, so a null would silently
# bring the profile's limit back.
SWITCHABLE_CHECKS: tuple[str, ...] = tuple(
    name
    for model in (Thresholds, RegressionTolerance)
    for name in (field.alias or key for key, field in model.model_fields.items())
    if name not in CHECK_PARAMETERS
)


def _known_check(name: str) -> str:
    if name not in SWITCHABLE_CHECKS:
        raise ValueError(
            f"disabledChecks: {name!r} is not a check; allowed: {', '.join(SWITCHABLE_CHECKS)}"
        )
    return name


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    return {field.alias or name: name for name, field in model.model_fields.items()}


_THRESHOLD_FIELDS = _field_names(Thresholds)
_REGRESSION_FIELDS = _field_names(RegressionTolerance)


CheckName = Annotated[
    str,
    AfterValidator(_known_check),
    WithJsonSchema({"type": "string", "enum": list(SWITCHABLE_CHECKS), "maxLength": 64}),
]

TOP_LOGPROBS_MAX = 20
SEED_MAX = 2**32 - 1
RUNNER_DEADLINE_MAX = 86400
CHECK_DEADLINE_MAX = 172800


class Sampling(KubeModel):
    """How both sides generate: greedy, fixed seed, top-k logprobs per step."""

    max_tokens: int = Field(default=512, ge=1, le=MAX_TOKENS_MAX)
    """Tokens generated per prompt; first divergences are censored here."""
    temperature: float = Field(
        default=0.0,
        json_schema_extra=cel_rules(
            cel(
                "self == 0.0",
                "temperature must be 0: parity compares greedy outputs, and sampling at a "
                "higher temperature makes two identical engines disagree",
            )
        ),
    )
    """Sampling temperature (no unit); must be 0 (greedy)."""
    seed: int = Field(default=42, ge=0, le=SEED_MAX)
    """Sampling seed (an integer, no unit) sent with every request, for engines that consult it
    even when greedy."""
    top_logprobs: int = Field(default=20, ge=1, le=TOP_LOGPROBS_MAX)
    """Top-k logprobs requested per generated token (a count of tokens; vLLM serves at most 20
    unless started with --max-logprobs). The KL over the top-k plus a tail bucket is a lower
    bound of the full KL: 20 sees more of each distribution (the report gives the covered
    probability mass).
    """

    @model_validator(mode="after")
    def _greedy(self) -> Self:
        if self.temperature != 0.0:
            raise ValueError(
                f"sampling.temperature: {self.temperature} is not allowed; it must be 0 (greedy)"
            )
        return self


class HiddenStates(KubeModel):
    """Probe channel: last-layer hidden states, teacher-forced on the baseline's tokens."""

    enabled: bool = True
    """Compare last-layer hidden states (max abs error, relative L2, cosine, norm ratio) besides
    tokens and logprobs. false: every hidden-state threshold is off with it, and the verdict says
    they were not part of it.
    """
    max_positions_per_prompt: int = Field(default=16384, ge=1, le=1048576)
    """Positions (prompt and generated) compared per prompt, from the start; later ones are skipped.
    """


RUNNER_IMAGE_MESSAGE = (
    "runner.image is no longer accepted: the runner runs the operator's own pinned image "
    "(set by whoever installs the operator, INFERGATE_RUNNER_IMAGE); leave it unset"
)


# More prompts in flight than this only queue inside the engines (the adapter serves
# one request at a time) and hold the runner's memory for their records.
RUNNER_CONCURRENCY_MAX = 8
RUNNER_CONCURRENCY_DEFAULT = 2


class Runner(KubeModel):
    """The Job that drives both sides and computes the verdict."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel("!has(self.image)", RUNNER_IMAGE_MESSAGE, field_path=".image"),
        )
    )

    image: str | None = Field(default=None, min_length=1, max_length=SHORT_TEXT_MAX * 2)
    """Deprecated and refused: the runner always runs the operator's own pinned image. Kept in
    the schema only so that a manifest setting it is told why it is refused."""
    resources: ResourceRequirements | None = None
    """CPU and memory of the runner container."""
    active_deadline_seconds: int = Field(default=3600, ge=60, le=RUNNER_DEADLINE_MAX)
    """Seconds the runner Job may run before it is stopped (the check then ends in Error).
    Budget for more than the suite once: a baseline revision with no self noise kept is
    driven through the suite twice more before its first check whose limits read self noise
    (bf16-kernel, gpu-to-ascend-bf16), to measure and keep it (docs/golden-records.md)."""
    backoff_limit: int = Field(default=1, ge=0, le=10)
    """Retries of a failed runner pod before the check ends in Error."""
    concurrency: int = Field(default=RUNNER_CONCURRENCY_DEFAULT, ge=1, le=RUNNER_CONCURRENCY_MAX)
    """Prompts the runner drives at once. With 1 no two requests overlap: the check is
    slower, and its runner overhead (status.overhead) is exact instead of a range."""

    @model_validator(mode="after")
    def _no_image(self) -> Self:
        if self.image is not None:
            raise ValueError(f"runner.image: {self.image!r} is not allowed; {RUNNER_IMAGE_MESSAGE}")
        return self


DEADLINE_RULE = cel(
    "self.runner.activeDeadlineSeconds <= self.deadlineSeconds",
    "runner.activeDeadlineSeconds must not exceed deadlineSeconds",
    field_path=".runner.activeDeadlineSeconds",
)
_WINDOW_MESSAGE = (
    "shadow.windowSeconds must be below runner.activeDeadlineSeconds: the runner collects "
    "mirrored requests for the whole window and then decides, so a window as long as its "
    "deadline always ends the check in Error"
)
# The runner of a shadow check collects for windowSeconds (default when shadow is unset).
WINDOW_RULE = cel(
    "!has(self.source) || self.source != 'shadow' || "
    f"(has(self.shadow) ? self.shadow.windowSeconds : {WINDOW_DEFAULT}) "
    "< self.runner.activeDeadlineSeconds",
    _WINDOW_MESSAGE,
    field_path=".runner.activeDeadlineSeconds",
)
_P10_MESSAGE = (
    "thresholds.minFirstDivergenceP10 must not exceed sampling.maxTokens: no prompt is "
    "generated past maxTokens, so a longer limit can never be judged"
)
P10_RULE = cel(
    "!has(self.thresholds) || !has(self.thresholds.minFirstDivergenceP10) || "
    "self.thresholds.minFirstDivergenceP10 <= double(self.sampling.maxTokens)",
    _P10_MESSAGE,
    field_path=".thresholds.minFirstDivergenceP10",
)
# Rules across the template's fields, shared by every model built on it (a model's own
# rules replace its base's in the schema, so each lists them).
TEMPLATE_RULES = (DEADLINE_RULE, WINDOW_RULE, P10_RULE)

# A shadow check judges mirrored live requests: no suite, and nothing that drives one.
SOURCE_RULES = (
    cel(
        "has(self.source) && self.source == 'shadow' ? !has(self.suite) : has(self.suite)",
        "suite is required with source suite (the default) and not allowed with source "
        "shadow, which judges mirrored live requests",
        field_path=".suite",
    ),
    cel(
        "!has(self.source) || self.source == 'suite' || "
        "(!has(self.load) && !has(self.performance))",
        "load and performance drive the suite's prompts: not allowed with source shadow",
        field_path=".source",
    ),
)


class ParityCheckTemplate(KubeModel):
    """What to compare and how to judge it; the two sides are added by the operator or the user."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            *TEMPLATE_RULES,
            *SOURCE_RULES,
        )
    )

    source: CheckSource = CheckSource.SUITE
    """suite (default: both sides answer spec.suite) or shadow (live requests reaching the stable
    revision, copied by its InferenceDeployment's mirror to the candidate and scored there
    teacher-forced on stable's answers; needs spec.rollout.mirror on that deployment).
    """
    suite: PromptSuite | None = None
    """Prompts both sides answer: inline, or a ConfigMap key of JSON lines. Required with source
    suite."""
    shadow: ShadowSettings | None = None
    """Sampling, rate and evidence of a shadow check (source shadow; defaults when unset)."""
    load: Load | None = None
    """Also drive the candidate at these concurrency levels with background requests, and compare
    each level's answers with the baseline's at concurrency 1. Unset: the suite runs once."""
    performance: Performance | None = None
    """Limits on throughput and latency regressions under the same load on both sides. Unset:
    speed never blocks."""
    sampling: Sampling = Field(default_factory=Sampling, json_schema_extra={"default": {}})
    """Generation settings shared by both sides (greedy only)."""
    hidden_states: HiddenStates = Field(
        default_factory=HiddenStates, json_schema_extra={"default": {}}
    )
    """Last-layer hidden-state comparison (probe channel)."""
    fingerprints: FingerprintExpectation = FingerprintExpectation.REQUIRED
    """Whether each side must report what it ran (tokenizer, chat template, generation config,
    weights digest, loaded model config, versions): Required (default) or NotExpected. Our
    adapters report them, a vLLM revision through its probe; a side that reports none makes
    a Required check Inconclusive. NotExpected: the sides cannot report them (an endpoint
    serving a plain vLLM); what both report is compared, and the verdict and report say what
    was not.
    """
    profile: ProfileName | None = None
    """Tolerance profile giving default thresholds: bf16-kernel, dtype-change, fp32-cross-framework,
    gpu-to-ascend-bf16 or strict. Unset: chosen from what differs between the two sides; a side
    whose dtype is unknown (an endpoint that does not report it) needs it set.
    """
    thresholds: Annotated[Thresholds, AdmittedRanges("thresholds", THRESHOLD_RANGES)] | None = None
    """Per-metric limits over the profile's (a field left out keeps the profile's limit), and its
    minimum evidence (minPrompts, minLongPrompts, minScoredSteps) and confidence level. Each
    limit must be one a measurement can both pass and fail (each field states its range).
    """
    regression: Annotated[RegressionTolerance, AdmittedRanges("regression", REGRESSION_RANGES)] = (
        Field(default_factory=RegressionTolerance, json_schema_extra={"default": {}})
    )
    """Allowed worsening against the last passing check of the same suite and sampling, judged
    with confidence bounds; an allowance left out is a quarter of the profile limit's headroom.
    """
    disabled_checks: list[CheckName] = Field(
        default_factory=list,
        max_length=len(SWITCHABLE_CHECKS),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    """Threshold or regression keys switched off even where the profile sets them, e.g.
    [maxHiddenRelL2P99, maxMeanKlIncrease]; they win over thresholds and regression.
    """
    runner: Runner = Field(default_factory=Runner, json_schema_extra={"default": {}})
    """The runner Job: image, resources, deadline, retries."""
    deadline_seconds: int = Field(default=7200, ge=60, le=CHECK_DEADLINE_MAX)
    """Seconds from creation until the check ends in Error if it has no verdict (waiting for sides
    included).
    """

    def effective_thresholds(self) -> Thresholds:
        """thresholds with the disabled checks set to null (null: switched off)."""
        given = self.thresholds.model_dump(exclude_unset=True) if self.thresholds else {}
        off = {_THRESHOLD_FIELDS[n]: None for n in self.disabled_checks if n in _THRESHOLD_FIELDS}
        return Thresholds.model_validate({**given, **off})

    def effective_regression(self) -> RegressionTolerance:
        """regression with the disabled checks set to null (null: switched off)."""
        given = self.regression.model_dump(exclude_unset=True)
        off = {_REGRESSION_FIELDS[n]: None for n in self.disabled_checks if n in _REGRESSION_FIELDS}
        return RegressionTolerance.model_validate({**given, **off})

    @model_validator(mode="after")
    def _source(self) -> Self:
        shadow = self.source is CheckSource.SHADOW
        if shadow == (self.suite is not None):
            raise ValueError(
                f"suite is {'not allowed' if shadow else 'required'} with source "
                f"{self.source.value!r}: a shadow check judges mirrored live requests, a suite "
                "check the prompts of suite"
            )
        if shadow and (self.load is not None or self.performance is not None):
            raise ValueError(
                "load and performance are not allowed with source 'shadow': they drive the "
                "suite's prompts"
            )
        return self

    @model_validator(mode="after")
    def _deadlines(self) -> Self:
        if self.runner.active_deadline_seconds > self.deadline_seconds:
            raise ValueError(
                f"runner.activeDeadlineSeconds ({self.runner.active_deadline_seconds}) "
                f"must not exceed deadlineSeconds ({self.deadline_seconds})"
            )
        window = self.shadow.window_seconds if self.shadow is not None else WINDOW_DEFAULT
        if self.source is CheckSource.SHADOW and window >= self.runner.active_deadline_seconds:
            raise ValueError(
                f"runner.activeDeadlineSeconds ({self.runner.active_deadline_seconds}) is not "
                f"allowed with shadow.windowSeconds {window}; {_WINDOW_MESSAGE}"
            )
        return self

    @model_validator(mode="after")
    def _p10_within_max_tokens(self) -> Self:
        p10 = self.thresholds.min_first_divergence_p10 if self.thresholds else None
        if p10 is not None and p10 > self.sampling.max_tokens:
            raise ValueError(
                f"thresholds.minFirstDivergenceP10 ({p10:g}) is not allowed with "
                f"sampling.maxTokens {self.sampling.max_tokens}; {_P10_MESSAGE}"
            )
        return self


# user[:password]@ before the host: a credential that would be stored, logged and reported.
_USERINFO_PATTERN = r"^[A-Za-z][-+.A-Za-z0-9]*://[^/?#]*@"
_USERINFO_MESSAGE = (
    "url must not carry credentials (user:password@): the URL is stored in the check and "
    "shown in logs and reports"
)


class Endpoint(KubeModel):
    """An OpenAI-compatible server outside infergate's control."""

    url: str = Field(
        min_length=1,
        max_length=URI_MAX,
        json_schema_extra=cel_rules(
            cel(
                "isURL(self) && url(self).getScheme() in ['http', 'https'] "
                "&& url(self).getHostname() != ''",
                "url must be an absolute http:// or https:// URL, e.g. http://qwen-baseline.llm.svc:8000",
            ),
            cel(f"!self.matches(r'{_USERINFO_PATTERN}')", _USERINFO_MESSAGE),
        ),
    )
    """Base URL of the server, e.g. http://qwen-baseline.llm.svc:8000, without credentials.

    The runner calls /v1/completions under it.
    """
    model: str = Field(min_length=1, max_length=SHORT_TEXT_MAX)
    """Model name the server expects in requests (its served model name)."""

    @model_validator(mode="after")
    def _absolute_http(self) -> Self:
        if re.match(_USERINFO_PATTERN, self.url):
            raise ValueError(f"endpoint.url is not allowed; {_USERINFO_MESSAGE}")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"endpoint.url: {self.url!r} is not allowed; give an absolute http:// or "
                "https:// URL, e.g. http://qwen-baseline.llm.svc:8000"
            )
        return self


class Side(KubeModel):
    """One side of a comparison: a revision of an InferenceDeployment, or an endpoint."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "[has(self.inferenceDeploymentRef), has(self.endpoint), has(self.golden)]"
                ".filter(x, x).size() == 1",
                "exactly one of inferenceDeploymentRef, endpoint or golden must be set",
            ),
            cel(
                "!has(self.revision) || has(self.inferenceDeploymentRef)",
                "revision selects a revision of an InferenceDeployment; "
                "it cannot be used with endpoint",
                field_path=".revision",
            ),
        )
    )

    inference_deployment_ref: LocalObjectReference | None = None
    """InferenceDeployment in the same namespace whose revision answers. Exclusive with endpoint."""
    revision: ShortHash | None = None
    """Revision of that InferenceDeployment (10 hex digits, as in status.revisions). Unset: its
    stable revision.
    """
    endpoint: Endpoint | None = None
    """A server given by URL. Exclusive with inferenceDeploymentRef and golden."""
    golden: GoldenBaseline | None = None
    """A golden record from the operator's store, in place of running pods (baseline only).
    Exclusive with inferenceDeploymentRef and endpoint."""

    @model_validator(mode="after")
    def _one_side(self) -> Self:
        kinds = [self.inference_deployment_ref, self.endpoint, self.golden]
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError(
                "exactly one of inferenceDeploymentRef, endpoint or golden must be set"
            )
        if self.revision is not None and self.inference_deployment_ref is None:
            raise ValueError(
                "revision selects a revision of an InferenceDeployment; "
                "it cannot be used with endpoint"
            )
        return self


class ParityCheckSpec(ParityCheckTemplate):
    """A parity check: the template plus the two sides to compare."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            *TEMPLATE_RULES,
            *SOURCE_RULES,
            cel(
                "!has(self.candidate.golden)",
                "candidate.golden is not allowed: the candidate is the side being judged and "
                "must run; a golden record can only be the baseline",
            ),
            cel(
                "!has(self.baseline.golden) || has(self.baseline.golden.inferenceDeploymentRef)"
                " || has(self.candidate.inferenceDeploymentRef)",
                "baseline.golden needs an InferenceDeployment: set "
                "baseline.golden.inferenceDeploymentRef, or make the candidate a revision",
            ),
        )
    )

    suite: CheckSuite | None = None
    """Prompts both sides answer: inline, or a ConfigMap key of JSON lines (with the digest of
    its content, which the operator records on the checks it creates). Required with source
    suite."""
    baseline: Side
    """The reference side (in a rollout: the stable revision)."""
    candidate: Side
    """The side being judged (in a rollout: the canary revision)."""

    @model_validator(mode="after")
    def _golden_baseline_only(self) -> Self:
        if self.candidate.golden is not None:
            raise ValueError(
                "candidate.golden is not allowed: the candidate is the side being judged and "
                "must run; a golden record can only be the baseline"
            )
        golden = self.baseline.golden
        if (
            golden is not None
            and golden.inference_deployment_ref is None
            and self.candidate.inference_deployment_ref is None
        ):
            raise ValueError(
                "baseline.golden needs an InferenceDeployment: set "
                "baseline.golden.inferenceDeploymentRef, or make the candidate a revision"
            )
        return self

    def golden_deployment(self) -> str | None:
        """The InferenceDeployment whose golden record is the baseline (None: not golden)."""
        golden = self.baseline.golden
        if golden is None:
            return None
        ref = golden.inference_deployment_ref or self.candidate.inference_deployment_ref
        return ref.name if ref is not None else None


class ParityCheck(KubeModel):
    """A ParityCheck as stored by the API server."""

    api_version: str = "infergate.io/v1alpha1"
    """infergate.io/v1alpha1."""
    kind: str = "ParityCheck"
    """ParityCheck."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Standard object metadata."""
    spec: ParityCheckSpec
    """What to compare and how to judge it."""
    status: ParityCheckStatus | None = None
    """Observed state, written by the operator."""
