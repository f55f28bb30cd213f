"""A shadow check's verdict: every mirror pod's scored copies pooled and judged.

Each pooled result (every copy teacher-forced on the stable's answer; the greedy copies
token by token too) is judged by the core with the check's thresholds; the worst
judgement is the verdict. Greedy copies too few for the profile's evidence floor make it
Inconclusive: the teacher-forced comparison scores prefill only, and the greedy copies
are the only evidence of the canary's decode path (its KV cache, CUDA graphs, prefix
cache), so a verdict without them cannot pass. Fewer than `minRequests` scored copies is
Inconclusive; a canary that failed to answer or score a copy is Error, and so is a
mirror pod whose result is not this session's or does not read; none of them promotes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from infergate.api.check_status import VerdictReason
from infergate.api.enums import CheckPhase
from infergate.api.shadow import ShadowSettings, ShadowStatus
from infergate.parity.metrics import ParityResult
from infergate.parity.thresholds import Thresholds
from infergate.parity.verdict import decide
from infergate.plan.check.status import Judgement
from infergate.plan.metadata import parse_time
from infergate.runner.combine import combined, judged
from infergate.runner.shadow_pool import PoolSpec, pool_results
from infergate.runner.summary import judgement


def judge_results(
    results: Sequence[Any],
    settings: ShadowSettings,
    pool: PoolSpec,
    *,
    profile: str,
    warn: Thresholds,
) -> tuple[Judgement, ParityResult | None, ShadowStatus]:
    """The verdict of every pod's copies pooled, the result shown in the report, the counts."""
    totals, refused_full, canary_errors, unreadable = _sum_counts(results)
    pooled = pool_results(results, pool)
    problems = [*unreadable, *pooled.problems]
    if problems:
        pooled = replace(pooled, forced=None, greedy=None)
    where = f"{len(results)} mirror pods" if len(results) > 1 else "the mirror pod"
    judgements: list[tuple[str, Judgement]] = []
    metrics: dict[str, float] = {}
    if pooled.forced is not None:
        forced = judgement(pooled.forced, decide(pooled.forced, warn), profile)
        judgements.append((f"teacher-forced copies ({where})", forced))
        metrics = {k: v for k, v in forced.metrics.items() if "oken" not in k}
    if pooled.greedy is not None:
        greedy = judgement(pooled.greedy, decide(pooled.greedy, warn), profile)
        if greedy.phase is CheckPhase.INCONCLUSIVE:
            # Counted like any other judgement: the decode path is seen only here.
            greedy = replace(
                greedy,
                summary=f"{greedy.summary}; the decode path is judged only on greedy "
                f"copies ({pooled.greedy.metrics.prompts} scored): let more greedy "
                "requests reach the mirror, or raise minRequests or windowSeconds",
            )
        judgements.append((f"greedy copies ({where})", greedy))
        rate = pooled.greedy.metrics.tokens.match_rate.value
        if rate is not None:
            metrics["greedyTokenMatchRate"] = float(rate)
    elif not problems and pooled.forced is not None:
        # No greedy copy: the canary's decode path (KV cache, decode kernels, prefix hits)
        # was never seen, and teacher-forced copies alone cannot stand for it.
        judgements.append(
            (
                f"greedy copies ({where})",
                judged(
                    CheckPhase.INCONCLUSIVE,
                    "no greedy copy was scored, so the canary's decode path was not judged",
                    [
                        VerdictReason(
                            metric="shadow.greedy",
                            value=0.0,
                            message="the decode path is judged only on greedy copies "
                            "(temperature 0 or top_k 1) and none reached the mirror: send "
                            "greedy requests through the route, or check the canary with a "
                            "suite (source: suite)",
                        )
                    ],
                    profile,
                ),
            )
        )
    metrics |= {
        "shadowScored": float(totals.scored),
        "shadowGreedy": float(totals.greedy),
        "shadowSampled": float(totals.sampled),
    }
    extra: list[tuple[str, Judgement]] = []
    if problems:
        extra.append(
            (
                "mirror",
                judged(
                    CheckPhase.ERROR,
                    "a mirror pod's result cannot be used, so no copy was judged",
                    [
                        VerdictReason(metric="shadow.podResult", message=m[:500])
                        for m in problems[:16]
                    ],
                    profile,
                ),
            )
        )
    if canary_errors:
        extra.append(
            (
                "canary",
                judged(
                    CheckPhase.ERROR,
                    "the canary failed to answer mirrored requests",
                    [
                        VerdictReason(metric="shadow.canaryFailures", message=m)
                        for m in canary_errors
                    ],
                    profile,
                ),
            )
        )
    if totals.scored < settings.min_requests:
        message = (
            f"{totals.scored} mirrored requests scored of the {settings.min_requests} "
            f"(shadow.minRequests) a verdict needs ({totals.sampled} copied, {totals.mirrored} "
            "seen); let more traffic reach the mirror or raise windowSeconds or sampleRate"
        )
        if refused_full:
            message += (
                f"; {refused_full} copies were refused because the mirror pods' memory for "
                "scored copies was full (poolFull): lower minRequests or add mirror replicas"
            )
        extra.append(
            (
                "evidence",
                judged(
                    CheckPhase.INCONCLUSIVE,
                    "not enough mirrored requests",
                    [
                        VerdictReason(
                            metric="shadow.minRequests",
                            value=float(totals.scored),
                            threshold=float(settings.min_requests),
                            message=message,
                        )
                    ],
                    profile,
                ),
            )
        )
    if not judgements:
        main = judged(CheckPhase.INCONCLUSIVE, "no mirrored request was scored", [], profile)
    else:
        main = judgements[0][1]
        extra = [*judgements[1:], *extra]
    return combined(main, extra, metrics=metrics), pooled.forced, totals


