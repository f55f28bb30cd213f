"""Parity under load and performance beside numerics, after the suite's own comparison.

Levels (`spec.load`): at each concurrency level the candidate answers the suite's
prompts mixed among `backgroundRequests` synthetic ones (long outputs: the KV cache
fills, requests are preempted and recomputed where the engine runs short), each suite
answer scored teacher-forced on the baseline's answer under the same load. Each
level's records are compared with the baseline's at concurrency 1 (kept from the
suite run) by the parity core, with the check's thresholds (hidden-state limits left
out: the probes are not under load), and judged like the suite. The candidate's own
preemption counter is read before and after each level.

Performance (`spec.performance`): `repeats` runs of `requests` synthetic requests at
the highest level, sent to both sides at the same moment; throughput, TTFT and ITL of
each side per run, judged on paired bounds (`infergate.runner.performance`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from infergate.api.check_status import VerdictReason
from infergate.api.load import LevelStatus, Load, Performance, PerformanceStatus
from infergate.api.parity_check import ParityCheckSpec
from infergate.parity.compare import ParityComparison
from infergate.parity.profiles import Gate
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.parity.verdict import decide
from infergate.plan.check.status import Judgement
from infergate.runner.combine import judged
from infergate.runner.load_drive import (
    LoadRequest,
    RunResult,
    drive,
    drive_both,
    read_preemptions,
)
from infergate.runner.performance import (
    Figures,
    Limits,
    figures,
    judge_performance,
    side_figures,
)
from infergate.runner.shadow import without_hidden
from infergate.runner.sides import SideTarget
from infergate.runner.summary import judgement

DEFAULT_PERFORMANCE_CONCURRENCY = 8
_PROMPT_LENGTHS = (16, 64)


@dataclass
class LoadOutcome:
    """What the load drive adds to a check: judgements, headline metrics, status, report."""

    judgements: list[tuple[str, Judgement]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)


def synthetic_prompts(kept: Sequence[PromptRecord], count: int, seed: int) -> list[list[int]]:
    """Background prompts: token ids drawn from the suite's own prompts (ids the tokenizer
    makes), of varied lengths, the same for every level and side."""
    pool = [int(t) for record in kept for t in record.prompt_token_ids.tolist()]
    if not pool:
        pool = [1]
    rng = random.Random(seed)  # noqa: S311 - reproducible load, not secrets
    return [[rng.choice(pool) for _ in range(rng.randint(*_PROMPT_LENGTHS))] for _ in range(count)]


def level_requests(
    kept: Sequence[PromptRecord], load: Load, top_logprobs: int, seed: int
) -> list[LoadRequest]:
    """The suite's prompts spread evenly among the background requests (in flight together)."""
    background = [
        LoadRequest(f"bg-{i}", tuple(p), load.background_max_tokens, seed=seed)
        for i, p in enumerate(synthetic_prompts(kept, load.background_requests, seed))
    ]
    suite = [
        LoadRequest(
            record.prompt_id,
            tuple(int(t) for t in record.prompt_token_ids.tolist()),
            max(1, int(record.output_token_ids.shape[0])),
            top_logprobs,
            seed,
            tuple(int(t) for t in record.output_token_ids.tolist()),
        )
        for record in kept
    ]
    out: list[LoadRequest] = []
    taken = 0
    for index, request in enumerate(suite):
        # Background before the index-th suite prompt: the suite lands evenly among it.
        upto = round((index + 1) * len(background) / (len(suite) + 1))
        out += background[taken:upto]
        taken = max(taken, upto)
        out.append(request)
    return out + background[taken:]


