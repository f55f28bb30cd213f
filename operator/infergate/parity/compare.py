"""The parity comparison: feed prompt pairs in, one at a time, then finalize into a result.

`ParityComparison` is an accumulator. Per prompt it keeps a handful of numbers (and the
two outputs' token ids, for the worst-prompt display); hidden states go through the
streaming `HiddenStateAccumulator` and are dropped. `compare_sources` drives it over two
readers (anything with `meta`, `prompt_ids`, `get` and iteration, such as
`infergate.recordio.RecordReader`), loading one prompt per side at a time.

Before any number, the two sides' fingerprints are compared (`parity.fingerprints`):
a difference the profile does not expect, or a key on one side only, is a hygiene
failure naming the key and both values.

`finalize` also computes what every threshold decides on (`ParityMetrics.estimates`),
each with one-sided bounds at the thresholds' confidence level, and the evidence the
comparison rests on (prompts, long prompts, scored steps), for the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from infergate.parity.fingerprints import RUN_GROUPS, compare_fingerprints
from infergate.parity.hidden import HiddenStateAccumulator, PromptHidden
from infergate.parity.hygiene import HygieneLog, config_differences, nonfinite_logprobs
from infergate.parity.logprob_suite import LogprobAccumulator, PromptLogprobs
from infergate.parity.logprobs import compare_logprobs
from infergate.parity.metrics import (
    POSITION_BUCKETS,
    BucketMetrics,
    Estimate,
    Evidence,
    FirstDivergence,
    HygieneCheck,
    HygieneFinding,
    LongPrompt,
    LongSequenceMetrics,
    ParityMetrics,
    ParityResult,
    PromptOutputs,
    PromptSummary,
    Rate,
    SideInfo,
    SurvivalPoint,
    TokenMetrics,
)
from infergate.parity.record import ParityInputError, PromptRecord, RecordMeta
from infergate.parity.stats import (
    clustered_bounds,
    clustered_rate_bounds,
    kaplan_meier,
    per_prompt_bounds,
    wilson_bounds,
)
from infergate.parity.thresholds import DEFAULT_CONFIDENCE, Thresholds
from infergate.parity.tokens import TokenComparison, compare_tokens, is_collapsed

DEFAULT_LONG_PROMPT_TOKENS = 8192
KL_RATIO_FLOOR = 1e-9
"""Nats added to both buckets' mean KL before the long/short ratio, so 0/0 reads as 1."""
HIDDEN_RATIO_FLOOR = 1e-9
"""Relative L2 added to both buckets' mean before the long/short hidden ratio."""
WORST_PER_CRITERION = 5
_NAN_HIDDEN = "NaN or Inf in hidden states"
_NAN_LOGPROBS = "NaN or Inf in logprobs"
_SHORT = 0
"""Index of the 0-1K bucket in POSITION_BUCKETS."""

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
) -> ParityResult:
    """Compare two records prompt by prompt (baseline order)."""
    comparison = ParityComparison(
        baseline.meta, candidate.meta, thresholds, allowed_config_differences, disabled=disabled
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


def ratio_floor(allowance: float | None, limit: float | None, minimum: float) -> float:
    """What both buckets get before a far / near ratio: allowance / (limit - 1).

    With that floor f, (far + f) / (near + f) > limit exactly when
    far > limit * near + allowance: a long prompt degrades when its far positions grow past
    `limit` times its near ones by more than the profile allows at any position
    (`allowance`: maxMeanKl for KL, maxHiddenRelL2P99 for hidden states). Growth that stays
    inside the allowance is not a long-context signal: on the trained fixture every change,
    benign ones included, grows a prompt's own KL 1.2-3.7x from 0-1K to 8K+ (bf16 vs fp32
    3.1x, AVX2 kernels 2.7x at KLs of 1e-6..8e-5; experiments/GATE_BENCH.md, "Long
    prompts"), while a rope error grows it by orders of magnitude; at Qwen2.5-7B shape bf16
    noise is flat with position (experiments/RESULTS.md). Two runs of one bf16 config on
    CPU gave 8K+ / 0-1K KLs of ~2e-7 / ~1e-9 nats (a bare ratio of 179: prefill and decode
    take different kernels), which this floor also keeps out.
    """
    if allowance is None or limit is None or limit <= 1.0:
        return minimum
    return max(minimum, allowance / (limit - 1.0))


def _kl_ratio_floor(thresholds: Thresholds) -> float:
    return ratio_floor(
        thresholds.max_mean_kl, thresholds.max_long_to_short_kl_ratio, KL_RATIO_FLOOR
    )


def _hidden_ratio_floor(thresholds: Thresholds) -> float:
    return ratio_floor(
        thresholds.max_hidden_rel_l2_p99,
        thresholds.max_long_to_short_hidden_ratio,
        HIDDEN_RATIO_FLOOR,
    )


class ParityComparison:
    """Accumulates prompt pairs; `finalize` returns the `ParityResult`.

    `disabled` lists threshold keys the profile sets that are not part of this verdict
    (e.g. hidden-state checks with hiddenStates.enabled: false), with why; the verdict
    reports them as such instead of deciding or failing them.
    """

    def __init__(
        self,
        baseline: RecordMeta,
        candidate: RecordMeta,
        thresholds: Thresholds,
        allowed_config_differences: Iterable[str] = (),
        *,
        disabled: Mapping[str, str] | None = None,
    ) -> None:
        self._baseline, self._candidate = baseline, candidate
        self._thresholds = thresholds
        self._disabled = dict(disabled or {})
        self._long = thresholds.long_prompt_tokens or DEFAULT_LONG_PROMPT_TOKENS
        self._confidence = thresholds.confidence or DEFAULT_CONFIDENCE
        self._errors: list[str] = []
        self._notes: list[str] = []
        self._hygiene = HygieneLog()
        self._tokens: list[TokenComparison] = []
        self._summaries: list[PromptSummary] = []
        self._outputs: dict[str, PromptOutputs] = {}
        self._logprobs = LogprobAccumulator()
        self._hidden = HiddenStateAccumulator()
        self._hidden_absent = 0
        self._long_prompts: list[LongPrompt] = []
        allowed = tuple(allowed_config_differences)
        self._check_suite()
        if baseline.model != candidate.model:
            self._notes.append(f"model names differ: {baseline.model!r} / {candidate.model!r}")
        self._check_config(allowed)
        self._check_fingerprints(allowed)

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
        self._check_prompt_hygiene(baseline, candidate)
        tokens = compare_tokens(
            baseline,
            candidate,
            self._thresholds.max_divergence_logprob_gap,
            dtypes=(self._baseline.dtype, self._candidate.dtype),
        )
        self._tokens.append(tokens)
        folded: PromptLogprobs | None = None
        try:
            steps = compare_logprobs(baseline, candidate, tokens.first_divergence)
            folded = self._logprobs.add(steps)
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
            long = self._long_prompt(summary, folded, hidden)
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

    def _check_prompt_hygiene(self, baseline: PromptRecord, candidate: PromptRecord) -> None:
        pid = baseline.prompt_id
        if not np.array_equal(baseline.prompt_token_ids, candidate.prompt_token_ids):
            self._hygiene.flag(
                HygieneCheck.PROMPT_TOKENS_DIFFER,
                "both",
                "prompt token ids differ (tokenizer, special tokens or chat template drift): "
                + _first_difference(baseline.prompt_token_ids, candidate.prompt_token_ids),
                pid,
            )
        if nonfinite_logprobs(baseline):
            self._hygiene.flag(HygieneCheck.NON_FINITE, "baseline", _NAN_LOGPROBS, pid)
        if nonfinite_logprobs(candidate):
            self._hygiene.flag(HygieneCheck.NON_FINITE, "candidate", _NAN_LOGPROBS, pid)
        if is_collapsed(candidate.output_token_ids) and not is_collapsed(baseline.output_token_ids):
            self._hygiene.flag(
                HygieneCheck.COLLAPSE, "candidate", "output collapsed to one repeated token", pid
            )

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

    def _long_prompt(
        self, summary: PromptSummary, folded: PromptLogprobs | None, hidden: PromptHidden | None
    ) -> LongPrompt:
        """A long prompt's own positions: its farthest bucket against its 0-1K bucket."""
        short_kl = far_kl = short_same = far_same = short_rel = far_rel = None
        ratio = hidden_ratio = None
        if folded is not None:
            far = _farthest(folded.bucket_kl_steps)
            if far is not None:
                short_kl = float(folded.bucket_kl[_SHORT] / folded.bucket_kl_steps[_SHORT])
                far_kl = float(folded.bucket_kl[far] / folded.bucket_kl_steps[far])
                floor = _kl_ratio_floor(self._thresholds)
                ratio = (far_kl + floor) / (short_kl + floor)
            far = _farthest(folded.bucket_same_total)
            if far is not None:
                short_same = float(folded.bucket_same[_SHORT] / folded.bucket_same_total[_SHORT])
                far_same = float(folded.bucket_same[far] / folded.bucket_same_total[far])
        if hidden is not None and hidden.bucket_tokens.size:
            far = _farthest(hidden.bucket_tokens)
            if far is not None:
                short_rel = float(hidden.bucket_rel_l2[_SHORT] / hidden.bucket_tokens[_SHORT])
                far_rel = float(hidden.bucket_rel_l2[far] / hidden.bucket_tokens[far])
                floor = _hidden_ratio_floor(self._thresholds)
                hidden_ratio = (far_rel + floor) / (short_rel + floor)
        return LongPrompt(
            prompt_id=summary.prompt_id,
            tokens=summary.prompt_tokens,
            short_kl=short_kl,
            far_kl=far_kl,
            kl_ratio=ratio,
            short_same_top=short_same,
            far_same_top=far_same,
            short_rel_l2=short_rel,
            far_rel_l2=far_rel,
            hidden_ratio=hidden_ratio,
            failures=self._long_failures(summary),
        )

    def _long_failures(self, summary: PromptSummary) -> list[str]:
        """Why a long prompt fails on its own: an unexplained early fork or its own metrics."""
        t = self._thresholds
        failures = []
        fork = summary.first_divergence
        early = t.min_first_divergence_p10
        if fork is not None and summary.fork_explained is False and (early is None or fork < early):
            failures.append(f"unexplained fork at output token {fork} ({summary.legitimacy_note})")
        if t.max_mean_kl is not None and (summary.mean_kl or 0.0) > t.max_mean_kl:
            failures.append(f"mean KL {summary.mean_kl:.3g} > {t.max_mean_kl:.3g}")
        rel = summary.hidden_rel_l2_p99
        if (
            t.max_hidden_rel_l2_p99 is not None
            and rel is not None
            and rel > t.max_hidden_rel_l2_p99
        ):
            failures.append(f"hidden relL2 P99 {rel:.3g} > {t.max_hidden_rel_l2_p99:.3g}")
        cos = summary.hidden_cosine_p1
        if t.min_hidden_cosine_p1 is not None and cos is not None and cos < t.min_hidden_cosine_p1:
            failures.append(f"hidden cosine P1 {cos:.6g} < {t.min_hidden_cosine_p1:.6g}")
        return failures

    # -- sides ------------------------------------------------------------------------

    def _check_suite(self) -> None:
        a = self._baseline.fingerprints.get("suite.digest")
        b = self._candidate.fingerprints.get("suite.digest")
        if a is not None and b is not None:
            if self._baseline.suite != self._candidate.suite:
                self._notes.append(
                    f"suite names differ ({self._baseline.suite!r} / {self._candidate.suite!r}); "
                    "compared by content digest"
                )
            return  # digests are compared with the other run fingerprints
        if self._baseline.suite != self._candidate.suite:
            self._errors.append(
                f"suites differ: baseline ran {self._baseline.suite!r}, candidate ran "
                f"{self._candidate.suite!r}; both sides must run the same suite"
            )
        self._notes.append("suite content digest not recorded: suites compared by name only")

    def _check_config(self, allowed: Iterable[str]) -> None:
        differing, one_sided = config_differences(
            self._baseline.effective_config, self._candidate.effective_config, allowed
        )
        if differing:
            detail = "effective config differs: " + "; ".join(differing)
            self._hygiene.flag(HygieneCheck.CONFIG_DIFFERS, "both", detail)
        if one_sided:
            self._notes.append(
                "pinned config keys on one side only (compared through the fingerprints' "
                "model_config.* where both sides report it): " + ", ".join(one_sided)
            )

    def _check_fingerprints(self, expected: Iterable[str]) -> None:
        a, b = self._baseline.fingerprints, self._candidate.fingerprints
        if not a and not b:
            self._notes.append(
                "no fingerprints recorded on either side: tokenizer, chat template, generation "
                "config, weights, loaded model config and versions were not compared"
            )
            return
        found = compare_fingerprints(a, b, expected)
        for diff in found.run_differences:
            self._errors.append(
                f"the two sides did not run the same check: {diff.describe()}; the runner "
                "must give both the same suite and sampling"
            )
        for diff in found.differing:
            self._hygiene.flag(HygieneCheck.FINGERPRINT_DIFFERS, "both", diff.describe())
        for key, side in found.one_sided:
            if key.startswith(RUN_GROUPS):
                self._errors.append(f"fingerprint {key} recorded by the {side} only")
                continue
            other = "candidate" if side == "baseline" else "baseline"
            self._hygiene.flag(
                HygieneCheck.FINGERPRINT_MISSING,
                "both",
                f"{key}: {_value(a.get(key, b.get(key)))} on the {side}, absent on the {other}",
            )
        if found.expected:
            self._notes.append(
                "expected differences under this profile: "
                + "; ".join(d.describe() for d in found.expected)
            )

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
        tokens = self._token_metrics()
        long = self._long_metrics()
        estimates = {
            **self._token_estimates(),
            **self._logprobs.estimates(self._confidence),
            **(self._hidden.estimates(self._confidence) if self._hidden.prompts else {}),
            **self._long_estimates(long),
        }
        metrics = ParityMetrics(
            prompts=len(self._summaries),
            tokens=tokens,
            logprobs=self._logprobs.finalize(),
            hidden=hidden,
            buckets=buckets,
            long_sequence=long,
            confidence=self._confidence,
            evidence=Evidence(
                prompts=len(self._summaries),
                long_prompts=len(self._long_prompts),
                scored_steps=self._logprobs.scored_steps,
                hidden_tokens=self._hidden.tokens,
            ),
            estimates=estimates,
            run=_run_keys(self._baseline.fingerprints, self._candidate.fingerprints),
        )
        return ParityResult(
            baseline=_side(self._baseline),
            candidate=_side(self._candidate),
            thresholds=self._thresholds,
            metrics=metrics,
            prompts=self._summaries,
            outputs=[self._outputs[p] for p in self._worst_prompt_ids()],
            hygiene=self._hygiene.findings(),
            errors=errors,
            notes=self._notes,
            disabled=self._disabled,
        )

    def _token_metrics(self) -> TokenMetrics:
        tokens = self._tokens
        diverged = [t for t in tokens if not t.identical]
        curve = kaplan_meier([t.first_divergence for t in tokens], [t.agreed for t in tokens])
        median, median_censored = curve.quantile(0.5)
        p10, p10_censored = curve.quantile(0.1)
        judged = [t.legitimate for t in diverged]
        legit = None
        if None not in judged:
            legit = Rate.of(sum(1 for j in judged if j), len(judged))
        gaps = np.asarray([t.logprob_gap for t in diverged if t.logprob_gap is not None])
        agreed = [t.agreed for t in tokens]
        lengths = [t.length for t in tokens]
        agreement_se = _step_rate_stderr(agreed, lengths)
        return TokenMetrics(
            match_rate=Rate.of(len(tokens) - len(diverged), len(tokens)),
            agreement=Rate.of(sum(agreed), sum(lengths), stderr=agreement_se, clusters=len(tokens)),
            first_divergence=FirstDivergence(
                prompts=len(tokens),
                diverged=len(diverged),
                median=median,
                median_censored=median_censored,
                p10=p10,
                p10_censored=p10_censored,
                horizon=curve.horizon,
                survival=[
                    SurvivalPoint(position=p, surviving=s)
                    for p, s in zip(curve.positions, curve.surviving, strict=True)
                ],
            ),
            legitimate_divergence_rate=legit,
            divergence_logprob_gap_median=float(np.median(gaps)) if gaps.size else None,
            divergence_logprob_gap_max=float(gaps.max()) if gaps.size else None,
        )

    def _token_estimates(self) -> dict[str, Estimate]:
        c = self._confidence
        tokens = self._tokens
        n = len(tokens)
        out: dict[str, Estimate] = {}
        matched = sum(1 for t in tokens if t.identical)
        out["tokenMatchRate"] = _wilson(matched, n, c, "prompts")
        value, low, high = clustered_rate_bounds(
            [t.agreed for t in tokens], [t.length for t in tokens], c
        )
        out["tokenAgreement"] = Estimate(
            value=value, lower=low, upper=high, evidence=sum(t.length for t in tokens),
            unit="steps", method="cluster-t+wilson",
        )  # fmt: skip
        unexplained = sum(1 for t in tokens if not t.identical and t.legitimate is not True)
        out["illegitimateDivergenceRate"] = _wilson(unexplained, n, c, "prompts")
        diverged = [t for t in tokens if not t.identical]
        if diverged:
            out["legitimateDivergenceRate"] = _wilson(
                sum(1 for t in diverged if t.legitimate is True), len(diverged), c, "prompts"
            )
        else:
            out["legitimateDivergenceRate"] = Estimate(
                value=1.0, lower=1.0, upper=1.0, evidence=0, unit="prompts",
                method="no forks to judge",
            )  # fmt: skip
        limit = self._thresholds.min_first_divergence_p10
        if limit is not None:
            early, observed = 0, 0
            for t in tokens:
                fork = t.first_divergence
                if fork is not None and fork < limit and t.legitimate is not True:
                    early += 1
                    observed += 1
                elif fork is not None and fork < limit:
                    observed += 1  # an explained early fork: observed, not counted
                elif t.length >= limit or (fork is not None and fork >= limit):
                    observed += 1
            out["earlyForkRate"] = _wilson(early, observed, c, "prompts")
        return out

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

    def _long_metrics(self) -> LongSequenceMetrics:
        long = self._long_prompts
        diverged = [p.prompt_id for p in long if p.failures]
        ratios = [math.log(p.kl_ratio) for p in long if p.kl_ratio is not None]
        drops = [
            p.short_same_top - p.far_same_top
            for p in long
            if p.short_same_top is not None and p.far_same_top is not None
        ]
        hidden = [math.log(p.hidden_ratio) for p in long if p.hidden_ratio is not None]
        return LongSequenceMetrics(
            min_prompt_tokens=self._long,
            prompts=len(long),
            divergence_rate=Rate.of(len(diverged), len(long)) if long else None,
            diverged_prompts=diverged,
            kl_ratio=math.exp(sum(ratios) / len(ratios)) if ratios else None,
            same_top_drop=sum(drops) / len(drops) if drops else None,
            hidden_ratio=math.exp(sum(hidden) / len(hidden)) if hidden else None,
            per_prompt=long,
        )

    def _long_estimates(self, metrics: LongSequenceMetrics) -> dict[str, Estimate]:
        c = self._confidence
        long = self._long_prompts
        if not long:
            return {}
        out = {"longSeqDivergenceRate": _wilson(len(metrics.diverged_prompts), len(long), c,
                                                "long prompts")}  # fmt: skip

        def paired(values: list[float], log: bool) -> Estimate:
            found = per_prompt_bounds(values, c)
            convert = math.exp if log else float
            return Estimate(
                value=None if found.value is None else convert(found.value),
                lower=None if found.lower is None else convert(found.lower),
                upper=None if found.upper is None else convert(found.upper),
                evidence=found.count, unit="long prompts", method="paired-t",
            )  # fmt: skip

        out["longToShortKlRatio"] = paired(
            [math.log(p.kl_ratio) for p in long if p.kl_ratio is not None], log=True
        )
        out["longSameTopDrop"] = paired(
            [
                p.short_same_top - p.far_same_top
                for p in long
                if p.short_same_top is not None and p.far_same_top is not None
            ],
            log=False,
        )
        hidden = [math.log(p.hidden_ratio) for p in long if p.hidden_ratio is not None]
        if hidden or self._hidden.prompts:
            out["longToShortHiddenRatio"] = paired(hidden, log=True)
        return out

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


def _farthest(counts: NDArray[np.int64]) -> int | None:
    """The last non-empty bucket past 0-1K, when 0-1K itself has data; else None."""
    if counts.size == 0 or counts[_SHORT] == 0:
        return None
    filled = np.flatnonzero(counts[1:] > 0)
    return None if filled.size == 0 else int(filled[-1]) + 1


def _step_rate_stderr(hits: list[int], totals: list[int]) -> float | None:
    return clustered_bounds([float(h) for h in hits], totals, DEFAULT_CONFIDENCE).stderr


def _wilson(successes: int, total: int, confidence: float, unit: str) -> Estimate:
    low, high = wilson_bounds(successes, total, confidence)
    return Estimate(
        value=successes / total if total else None,
        lower=low,
        upper=high,
        evidence=total,
        unit=unit,
        method="wilson",
    )


def _first_difference(a: NDArray[np.int64], b: NDArray[np.int64]) -> str:
    common = min(a.shape[0], b.shape[0])
    mismatch = np.flatnonzero(a[:common] != b[:common])
    at = int(mismatch[0]) if mismatch.size else common
    head_a, head_b = a[at : at + 4].tolist(), b[at : at + 4].tolist()
    return (
        f"first at position {at} (baseline {head_a}, candidate {head_b}; "
        f"lengths {a.shape[0]} / {b.shape[0]})"
    )


def _value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _run_keys(a: Mapping[str, object], b: Mapping[str, object]) -> dict[str, object]:
    """The run fingerprints both sides agree on: what makes two checks comparable."""
    keys = {k for k in a if k.startswith(RUN_GROUPS)} & {k for k in b if k.startswith(RUN_GROUPS)}
    return {k: a[k] for k in sorted(keys) if a[k] == b[k]}


def _fork(summary: PromptSummary) -> tuple[bool, int]:
    fork = summary.first_divergence
    return (fork is None, fork or 0)


def _side(meta: RecordMeta) -> SideInfo:
    return SideInfo(
        engine=meta.engine,
        engine_version=meta.engine_version,
        dtype=meta.dtype,
        config_hash=meta.config_hash,
        model=meta.model,
        suite=meta.suite,
        fingerprints=dict(meta.fingerprints),
    )