def _sum_counts(results: Sequence[Any]) -> tuple[ShadowStatus, int, list[str], list[str]]:
    """Every pod's counts summed, copies refused as poolFull, the canary's failures per
    pod, and the pods whose counts do not read."""
    totals = ShadowStatus()
    canary_errors: list[str] = []
    refused_full = 0
    unreadable: list[str] = []
    pods = 0
    for index, pod in enumerate(results):
        counts = pod.get("counts") if isinstance(pod, Mapping) else None
        if not isinstance(counts, Mapping):
            continue  # an unusable result: pool_results names it
        try:
            totals = _add_counts(totals, counts)
            pods += 1
            refused_full += int((counts.get("refused") or {}).get("poolFull") or 0)
        except (AttributeError, TypeError, ValueError) as err:
            unreadable.append(f"mirror pod {index}: its counts do not read: {err}")
            continue
        if counts.get("canaryFailures"):
            canary_errors.append(
                f"mirror pod {index}: the canary failed {counts['canaryFailures']} copies "
                f"(last: {counts.get('lastError')})"
            )
    return totals.model_copy(update={"pods": pods}), refused_full, canary_errors, unreadable


def _add_counts(totals: ShadowStatus, counts: Mapping[str, Any]) -> ShadowStatus:
    refused = counts.get("refused") or {}
    dropped = sum(int(v) for k, v in refused.items() if k != "notSampled")
    dropped += int(counts.get("stableFailures") or 0) + int(counts.get("canaryFailures") or 0)
    started = counts.get("startedAt")
    return ShadowStatus(
        mirrored=totals.mirrored + int(counts.get("mirrored") or 0),
        sampled=totals.sampled + int(counts.get("sampled") or 0),
        scored=totals.scored + int(counts.get("scored") or 0),
        greedy=totals.greedy + int(counts.get("greedy") or 0),
        dropped=totals.dropped + dropped,
        started_at=totals.started_at or parse_time(started),
    )