def level_records(
    kept: Sequence[PromptRecord], run: RunResult
) -> list[tuple[PromptRecord, PromptRecord]]:
    """(baseline at concurrency 1, candidate at this level) of every suite prompt."""
    answers = {a.id: a for a in run.answers}
    pairs = []
    for record in kept:
        answer = answers[record.prompt_id]
        completion = answer.completion
        assert completion is not None  # noqa: S101 - suite requests ask for logprobs
        pairs.append(
            (
                record,
                PromptRecord(
                    prompt_id=record.prompt_id,
                    prompt_token_ids=record.prompt_token_ids,
                    output_token_ids=np.asarray(completion.token_ids, np.int64),
                    top_logprobs=completion.top,
                    teacher_forced=answer.forced,
                    output_text=completion.text,
                    tags=dict(record.tags),
                ),
            )
        )
    return pairs


def level_status(
    concurrency: int, verdict: Judgement, result_metrics: Mapping[str, float], preempted: int | None
) -> LevelStatus:
    return LevelStatus(
        concurrency=concurrency,
        phase=verdict.phase,
        prompts=int(result_metrics.get("prompts", 0)),
        token_match_rate=result_metrics.get("tokenMatchRate"),
        mean_kl=result_metrics.get("meanKl"),
        same_top_rate=result_metrics.get("sameTopRate"),
        preemptions=preempted,
        summary=verdict.summary[:4096],
    )


