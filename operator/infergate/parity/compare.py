"""The parity comparison: feed prompt pairs in, one at a time, then finalize into a result.

`ParityComparison` is an accumulator. Per prompt it keeps a handful of numbers (and the
two outputs' token ids, for the worst-prompt display); hidden states go through the
streaming `HiddenStateAccumulator` and are dropped. `compare_sources` drives it over two
readers (anything with `meta`, `prompt_ids`, `get` and iteration, such as
`infergate.recordio.RecordReader`), loading one prompt per side at a time.

Before any number, the two sides themselves are compared (`sides`: suite, run settings,
config, fingerprints); each prompt pair then goes through its hygiene checks (`hygiene`)
and its measures (`tokens`, `logprobs`, `hidden`; a long prompt also on its own
positions, `long_prompts`).

`finalize` also computes what every threshold decides on (`ParityMetrics.estimates`,
from `token_suite`, `logprob_suite`, `hidden` and `long_prompts`), each with one-sided
bounds at the thresholds' confidence level, and the evidence the comparison rests on
(prompts, long prompts, scored steps), for the verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal, Protocol

from infergate.parity.checks import evaluate_checks
from infergate.parity.control import LADDER, decide_control, perturb
from infergate.parity.decode import (
    PromptDecode,
    decode_estimates,
    decode_evidence,
    decode_metrics,
)
from infergate.parity.fingerprints import FingerprintExpectation
from infergate.parity.hidden import HiddenStateAccumulator, PromptHidden
from infergate.parity.hygiene import HygieneLog, check_prompt_pair
from infergate.parity.limits import LimitSource
from infergate.parity.logprob_suite import LogprobAccumulator, PromptLogprobs
from infergate.parity.logprobs import compare_logprobs
from infergate.parity.long_prompts import (
    DEFAULT_LONG_PROMPT_TOKENS,
    long_estimates,
    long_metrics,
    long_prompt,
)
from infergate.parity.metrics import (
    POSITION_BUCKETS,
    BucketMetrics,
    Evidence,
    HygieneCheck,
    HygieneFinding,
    LongPrompt,
    ParityMetrics,
    ParityResult,
    PromptOutputs,
    PromptSummary,
)
from infergate.parity.power import ControlResult
from infergate.parity.record import ParityInputError, PromptRecord, RecordMeta
from infergate.parity.sides import check_sides, run_keys, side_info
from infergate.parity.thresholds import DEFAULT_CONFIDENCE, Thresholds
from infergate.parity.token_suite import token_estimates, token_metrics
from infergate.parity.tokens import TokenComparison, compare_tokens

WORST_PER_CRITERION = 5
_NAN_HIDDEN = "NaN or Inf in hidden states"

Side = Literal["baseline", "candidate"]


class PromptSource(Protocol):
    """A record to compare: its meta, its prompt ids, and one prompt at a time."""

    @property
    def meta(self) -> RecordMeta: ...

    @property
    def prompt_ids(self) -> Sequence[str]: ...

    def get(self, prompt_id: str) -> PromptRecord: ...

    def __iter__(self) -> Iterator[PromptRecord]: ...


def compare_sources(
    baseline: PromptSource,
    candidate: PromptSource,
    thresholds: Thresholds,
    allowed_config_differences: Iterable[str] = (),
    *,
    disabled: Mapping[str, str] | None = None,
    control: bool = True,
    fingerprints: FingerprintExpectation = FingerprintExpectation.REQUIRED,
    limits: LimitSource | None = None,
) -> ParityResult:
    """Compare two records prompt by prompt (baseline order), with the positive control
    unless `control` is False."""
    comparison = ParityComparison(
        baseline.meta,
        candidate.meta,
        thresholds,
        allowed_config_differences,
        disabled=disabled,
        control=control,
        fingerprints=fingerprints,
        limits=limits,
    )
    candidate_ids = set(candidate.prompt_ids)
    seen: set[str] = set()
    for prompt in baseline:
        seen.add(prompt.prompt_id)
        if prompt.prompt_id in candidate_ids:
            comparison.add(prompt, candidate.get(prompt.prompt_id))
        else:
            comparison.missing(prompt.prompt_id, "candidate")
    for prompt_id in candidate.prompt_ids:
        if prompt_id not in seen:
            comparison.missing(prompt_id, "baseline")
    return comparison.finalize()


class ParityComparison:
    """Accumulates prompt pairs; `finalize` returns the `ParityResult`.

    `disabled` lists threshold keys the profile sets that are not part of this verdict
    (e.g. hidden-state checks with hiddenStates.enabled: false), with why; the verdict
    reports them as such instead of deciding or failing them. `fingerprints` says whether
    a side that reports none leaves the check unverified (`sides`); `limits`, where the
    thresholds come from, is carried into the result for its reports.

    Every prompt's baseline is also scored against itself under the positive control
    (`control`: the final norm scaled by each size of `control.LADDER`), through the same
    limits; `control=False` leaves it out (the control's own comparisons).
    """

    def __init__(
        self,
        baseline: RecordMeta,
        candidate: RecordMeta,
        thresholds: Thresholds,
        allowed_config_differences: Iterable[str] = (),
        *,
        disabled: Mapping[str, str] | None = None,
        control: bool = True,
        fingerprints: FingerprintExpectation = FingerprintExpectation.REQUIRED,
        limits: LimitSource | None = None,
    ) -> None:
        self._baseline, self._candidate = baseline, candidate
        self._limits = limits
        self._thresholds = thresholds
        self._disabled = dict(disabled or {})
        self._long = thresholds.long_prompt_tokens or DEFAULT_LONG_PROMPT_TOKENS
        self._confidence = thresholds.confidence or DEFAULT_CONFIDENCE
        self._errors: list[str] = []
        self._notes: list[str] = []
        self._hygiene = HygieneLog()
        self._tokens: list[TokenComparison] = []
        self._decode: list[PromptDecode] = []
        self._summaries: list[PromptSummary] = []
        self._outputs: dict[str, PromptOutputs] = {}
        self._logprobs = LogprobAccumulator()
        self._hidden = HiddenStateAccumulator()
        self._hidden_absent = 0
        self._long_prompts: list[LongPrompt] = []
        sides = check_sides(
            baseline, candidate, allowed_config_differences, self._hygiene, fingerprints
        )
        self._errors += sides.errors
        self._unverified = sides.unverified
        self._notes += sides.notes
        self._controls = (
            {
                scale: ParityComparison(
                    baseline, baseline, thresholds, disabled=disabled, control=False
                )
                for scale in LADDER
            }
            if control
            else {}
        )

    def failed_before_prompts(self) -> list[HygieneFinding]:
        """What already fails the check before any prompt is measured: the two runs' config
        or fingerprints differ where the profile does not allow it. No prompt can turn such
        a check into a pass, so a runner may measure only a few prompts for the report.
        Empty once a prompt was fed, and whenever the comparison itself is invalid (an
        Error outranks a failure)."""
        if self._summaries or self._errors:
            return []
        findings = self._hygiene.findings()
        if any(f.severity == "Error" for f in findings):
            return []
        return [f for f in findings if f.severity == "Failed"]

    def missing(self, prompt_id: str, side: Side) -> None:
        """Record that a prompt of the suite is absent from one side."""
        self._errors.append(f"prompt {prompt_id!r} is missing from the {side} record")

    def add(self, baseline: PromptRecord, candidate: PromptRecord) -> None:
        """Compare one prompt of the suite; both sides' records of it."""
        pid = baseline.prompt_id
        if candidate.prompt_id != pid:
            raise ParityInputError(f"prompt ids differ: {pid!r} / {candidate.prompt_id!r}")
        if pid in self._outputs:
            self._errors.append(f"prompt {pid!r} appears twice; prompt ids must be unique")
            return
        check_prompt_pair(self._hygiene, baseline, candidate)
        tokens = compare_tokens(
            baseline,
            candidate,
            self._thresholds.max_divergence_logprob_gap,
            dtypes=(self._baseline.dtype, self._candidate.dtype),
        )
        self._tokens.append(tokens)
        self._decode.append(decode_evidence(baseline, candidate, tokens.first_divergence))
        folded: PromptLogprobs | None = None
        try:
            steps = compare_logprobs(baseline, candidate, tokens.first_divergence)
            folded = self._logprobs.add(steps, self._stratum(baseline))
        except ParityInputError as err:
            self._errors.append(str(err))
        hidden = self._add_hidden(baseline, candidate)
        explained = None if tokens.identical else tokens.legitimate is True
        summary = PromptSummary(
            prompt_id=pid,
            prompt_tokens=int(baseline.prompt_token_ids.shape[0]),
            baseline_output_tokens=int(baseline.output_token_ids.shape[0]),
            candidate_output_tokens=int(candidate.output_token_ids.shape[0]),
            first_divergence=tokens.first_divergence,
            legitimate=tokens.legitimate,
            legitimacy_note=tokens.legitimacy_note,
            logprob_gap=tokens.logprob_gap,
            kl_steps=0 if folded is None else folded.kl_steps,
            mean_kl=None if folded is None else folded.mean_kl,
            same_top_rate=None if folded is None else folded.same_top_rate,
            hidden_tokens=0 if hidden is None else hidden.tokens,
            hidden_max_abs_err=None if hidden is None else hidden.max_abs_err,
            hidden_rel_l2_p99=None if hidden is None else hidden.rel_l2_p99,
            hidden_cosine_p1=None if hidden is None else hidden.cosine_p1,
            hidden_cosine_min=None if hidden is None else hidden.cosine_min,
            target_logprob_delta=None if folded is None else folded.target_logprob_delta,
            norm_abs_log_ratio=None if hidden is None else hidden.norm_abs_log_ratio,
            fork_explained=explained,
        )
        if summary.prompt_tokens >= self._long:
            long = long_prompt(summary, folded, hidden, self._thresholds)
            self._long_prompts.append(long)
            summary = summary.model_copy(update={"long": True, "long_failures": long.failures})
        self._summaries.append(summary)
        self._outputs[pid] = PromptOutputs(
            prompt_id=pid,
            baseline_token_ids=baseline.output_token_ids.tolist(),
            candidate_token_ids=candidate.output_token_ids.tolist(),
            baseline_text=baseline.output_text,
            candidate_text=candidate.output_text,
        )
        for scale, comparison in self._controls.items():
            comparison.add(baseline, perturb(baseline, scale))

    def _stratum(self, baseline: PromptRecord) -> str:
        """long (8K+ tokens), chat (rendered by each side's template) or short."""
        if baseline.prompt_token_ids.shape[0] >= self._long:
            return "long"
        return "chat" if "chat" in baseline.tags else "short"

    def _add_hidden(self, baseline: PromptRecord, candidate: PromptRecord) -> PromptHidden | None:
        pid = baseline.prompt_id
        a, b = baseline.hidden_states, candidate.hidden_states
        if a is None and b is None:
            self._hidden_absent += 1
            return None
        if a is None or b is None:
            side = "baseline" if a is None else "candidate"
            self._errors.append(f"prompt {pid!r}: hidden states missing from the {side} record")
            return None
        try:
            hidden = self._hidden.add(pid, a, b)
        except ParityInputError as err:
            self._errors.append(str(err))
            return None
        if hidden.nonfinite_baseline:
            self._hygiene.flag(HygieneCheck.NON_FINITE, "baseline", _NAN_HIDDEN, pid)
        if hidden.nonfinite_candidate:
            self._hygiene.flag(HygieneCheck.NON_FINITE, "candidate", _NAN_HIDDEN, pid)
        return hidden

    # -- finalize ---------------------------------------------------------------------

    def finalize(self) -> ParityResult:
        """Aggregate everything fed in into the suite's metrics."""
        errors = list(self._errors)
        if not self._summaries:
            errors.append("no prompts to compare: the records hold no prompt in common")
        if self._hidden.prompts and self._hidden_absent:
            errors.append(
                f"hidden states recorded for {self._hidden.prompts} prompts but absent on both "
                f"sides for {self._hidden_absent}; record them for all or none"
            )
        hidden, hidden_buckets = (None, None)
        if self._hidden.prompts:
            hidden, hidden_buckets = self._hidden.finalize()
        buckets = self._buckets(hidden_buckets)
        tokens = token_metrics(self._tokens)
        long = long_metrics(self._long_prompts, self._long)
        early = self._thresholds.min_first_divergence_p10
        decode = decode_metrics(self._decode, self._confidence)
        estimates = {
            **token_estimates(self._tokens, self._confidence, early),
            **self._logprobs.estimates(self._confidence),
            **(self._hidden.estimates(self._confidence) if self._hidden.prompts else {}),
            **long_estimates(long, self._confidence, hidden_compared=self._hidden.prompts > 0),
            **decode_estimates(decode),
        }
        metrics = ParityMetrics(
            prompts=len(self._summaries),
            tokens=tokens,
            logprobs=self._logprobs.finalize(),
            hidden=hidden,
            buckets=buckets,
            long_sequence=long,
            decode=decode,
            strata=self._logprobs.stratum_estimates(self._confidence),
            confidence=self._confidence,
            evidence=Evidence(
                prompts=len(self._summaries),
                long_prompts=len(self._long_prompts),
                scored_steps=self._logprobs.scored_steps,
                hidden_tokens=self._hidden.tokens,
            ),
            estimates=estimates,
            run=run_keys(self._baseline.fingerprints, self._candidate.fingerprints),
        )
        return ParityResult(
            baseline=side_info(self._baseline),
            candidate=side_info(self._candidate),
            thresholds=self._thresholds,
            metrics=metrics,
            prompts=self._summaries,
            outputs=[self._outputs[p] for p in self._worst_prompt_ids()],
            hygiene=self._hygiene.findings(),
            errors=errors,
            unverified=list(self._unverified),
            notes=self._notes,
            disabled=self._disabled,
            control=self._control(),
            limits=self._limits,
        )

    def _control(self) -> ControlResult | None:
        """The positive control over the prompts fed (None: not scored, or none fed)."""
        if not self._controls or not self._summaries:
            return None
        outcomes = {}
        for scale, comparison in self._controls.items():
            scored = comparison.finalize()
            outcomes[scale] = evaluate_checks(
                scored.metrics, scored.prompts, self._thresholds, self._disabled
            )
        return decide_control(outcomes, len(self._summaries))

    def _buckets(self, hidden: list[BucketMetrics] | None) -> list[BucketMetrics]:
        lp = self._logprobs
        result = []
        for index, (name, start, end) in enumerate(POSITION_BUCKETS):
            update = lp.bucket(index)
            if hidden is not None:
                result.append(hidden[index].model_copy(update=update))
            else:
                result.append(
                    BucketMetrics(
                        name=name,
                        start=start,
                        end=end,
                        hidden_tokens=0,
                        rel_l2_mean=None,
                        rel_l2_p99=None,
                        cosine_mean=None,
                        cosine_p1=None,
                        max_abs_err=None,
                        **update,
                    )
                )
        return result

    def _worst_prompt_ids(self) -> list[str]:
        s = self._summaries
        ranked: list[list[PromptSummary]] = [
            sorted((p for p in s if p.first_divergence is not None), key=_fork),
            sorted((p for p in s if (p.mean_kl or 0.0) > 0.0), key=lambda p: -(p.mean_kl or 0.0)),
            sorted(
                (p for p in s if p.hidden_cosine_min is not None and p.hidden_cosine_min < 1.0),
                key=lambda p: p.hidden_cosine_min or 0.0,
            ),
            [p for p in s if p.long_failures],
        ]
        flagged = self._hygiene.prompt_ids()
        chosen: dict[str, None] = {}
        for summaries in ranked:
            for p in summaries[:WORST_PER_CRITERION]:
                chosen[p.prompt_id] = None
        for pid in sorted(flagged)[: 2 * WORST_PER_CRITERION]:
            chosen[pid] = None
        return list(chosen)


def _fork(summary: PromptSummary) -> tuple[bool, int]:
    fork = summary.first_divergence
    return (fork is None, fork or 0)
