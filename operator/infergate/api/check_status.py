"""Status of a ParityCheck: progress, metrics and the verdict with its reasons."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from infergate.api.base import MESSAGE_MAX, SHORT_TEXT_MAX, KubeModel, cel, cel_rules
from infergate.api.common import Condition, ConfigMapKeyReference, ObjectName
from infergate.api.enums import CheckPhase, VerdictOutcome
from infergate.api.load import LevelStatus, PerformanceStatus
from infergate.api.shadow import ShadowStatus
from infergate.parity.thresholds import ProfileName


class ProgressStage(StrEnum):
    """What the runner drives the suite for."""

    SUITE = "Suite"
    """The check itself: both sides."""
    BASELINE_NOISE = "BaselineNoise"
    """The baseline revision against itself, its own noise measured before the limits
    (none kept, and the profile's limits read it: docs/golden-records.md)."""


class Progress(KubeModel):
    """How far the runner is through the suite."""

    done: int = Field(ge=0)
    """Prompts finished on both sides."""
    total: int = Field(ge=0)
    """Prompts in the suite."""
    stage: ProgressStage | None = None
    """What the prompts are driven for: Suite (the check) or BaselineNoise (the baseline
    revision's own noise, measured first when none is kept). Unset: Suite."""


class Comparison(StrEnum):
    """>= (the value is a floor to stay above) or <= (a ceiling to stay below)."""

    AT_LEAST = ">="
    AT_MOST = "<="


class VerdictReason(KubeModel):
    """One limit that was passed (or could not be measured)."""

    metric: str = Field(max_length=SHORT_TEXT_MAX)
    """Metric name, e.g. minTokenMatchRate, maxHiddenRelL2P99, hygiene.nan."""
    value: float | None = None
    """Measured value, in the metric's own unit (a share 0..1, nats, tokens or a ratio); unset
    when it could not be measured."""
    threshold: float | None = None
    """Limit the value was judged against, in the metric's own unit (a share 0..1, nats, tokens
    or a ratio); unset for hard failures (hygiene)."""
    comparison: Comparison | None = None
    """How value must relate to threshold to pass: >= (a floor) or <= (a ceiling)."""
    prompts: list[str] = Field(default_factory=list, max_length=100)
    """Ids of the prompts that caused it, worst first (at most 100)."""
    message: str | None = Field(default=None, max_length=MESSAGE_MAX)
    """The reason for people: metric, value, limit and what it means."""


class Verdict(KubeModel):
    """The judgement of the candidate against the baseline."""

    passed: bool
    """True only when every check passed; no verdict, no promotion."""
    outcome: VerdictOutcome | None = None
    """Passed, Failed (measured bad), Inconclusive (not enough evidence: the reasons say what more
    is needed) or Error (could not measure).
    """
    summary: str | None = Field(default=None, max_length=MESSAGE_MAX)
    """One line for people."""
    reasons: list[VerdictReason] = Field(default_factory=list, max_length=256)
    """Every limit that failed, naming the metric, value, threshold and prompts."""
    warnings: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=64
    )
    """Limits passed at the block level but past the warn level, for people."""
    spec_digest: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """sha256 of the spec the verdict judged (canonical JSON); the operator acts on a verdict only
    when it equals the digest it stamped on the check (infergate.io/spec-digest).
    """
    generation: int | None = Field(default=None, ge=0)
    """metadata.generation of the check the verdict judged."""
    suite_digest: str | None = Field(default=None, max_length=64)
    """sha256 of the suite's prompts the verdict judged, as the runner parsed them (equal to
    spec.suite.digest when that is set); unset without a suite (source shadow)."""


class RunnerServiceAccount(KubeModel):
    """The runner's ServiceAccount, the only identity besides the operator that may write status."""

    name: ObjectName
    """Name of the ServiceAccount the operator created for this check's runner."""
    uid: str = Field(min_length=1, max_length=SHORT_TEXT_MAX)
    """Its metadata.uid: a ServiceAccount deleted and created again under the same name is
    another identity and may not write this status."""


class RunnerOverhead(KubeModel):
    """The runner's wall time over the engines' own time for the same requests.

    From two scrapes of each engine's metrics, just before and just after the runner drove
    the suite (vLLM: vllm:e2e_request_latency_seconds; infergate's adapter:
    infergate_adapter_busy_seconds_total). Given only when the engines counted exactly the
    requests the runner sent in that window; otherwise only `error` says why.
    """

    ratio: float | None = Field(default=None, ge=0)
    """Wall seconds over engine seconds: 1.0 is a runner that costs nothing beside the engines.
    Exact with concurrency 1; with more requests in flight the engines may overlap, and this is
    a lower bound."""
    ratio_bound: float | None = Field(default=None, ge=0)
    """The most the ratio can be with `concurrency` requests in flight (concurrency x ratio);
    equals ratio with concurrency 1."""
    wall_seconds: float | None = Field(default=None, ge=0)
    """Seconds the runner spent driving the suite (between the two scrapes)."""
    engine_seconds: float | None = Field(default=None, ge=0)
    """Seconds the engines spent on the runner's requests, summed over every engine."""
    requests: int | None = Field(default=None, ge=0)
    """Requests the engines counted in the window, a count with no unit (equal to those the
    runner sent)."""
    concurrency: int | None = Field(default=None, ge=1)
    """Prompts the runner had in flight at once."""
    error: str | None = Field(default=None, max_length=MESSAGE_MAX)
    """Why no figure could be attributed to this check (another client's requests on an
    engine, an engine restart, metrics not served); unset when the figures are given."""


