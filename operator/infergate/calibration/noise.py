"""How much two records of one configuration differ: the noise an A/A pair measures.

Pure arithmetic over a parity result (its camelCase JSON) and the records themselves. Every
numeric metric the core reports gets a one-sided upper confidence bound of its noise: the
core's own prompt-level bound where it gives one (`core_bounds`: the families a calibration
keeps), else value + z * stderr for means, the Wilson bound of the miss rate for rates, the
value itself for a point. Two signed per-prompt measures cosine cannot see come from the
records: the hidden-state norm ratio and the teacher-forced log-perplexity ratio.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from infergate.parity.record import PromptRecord

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Metric:
    """One measured quantity of one pair, as calibration sees it."""

    path: str
    """Dotted camelCase path in the parity result's metrics, or `signed.<name>`."""
    value: float | None
    upper: float | None
    """One-sided upper confidence bound of the noise (value itself for a percentile)."""
    noise: str
    """How `upper` measures noise: 'error' (bigger is worse), 'miss' (1 - rate), or
    'shortfall' (1 - value, for cosine-like metrics), 'absolute' (|signed value|)."""
    bounded: bool
    """True when `upper` is a confidence bound, False when it is a point value."""


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(confidence)


def _walk(prefix: str, node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        yield prefix, node
        for key, value in node.items():
            yield from _walk(f"{prefix}.{key}" if prefix else str(key), value)


_SHORTFALL_WORDS = ("cosine",)
_RATE_HIGH_IS_GOOD = ("matchRate", "agreement", "sameTopRate", "legitimateDivergenceRate")


def suite_metrics(metrics: Mapping[str, Any], confidence: float = CONFIDENCE) -> list[Metric]:
    """Every numeric metric of a parity result's `metrics` (camelCase JSON), with bounds.

    Means (`value`, `stderr`) get value + z * stderr; rates (`successes`, `total`,
    `low`, `high`) get the Wilson bound of the miss rate; plain numbers are points.
    Works on whatever the core reports, so metrics it adds are picked up too.
    """
    z = _z(confidence)
    out: list[Metric] = []
    for path, node in _walk("", metrics):
        if "buckets" in path or "survival" in path:
            continue
        if {"value", "stderr", "count"} <= node.keys():
            value, stderr = node["value"], node["stderr"]
            if value is None:
                continue
            shortfall = any(w in path.lower() for w in _SHORTFALL_WORDS)
            se = stderr if stderr is not None and math.isfinite(stderr) else None
            if shortfall:
                upper = None if se is None else 1.0 - (value - z * se)
                out.append(Metric(path, value, upper, "shortfall", se is not None))
            else:
                upper = None if se is None else value + z * se
                out.append(Metric(path, value, upper, "error", se is not None))
            continue
        if {"successes", "total", "low", "high"} <= node.keys():
            if not node["total"]:
                continue
            high_is_good = any(path.endswith(w) for w in _RATE_HIGH_IS_GOOD)
            value = node["value"]
            upper = (1.0 - node["low"]) if high_is_good else node["high"]
            out.append(Metric(path, value, upper, "miss" if high_is_good else "error", True))
            continue
        for key, value in node.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                continue
            leaf = f"{path}.{key}" if path else key
            if any(w in key.lower() for w in _SHORTFALL_WORDS):
                out.append(Metric(leaf, float(value), 1.0 - float(value), "shortfall", False))
            else:
                out.append(Metric(leaf, float(value), float(value), "error", False))
    return out


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Per-prompt spread of one metric: count, mean, sd, median, P90, max."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    if finite.size == 0:
        return {"prompts": 0, "mean": None, "sd": None, "p50": None, "p90": None, "max": None}
    return {
        "prompts": int(finite.size),
        "mean": float(finite.mean()),
        "sd": float(finite.std(ddof=1)) if finite.size > 1 else 0.0,
        "p50": float(np.quantile(finite, 0.5)),
        "p90": float(np.quantile(finite, 0.9)),
        "max": float(finite.max()),
    }


def per_prompt_spread(prompts: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Spread of every numeric per-prompt field the core reports (camelCase JSON)."""
    fields: dict[str, list[float]] = {}
    for prompt in prompts:
        for key, value in prompt.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if key in {"promptTokens", "baselineOutputTokens", "candidateOutputTokens"}:
                continue
            fields.setdefault(key, []).append(float(value))
    return {key: spread(values) for key, values in sorted(fields.items())}


def clustered_upper(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean over prompts of a per-prompt value, its standard error and |mean| + z * se."""
    finite = np.asarray([v for v in values if math.isfinite(v)], np.float64)
    if finite.size == 0:
        return {"prompts": 0, "mean": None, "stderr": None, "upperAbs": None}
    mean = float(finite.mean())
    se = float(finite.std(ddof=1) / math.sqrt(finite.size)) if finite.size > 1 else math.inf
    upper = abs(mean) + _z(confidence) * se if math.isfinite(se) else None
    return {"prompts": int(finite.size), "mean": mean, "stderr": se, "upperAbs": upper}


def signed_prompt_measures(
    baseline: PromptRecord, candidate: PromptRecord
) -> dict[str, float | None]:
    """Signed measures cosine cannot see, for one prompt (None when not recorded).

    `hiddenNormRatio`: mean over tokens of log(|candidate| / |baseline|) of the last-layer
    hidden states (0 when equal; a 2% scale gives log 1.02 = 0.0198).
    `logPerplexityRatio`: mean over scored steps of the candidate's teacher-forced
    logprob of the baseline's token minus the baseline's own logprob of it (0 when
    equal; a constant shift d of every logprob gives d): from the baseline's own
    teacher-forced scores when both sides scored the same positions, else (output-only
    scores) from the baseline's top-k at its output steps.
    """
    norm_ratio: float | None = None
    a, b = baseline.hidden_states, candidate.hidden_states
    if a is not None and b is not None and a.shape == b.shape and a.shape[0] > 0:
        na = np.linalg.norm(a.astype(np.float64), axis=1)
        nb = np.linalg.norm(b.astype(np.float64), axis=1)
        keep = (na > 0) & (nb > 0) & np.isfinite(na) & np.isfinite(nb)
        if keep.any():
            norm_ratio = float(np.mean(np.log(nb[keep] / na[keep])))
    log_ppl: float | None = None
    forced, own_scores = candidate.teacher_forced, baseline.teacher_forced
    top = baseline.top_logprobs
    if (
        forced is not None
        and own_scores is not None
        and np.array_equal(forced.token_ids, own_scores.token_ids)
        and forced.start == own_scores.start
    ):
        # Both sides scored the same positions (records scored from position 1): the
        # baseline's own teacher-forced logprobs are the reference, position by position.
        delta = forced.target_logprobs - own_scores.target_logprobs
        delta = delta[np.isfinite(delta)]
        if delta.size:
            log_ppl = float(delta.mean())
    elif (
        forced is not None and forced.start is None and top.k > 0 and forced.token_ids.shape[0] > 0
    ):
        steps = forced.token_ids.shape[0]
        own = np.where(top.token_ids[:steps] == forced.token_ids[:, None], top.logprobs[:steps], 0)
        found = (top.token_ids[:steps] == forced.token_ids[:, None]).any(axis=1)
        delta = forced.target_logprobs[found] - own.sum(axis=1)[found]
        delta = delta[np.isfinite(delta)]
        if delta.size:
            log_ppl = float(delta.mean())
    return {"hiddenNormRatio": norm_ratio, "logPerplexityRatio": log_ppl}


def suite_digest(prompts: Iterable[PromptRecord]) -> str:
    """sha256 over prompt ids and prompt token ids in order: the suite as it was run."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(prompt.prompt_id.encode())
        digest.update(b"\0")
        digest.update(np.asarray(prompt.prompt_token_ids, np.int64).tobytes())
    return "sha256:" + digest.hexdigest()[:16]


_CORE_ESTIMATES: Mapping[str, tuple[str, str]] = {
    "logprobs.meanKl": ("meanKl", "error"),
    "logprobs.klP99": ("klP99", "error"),
    "logprobs.sameTopRate": ("sameTopRate", "miss"),
    "hidden.relL2P99": ("hiddenRelL2P99", "error"),
    "hidden.cosineP1": ("hiddenCosineP1", "shortfall"),
}
"""Metrics whose noise the core itself bounds (`ParityMetrics.estimates`: each prompt
weighing the same, t with the prompts' degrees of freedom and a studentized bootstrap,
rates at their effective number of positions, P99/P1 from per-prompt shares), as the
check that later judges against k x this noise bounds its own value."""


def core_bounds(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The noise of `_CORE_ESTIMATES` from the core's own bounds, where it gives one.

    Position-level bounds (z x stderr of a mean over steps, Wilson over positions) treat
    a prompt's positions as independent; they under-cover when prompts differ, and a
    limit built on them would be tighter than the noise it claims to bound.
    """
    estimates = metrics.get("estimates") or {}
    out: dict[str, dict[str, Any]] = {}
    for path, (key, kind) in _CORE_ESTIMATES.items():
        node = estimates.get(key)
        if not isinstance(node, Mapping) or node.get("value") is None:
            continue
        value = float(node["value"])
        if kind == "error":
            bound = node.get("upper")
            upper = None if bound is None else max(0.0, float(bound))
        else:
            bound = node.get("lower")
            upper = None if bound is None else max(0.0, 1.0 - float(bound))
        if upper is None:
            continue
        out[path] = {"value": value, "upper": upper, "noise": kind, "bounded": True}
    return out


def pair_report(
    label: str,
    result: Mapping[str, Any],
    signed: Sequence[Mapping[str, float | None]],
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """One pair's noise: suite metrics with bounds, per-prompt spreads, signed measures."""
    noise: dict[str, dict[str, Any]] = {}
    for metric in suite_metrics(result["metrics"], confidence):
        noise[metric.path] = {
            "value": metric.value,
            "upper": metric.upper,
            "noise": metric.noise,
            "bounded": metric.bounded,
        }
    noise.update(core_bounds(result["metrics"]))
    decode = result["metrics"].get("decode") or {}
    for name in ("candidateSelfMeanAbs", "excess"):
        # Decode-path estimates (value and one-sided bounds, each prompt weighing the same).
        node = decode.get(name)
        if isinstance(node, Mapping) and node.get("value") is not None:
            # The excess is signed (candidate beyond baseline): its noise is the larger
            # magnitude of its two bounds, as a limit on |excess| needs.
            ends = [node.get("lower"), node.get("upper")]
            bounds = [abs(float(b)) for b in ends if b is not None]
            magnitude = max([abs(float(node["value"])), *bounds])
            noise[f"decode.{name}"] = {
                "value": node["value"],
                "upper": magnitude,
                "noise": "absolute",
                "bounded": None not in ends,
            }
    signed_summary: dict[str, Any] = {}
    for name in ("hiddenNormRatio", "logPerplexityRatio"):
        values = [float(s[name]) for s in signed if s.get(name) is not None]  # type: ignore[arg-type]
        summary = {**clustered_upper(values, confidence), "spread": spread(values)}
        signed_summary[name] = summary
        if summary["prompts"]:
            noise[f"signed.{name}"] = {
                "value": summary["mean"],
                "upper": summary["upperAbs"],
                "noise": "absolute",
                "bounded": summary["upperAbs"] is not None,
            }
    return {
        "label": label,
        "baseline": result["baseline"],
        "candidate": result["candidate"],
        "prompts": result["metrics"]["prompts"],
        "noise": noise,
        "perPrompt": per_prompt_spread(result["prompts"]),
        "signed": signed_summary,
        "hygiene": [f"{h['check']}: {h['detail']}" for h in result.get("hygiene", [])],
        "errors": list(result.get("errors", [])),
    }
