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
dtype, teacher-forced on `base`; recorded in-process from --model even with --url, since a
server serves one dtype), then reports those pairs. Kept with a revision, a
bfloat16-vs-float32 pair is also what bf16-kernel checks against that revision are
judged on (`parity.calibrated.ENVELOPE_SOURCE`): calibrate a bf16 revision with
--also-dtype float32.

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
experiments/RESULTS.md, GPU section), so thresholds from a shallow model are scaled before
they judge a deep one (--target-layers; the depth calibrated on is the records' own
model_config.num_hidden_layers, or --reference-layers): by the rule the profiles use,
linear errors by sqrt(target / reference) and KL and 1 - cosine by target / reference
(`infergate.parity.depth`, which says where that is an extrapolation).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infergate.calibration.measure import (
    CalibrationError,
    CalibrationRuns,
    analyse_pair,
    record_runs,
)
from infergate.calibration.noise import CONFIDENCE
from infergate.calibration.proposals import LINEAR_MULTIPLE, depth_factor, rule_text
from infergate.calibration.report import calibration_document, to_markdown


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
    parser.add_argument(
        "--also-dtype", default=None,
        help="also record this dtype against base (float32 for a bfloat16 revision: the "
        "pair that dtype-change and bf16-kernel checks are then judged on)",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--long-max-tokens", type=int, default=8)
    parser.add_argument("--multiple", type=float, default=LINEAR_MULTIPLE)
    parser.add_argument("--confidence", type=float, default=CONFIDENCE)
    parser.add_argument(
        "--target-layers", type=int, default=None,
        help="scale the proposals for a model of this many layers (infergate.parity.depth)",
    )  # fmt: skip
    parser.add_argument(
        "--reference-layers", type=int, default=None,
        help="depth of the model the pairs ran on (default: the records' own)",
    )  # fmt: skip
    parser.add_argument("--model-note", default=None, help="how to name the model in the citation")
    parser.add_argument("--json", type=Path, default=None, help="write the report as JSON")
    parser.add_argument(
        "--noise-out", type=Path, default=None,
        help="write the noise record a golden store keeps (self noise; dtype pairs as changes)",
    )  # fmt: skip
    parser.add_argument(
        "--store", default=None, metavar="DIR|s3://BUCKET[/PREFIX]",
        help="keep the noise record in this golden store, for --namespace/--deployment/--revision "
        "(the revision the pairs measured: later checks against it take their limits from it)",
    )  # fmt: skip
    parser.add_argument("--s3-endpoint", default=None, help="S3 service URL for --store s3://")
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--deployment", default=None, help="InferenceDeployment name")
    parser.add_argument("--revision", default=None, help="revision hash measured")
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


def _runs(args: argparse.Namespace) -> CalibrationRuns:
    if args.model is None or args.dtype is None or args.work is None:
        raise CalibrationError("--engine needs --model, --dtype and --work")
    return CalibrationRuns(
        engine=args.engine, model=args.model, dtype=args.dtype, suite=args.suite,
        work=args.work, url=args.url, probe_url=args.probe_url, concurrency=args.concurrency,
        also_dtype=args.also_dtype, max_tokens=args.max_tokens,
        long_max_tokens=args.long_max_tokens,
    )  # fmt: skip


def _pairs(args: argparse.Namespace) -> list[tuple[str, Path, Path]]:
    for flag, value in (("--target-layers", args.target_layers),
                        ("--reference-layers", args.reference_layers)):  # fmt: skip
        if value is not None and value < 1:
            raise CalibrationError(f"{flag} {value}: must be at least 1")
    pairs = [_parse_pair(p) for p in args.pair]
    if args.engine:
        pairs += record_runs(_runs(args))
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
    reference = args.reference_layers or _records_depth(reports)
    if args.target_layers is not None and reference is None:
        print(
            "infergate parity calibrate: --target-layers needs the depth calibrated on; the "
            "records do not say it (model_config.num_hidden_layers): give --reference-layers",
            file=sys.stderr,
        )
        return 2
    depth = depth_factor(args.target_layers, reference)
    digest = digests.pop()
    document = calibration_document(
        reports,
        model=args.model_note or reports[0]["baseline"]["model"],
        digest=digest,
        date=datetime.now(UTC).strftime("%Y-%m-%d"),
        confidence=args.confidence,
        multiple=args.multiple,
        depth=depth,
        rule=rule_text(args.multiple, depth, args.target_layers),
        known_keys=(f.alias or n for n, f in Thresholds.model_fields.items()),
    )
    markdown = to_markdown(document)
    if args.noise_out or args.store:
        stored = _keep_noise(args, reports, digest)
        if stored != 0:
            return stored
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def _keep_noise(args: argparse.Namespace, reports: list[dict[str, Any]], digest: str) -> int:
    """Write the noise record (--noise-out) and keep it in the golden store (--store)."""
    from infergate.calibration.kept import model_noise
    from infergate.golden.config import store_from_url
    from infergate.golden.errors import GoldenError
    from infergate.golden.noise import put_noise

    if args.store and not (args.namespace and args.deployment and args.revision):
        print(
            "infergate parity calibrate: --store needs --namespace, --deployment and --revision",
            file=sys.stderr,
        )
        return 2
    noise = model_noise(
        reports,
        revision=args.revision,
        digest=digest,
        measured=datetime.now(UTC).isoformat(),
        method="infergate parity calibrate: " + ", ".join(r["label"] for r in reports),
    )
    if args.noise_out:
        args.noise_out.parent.mkdir(parents=True, exist_ok=True)
        args.noise_out.write_text(noise.model_dump_json(by_alias=True, indent=1) + "\n")
    if args.store:
        try:
            store = store_from_url(args.store, endpoint=args.s3_endpoint)
            key = put_noise(store, args.namespace, args.deployment, noise)
        except (GoldenError, OSError, ValueError) as err:
            print(f"infergate parity calibrate: --store {args.store}: {err}", file=sys.stderr)
            return 2
        print(f"noise record kept at {store.describe()} {key}", file=sys.stderr)
    return 0


def _records_depth(reports: list[dict[str, Any]]) -> int | None:
    """The depth every pair's records report, when they all report the same one."""
    depths = {report.get("layers") for report in reports}
    if len(depths) == 1:
        (depth,) = depths
        return depth if isinstance(depth, int) else None
    return None
