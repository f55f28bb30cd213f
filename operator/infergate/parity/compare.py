"""The parity comparison: feed prompt pairs in, one at a time, then finalize into a result.

`ParityComparison` is an accumulator. Per prompt it keeps a handful of numbers (and the
two outputs' token ids, for the worst-prompt display); hidden states go through the
streaming `HiddenStateAccumulator` and are dropped. `compare_sources` drives it over two
readers (anything with `meta`, `prompt_ids`, `get` and iteration, such as
`infergate.recordio.RecordReader`), loading one prompt per side at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Literal, Protocol

import numpy as np

from infergate.parity.hidden import HiddenStateAccumulator, PromptHidden
from infergate.parity.hygiene import HygieneLog, config_differences, nonfinite_logprobs
from infergate.parity.logprobs import LogprobAccumulator, compare_logprobs
from infergate.parity.metrics import (
    POSITION_BUCKETS,
    BucketMetrics,
    FirstDivergence,
    HygieneCheck,
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
from infergate.parity.stats import kaplan_meier
from infergate.parity.thresholds import Thresholds
from infergate.parity.tokens import TokenComparison, compare_tokens, is_collapsed

DEFAULT_LONG_PROMPT_TOKENS = 8192
KL_RATIO_FLOOR = 1e-9
"""Nats added to both buckets' mean KL before the long/short ratio, so 0/0 reads as 1."""
KL_RATIO_NOISE_SHARE = 0.01
"""Share of the profile's maxMeanKl that is noise for the long/short ratio: two runs of
one bf16 config on CPU gave 8K+ / 0-1K KLs of ~2e-7 / ~1e-9 nats (a ratio of 179)
because prefill and decode take different kernels; 1% of the mean-KL limit keeps such
noise out while more than 2e-5 nats at 8K+ over ~0 at 0-1K still fails under bf16."""
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
) -> ParityResult:
    """Compare two records prompt by prompt (baseline order)."""
    comparison = ParityComparison(
        baseline.meta, candidate.meta, thresholds, allowed_config_differences
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


def _kl_ratio_floor(thresholds: Thresholds) -> float:
    """Nats added to both buckets' KL before their ratio (see KL_RATIO_NOISE_SHARE)."""
    if thresholds.max_mean_kl is None:
        return KL_RATIO_FLOOR
    return max(KL_RATIO_FLOOR, thresholds.max_mean_kl * KL_RATIO_NOISE_SHARE)


class ParityComparison:
    """Accumulates prompt pairs; `finalize` returns the `ParityResult`."""

    def __init__(
        self,
        baseline: RecordMeta,
        candidate: RecordMeta,
        thresholds: Thresholds,
        allowed_config_differences: Iterable[str] = (),
    ) -> None:
        self._baseline, self._candidate = baseline, candidate
        self._thresholds = thresholds
        self._long = thresholds.long_prompt_tokens or DEFAULT_LONG_PROMPT_TOKENS
        self._errors: list[str] = []
        self._notes: list[str] = []
        self._hygiene = HygieneLog()
        self._tokens: list[TokenComparison] = []
        self._summaries: list[PromptSummary] = []
        self._outputs: dict[str, PromptOutputs] = {}
        self._logprobs = LogprobAccumulator()
        self._hidden = HiddenStateAccumulator()
        self._hidden_absent = 0
        if baseline.suite != candidate.suite:
            self._errors.append(
                f"suites differ: baseline ran {baseline.suite!r}, candidate ran "
                f"{candidate.suite!r}; both sides must run the same suite"
            )
        if baseline.model != candidate.model:
            self._notes.append(f"model names differ: {baseline.model!r} / {candidate.model!r}")
        self._check_config(allowed_config_differences)

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
        if not np.array_equal(baseline.prompt_token_ids, candidate.prompt_token_ids):
            self._hygiene.flag(
                HygieneCheck.PROMPT_TOKENS_DIFFER,
                "both",
                "prompt token ids differ (tokenizer or chat template drift)",
                pid,
            )
        if nonfinite_logprobs(baseline):
            self._hygiene.flag(HygieneCheck.NON_FINITE, "baseline", "NaN or Inf in logprobs", pid)
        if nonfinite_logprobs(candidate):
            self._hygiene.flag(HygieneCheck.NON_FINITE, "candidate", "NaN or Inf in logprobs", pid)
        if is_collapsed(candidate.output_token_ids) and not is_collapsed(baseline.output_token_ids):
            self._hygiene.flag(
                HygieneCheck.COLLAPSE, "candidate", "output collapsed to one repeated token", pid
            )
        tokens = compare_tokens(baseline, candidate, self._thresholds.max_divergence_logprob_gap)
        self._tokens.append(tokens)
        kl_steps, mean_kl, same_top = 0, None, None
        try:
            steps = compare_logprobs(baseline, candidate, tokens.first_divergence)
            kl_steps, mean_kl, same_top = self._logprobs.add(steps)
        except ParityInputError as err:
            self._errors.append(str(err))
        hidden = self._add_hidden(baseline, candidate)
        summary = PromptSummary(
            prompt_id=pid,
            prompt_tokens=int(baseline.prompt_token_ids.shape[0]),
            baseline_output_tokens=int(baseline.output_token_ids.shape[0]),
            candidate_output_tokens=int(candidate.output_token_ids.shape[0]),
            first_divergence=tokens.first_divergence,
            legitimate=tokens.legitimate,
            legitimacy_note=tokens.legitimacy_note,
            logprob_gap=tokens.logprob_gap,
            kl_steps=kl_steps,
            mean_kl=mean_kl,
            same_top_rate=same_top,
            hidden_tokens=0 if hidden is None else hidden.tokens,
            hidden_max_abs_err=None if hidden is None else hidden.max_abs_err,
            hidden_rel_l2_p99=None if hidden is None else hidden.rel_l2_p99,
            hidden_cosine_p1=None if hidden is None else hidden.cosine_p1,
            hidden_cosine_min=None if hidden is None else hidden.cosine_min,
        )
        if summary.prompt_tokens >= self._long:
            summary = summary.model_copy(
                update={"long": True, "long_failures": self._long_failures(summary)}
            )
        self._summaries.append(summary)
        self._outputs[pid] = PromptOutputs(
            prompt_id=pid,
            baseline_token_ids=baseline.output_token_ids.tolist(),
            candidate_token_ids=candidate.output_token_ids.tolist(),
            baseline_text=baseline.output_text,
            candidate_text=candidate.output_text,
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

    def _long_failures(self, summary: PromptSummary) -> list[str]:
        t = self._thresholds
        failures = []
        fork = summary.first_divergence
        early = t.min_first_divergence_p10
        if fork is not None and (early is None or fork < early):
            failures.append(f"diverged at output token {fork}")
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

    def _check_config(self, allowed: Iterable[str]) -> None:
        differing, one_sided = config_differences(
            self._baseline.effective_config, self._candidate.effective_config, allowed
        )
        if differing:
            detail = "effective config differs: " + "; ".join(differing)
            self._hygiene.flag(HygieneCheck.CONFIG_DIFFERS, "both", detail)
        if one_sided:
            self._notes.append(
                "effective config keys on one side only (not compared): " + ", ".join(one_sided)
            )

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
        metrics = ParityMetrics(
            prompts=len(self._summaries),
            tokens=self._token_metrics(),
            logprobs=self._logprobs.finalize(),
            hidden=hidden,
            buckets=buckets,
            long_sequence=self._long_metrics(buckets),
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
        return TokenMetrics(
            match_rate=Rate.of(len(tokens) - len(diverged), len(tokens)),
            agreement=Rate.of(sum(t.agreed for t in tokens), sum(t.length for t in tokens)),
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

    def _long_metrics(self, buckets: list[BucketMetrics]) -> LongSequenceMetrics:
        long = [s for s in self._summaries if s.long]
        diverged = [s.prompt_id for s in long if s.long_failures]
        short, far = buckets[0], buckets[-1]
        ratio = None
        if short.mean_kl is not None and far.mean_kl is not None:
            floor = _kl_ratio_floor(self._thresholds)
            ratio = (far.mean_kl + floor) / (short.mean_kl + floor)
        drop = None
        if short.same_top_rate is not None and far.same_top_rate is not None:
            drop = short.same_top_rate - far.same_top_rate
        return LongSequenceMetrics(
            min_prompt_tokens=self._long,
            prompts=len(long),
            divergence_rate=Rate.of(len(diverged), len(long)) if long else None,
            diverged_prompts=diverged,
            kl_ratio=ratio,
            same_top_drop=drop,
        )

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


def _side(meta: RecordMeta) -> SideInfo:
    return SideInfo(
        engine=meta.engine,
        engine_version=meta.engine_version,
        dtype=meta.dtype,
        config_hash=meta.config_hash,
        model=meta.model,
        suite=meta.suite,
    )