def _delta(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else max(0, after - before)


def performance_requests(
    kept: Sequence[PromptRecord], performance: Performance, max_tokens: int, seed: int
) -> list[LoadRequest]:
    return [
        LoadRequest(f"perf-{i}", tuple(p), max_tokens, seed=seed)
        for i, p in enumerate(synthetic_prompts(kept, performance.requests, seed + 1))
    ]


def performance_judgement(status: PerformanceStatus, profile: str) -> Judgement:
    reasons = []
    for key, label, change in (
        ("maxThroughputDrop", "output throughput drop", status.throughput_drop),
        ("maxTtftP99Increase", "TTFT P99 increase", status.ttft_p99_increase),
        ("maxItlP99Increase", "ITL P99 increase", status.itl_p99_increase),
    ):
        if change is None or change.limit is None:
            continue
        if change.low > change.limit or change.high > change.limit:
            verdict = "past" if change.low > change.limit else "not surely within"
            reasons.append(
                VerdictReason(
                    metric=f"performance.{key}",
                    value=change.mean,
                    threshold=change.limit,
                    message=(
                        f"performance.{key}: {label} {change.mean:+.3f} (bounds "
                        f"{change.low:+.3f}..{change.high:+.3f} over {status.repeats} paired runs "
                        f"at concurrency {status.concurrency}) is {verdict} the limit "
                        f"{change.limit:.3f}"
                    ),
                )
            )
    b, c = status.baseline, status.candidate
    summary = (
        f"{status.phase.value}: output tokens/s {b.output_tokens_per_second or 0:.1f} -> "
        f"{c.output_tokens_per_second or 0:.1f}, TTFT P99 {b.ttft_p99_seconds or 0:.3f}s -> "
        f"{c.ttft_p99_seconds or 0:.3f}s over {status.repeats} paired runs"
    )
    return judged(status.phase, summary, reasons, profile)


def run_load(
    spec: ParityCheckSpec,
    baseline: SideTarget,
    candidate: SideTarget,
    *,
    kept: Sequence[PromptRecord],
    metas: tuple[RecordMeta, RecordMeta],
    gate: Gate,
    say: Callable[[str], None],
    transport: httpx.AsyncBaseTransport | None = None,
    preemption_counter: Callable[[str], int | None] = read_preemptions,
) -> LoadOutcome:
    """Drive the levels, then the paired performance runs; judge each, under the suite's
    gate (its profile, thresholds and disabled checks) less the hidden-state limits: the
    levels compare served answers only."""
    outcome = LoadOutcome()
    profile = gate.profile
    thresholds = without_hidden(gate.thresholds)
    warn = gate.warn
    seed = spec.sampling.seed
    levels: list[LevelStatus] = []
    documents: list[dict[str, Any]] = []
    if spec.load is not None:
        requests = level_requests(kept, spec.load, spec.sampling.top_logprobs, seed)
        for concurrency in spec.load.concurrency:
            before = preemption_counter(candidate.url)
            run = asyncio.run(
                drive(
                    "candidate",
                    candidate.url,
                    candidate.model,
                    requests,
                    concurrency,
                    transport=transport,
                )
            )
            preempted = _delta(before, preemption_counter(candidate.url))
            comparison = ParityComparison(
                metas[0],
                metas[1],
                thresholds,
                gate.expected_differences,
                disabled=gate.disabled,
                fingerprints=spec.fingerprints,
                limits=gate.limits,
            )
            for base, cand in level_records(kept, run):
                comparison.add(base, cand)
            result = comparison.finalize()
            verdict = judgement(result, decide(result, warn), profile.value)
            level = level_status(concurrency, verdict, verdict.metrics, preempted)
            say(
                f"load c={concurrency}: {level.phase.value}, token match "
                f"{level.token_match_rate}, mean KL {level.mean_kl}, preemptions {preempted}, "
                f"{run.output_tokens / run.seconds:.1f} output tokens/s"
            )
            levels.append(level)
            outcome.judgements.append((f"load c={concurrency}", verdict))
            documents.append(
                {
                    "concurrency": concurrency,
                    "level": level.model_dump(mode="json", by_alias=True, exclude_none=True),
                    "metrics": dict(verdict.metrics),
                    "outputTokensPerSecond": run.output_tokens / run.seconds,
                    # The candidate's serving figures at this level (the baseline is not
                    # driven at the levels; paired figures come from spec.performance).
                    "candidate": side_figures([figures(run)]).model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    ),
                    "reasons": [r.message for r in verdict.reasons],
                }
            )
            for key in ("tokenMatchRate", "meanKl", "sameTopRate"):
                if key in verdict.metrics:
                    outcome.metrics[f"loadC{concurrency}{key[0].upper()}{key[1:]}"] = (
                        verdict.metrics[key]
                    )
        outcome.status["load"] = [level.to_kube() for level in levels]
        outcome.document["load"] = documents
    if spec.performance is not None:
        performance = spec.performance
        concurrency = (
            max(spec.load.concurrency) if spec.load is not None else DEFAULT_PERFORMANCE_CONCURRENCY
        )
        max_tokens = spec.load.background_max_tokens if spec.load is not None else 64
        requests = performance_requests(kept, performance, max_tokens, seed)
        pairs: list[tuple[Figures, Figures]] = []
        for repeat in range(performance.repeats):
            runs = asyncio.run(
                drive_both(
                    [
                        ("baseline", baseline.url, baseline.model),
                        ("candidate", candidate.url, candidate.model),
                    ],
                    requests,
                    concurrency,
                    # Which side starts first alternates: its head start cancels over an
                    # even number of repeats instead of always favouring the baseline.
                    first=repeat % 2,
                    transport=transport,
                )
            )
            pair = (figures(runs[0]), figures(runs[1]))
            say(
                f"performance run {repeat + 1}/{performance.repeats} at c={concurrency}: "
                f"output tokens/s {pair[0].tokens_per_second:.1f} / {pair[1].tokens_per_second:.1f}"
                f", TTFT P99 {pair[0].ttft_p99} / {pair[1].ttft_p99}"
            )
            pairs.append(pair)
        limits = Limits(
            performance.max_throughput_drop,
            performance.max_ttft_p99_increase,
            performance.max_itl_p99_increase,
            performance.confidence,
        )
        status = judge_performance(pairs, limits, concurrency)
        outcome.judgements.append(("performance", performance_judgement(status, profile.value)))
        outcome.status["performance"] = status.to_kube()
        outcome.document["performance"] = status.model_dump(mode="json", by_alias=True)
        for key, change in (
            ("performanceThroughputDrop", status.throughput_drop),
            ("performanceTtftP99Increase", status.ttft_p99_increase),
        ):
            if change is not None:
                outcome.metrics[key] = change.mean
    return outcome