class GoldenRecordStatus(KubeModel):
    """Where a Passed check's golden records went (the operator's record store), or why
    none were stored."""

    stored: bool
    """Both sides' records are in the store and listed in its index."""
    store: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """The store, as the operator configured it: `directory <path>` or
    `s3 <endpoint>/<bucket>/<prefix>`."""
    suite_digest: str | None = Field(default=None, max_length=64)
    """Content digest of the suite and sampling the records answer."""
    entries: list[Annotated[str, StringConstraints(max_length=SHORT_TEXT_MAX)]] = Field(
        default_factory=list, max_length=2
    )
    """Index entries written (namespace/deployment/name): the baseline's, then the candidate's."""
    size_bytes: int | None = Field(default=None, ge=0)
    """Bytes both records take in the store."""
    message: str | None = Field(default=None, max_length=MESSAGE_MAX)
    """Why nothing was stored, or what the records kept (hidden-state forms)."""


class GoldenBaselineStatus(KubeModel):
    """The golden record a check used as its baseline."""

    entry: str = Field(max_length=SHORT_TEXT_MAX)
    """Index entry (namespace/deployment/name) of the record."""
    store: str = Field(max_length=SHORT_TEXT_MAX)
    """The store it was read from."""
    revision: str = Field(max_length=SHORT_TEXT_MAX)
    """Revision the record was made of."""
    recorded: datetime
    """When the record was made (the check that stored it)."""
    check: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """The Passed check that stored it."""


TERMINAL_PHASES = (
    CheckPhase.PASSED,
    CheckPhase.FAILED,
    CheckPhase.INCONCLUSIVE,
    CheckPhase.ERROR,
)
FINAL_FIELDS = (
    "phase",
    "verdict",
    "baselineRevision",
    "candidateRevision",
    "metrics",
    "completionTime",
    "golden",
)
"""What a check's end fixes for good: the verdict and everything a rollout or the drift
watch reads of it. Conditions (resources released), progress and the runner's identity may
still be written after the end."""


def _final_rule() -> dict[str, str]:
    """A transition rule: once status.phase is terminal, no writer changes the FINAL_FIELDS
    (a retried runner, the controller's Error, a forger with status rights alike)."""
    ended = ", ".join(f"'{p.value}'" for p in TERMINAL_PHASES)
    kept = " && ".join(
        f"has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f})"
        for f in FINAL_FIELDS
    )
    return cel(
        f"!has(oldSelf.phase) || !(oldSelf.phase in [{ended}]) || ({kept})",
        "a ParityCheck that ended (phase Passed, Failed, Inconclusive or Error) keeps its "
        f"verdict: {', '.join(FINAL_FIELDS)} cannot change any more; create a new check to "
        "judge again",
        reason="FieldValueForbidden",
    )


class ParityCheckStatus(KubeModel):
    """Observed state of a ParityCheck, written by the operator."""

    model_config = ConfigDict(json_schema_extra=cel_rules(_final_rule()))

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation last acted on."""
    phase: CheckPhase | None = None
    """Pending, Running, Passed, Failed (measured bad), Inconclusive (not enough evidence) or Error
    (could not measure).
    """
    job_name: ObjectName | None = None
    """Name of the runner Job."""
    runner_service_account: RunnerServiceAccount | None = None
    """The runner's ServiceAccount (name and uid), written by the operator before the runner
    starts; the admission policy lets only it and the operator write this status, and the runner
    may not change it."""
    start_time: datetime | None = None
    """When the runner Job started."""
    completion_time: datetime | None = None
    """When the verdict was reached or the check ended in Error."""
    profile: ProfileName | None = None
    """Tolerance profile in effect (resolved when spec.profile is unset)."""
    baseline_revision: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """Revision the baseline resolved to (for an InferenceDeployment side)."""
    candidate_revision: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """Revision the candidate resolved to (for an InferenceDeployment side)."""
    progress: Progress | None = None
    """Prompts done out of the suite."""
    metrics: dict[str, float] | None = Field(default=None, max_length=512)
    """Suite-level metrics by name, e.g. tokenMatchRate, meanKl, hiddenCosineP1."""
    verdict: Verdict | None = None
    """Outcome with the reasons for a failure."""
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Latest observations: Complete, Passed, Failed, Inconclusive, Error; Ready (ended
    Passed), Reconciling (running) and Stalled (ended otherwise) read off them for tools."""
    report_ref: ConfigMapKeyReference | None = None
    """ConfigMap key holding the full report (per-prompt metrics)."""
    overhead: RunnerOverhead | None = None
    """The runner's wall time over the engines' own time for the suite's requests (goal: at
    most 1.10), or why it could not be attributed."""
    load: list[LevelStatus] = Field(default_factory=list, max_length=8)
    """Each concurrency level of spec.load against the baseline at concurrency 1."""
    performance: PerformanceStatus | None = None
    """Both sides' throughput and latency under the same load, and the judged changes."""
    shadow: ShadowStatus | None = None
    """What the mirror copied and scored (source shadow)."""
    golden: GoldenRecordStatus | None = None
    """Golden records of this check: where they went (only a Passed check stores them)."""
    golden_baseline: GoldenBaselineStatus | None = None
    """The golden record used as the baseline, when spec.baseline.golden is set."""
