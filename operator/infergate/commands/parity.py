"""`infergate parity compare`: compare two ParityRecords and give a verdict.

Exit status: 0 Passed, 1 Failed, 2 Error (could not measure, or bad input),
3 Inconclusive (not enough evidence; the reasons say what more is needed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infergate.commands import calibrate, parity_run
from infergate.parity.calibrated import ModelNoise, provenance_lines
from infergate.parity.compare import compare_sources
from infergate.parity.fingerprints import FingerprintExpectation
from infergate.parity.gate_limits import noise_limits, with_limits
from infergate.parity.limits import LimitSource
from infergate.parity.metrics import ParityMetrics
from infergate.parity.profiles import ProfileChoiceError, plan_gate
from infergate.parity.record import ParityInputError
from infergate.parity.thresholds import ProfileName, RegressionTolerance, Thresholds
from infergate.parity.verdict import Verdict, VerdictStatus, decide
from infergate.recordio import RecordFormatError, RecordReader
from infergate.report.page import render_report

EXIT_CODES = {
    VerdictStatus.PASSED: 0,
    VerdictStatus.FAILED: 1,
    VerdictStatus.ERROR: 2,
    VerdictStatus.INCONCLUSIVE: 3,
}
_AUTO = "auto"
_NULLS = {"none", "null", "off"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parity = subparsers.add_parser("parity", help="Compare parity records of two engines.")
    commands = parity.add_subparsers(dest="parity_command", metavar="COMMAND", required=True)
    compare = commands.add_parser(
        "compare",
        help="Compare a candidate record with a baseline record.",
        description=(
            "Compare CANDIDATE with BASELINE (record directories written by RecordWriter). "
            "Exit 0 when the check passes, 1 when it fails, 2 when it could not measure, "
            "3 when the evidence is not enough to decide."
        ),
    )
    compare.add_argument("baseline", type=Path, metavar="BASELINE")
    compare.add_argument("candidate", type=Path, metavar="CANDIDATE")
    compare.add_argument(
        "--profile",
        default=_AUTO,
        choices=[_AUTO, *(p.value for p in ProfileName)],
        help="tolerance profile; 'auto' picks one from what differs between the records",
    )
    compare.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one threshold, e.g. maxMeanKl=1e-4; VALUE 'none' switches it off",
    )
    compare.add_argument(
        "--allow-config-diff",
        action="append",
        default=[],
        metavar="KEY",
        help="effective-config key (fnmatch pattern) allowed to differ between the sides",
    )
    compare.add_argument(
        "--no-hidden-states",
        action="store_true",
        help="hidden states were not recorded: their checks are not part of the verdict",
    )
    compare.add_argument(
        "--fingerprints",
        choices=[e.value for e in FingerprintExpectation],
        default=FingerprintExpectation.REQUIRED.value,
        help="Required (default): a record without fingerprints of its own leaves the check "
        "Inconclusive; NotExpected: compare without them (a plain vLLM endpoint)",
    )
    compare.add_argument(
        "--previous",
        type=Path,
        metavar="RESULT.json",
        help="--json output of the last passing check, to test for regression",
    )
    compare.add_argument(
        "--noise",
        type=Path,
        metavar="NOISE.json",
        help="the baseline revision's kept noise record (`parity calibrate --noise-out`): "
        "limits become k x its noise where the profile uses it, as the operator judges; "
        "--threshold keys stay as set",
    )
    compare.add_argument("--json", type=Path, metavar="OUT.json", help="write the result as JSON")
    compare.add_argument("--report", type=Path, metavar="OUT.html", help="write the HTML report")
    compare.set_defaults(handler=run_compare)
    parity_run.add_subcommands(commands)
    calibrate.add_subcommands(commands)


def parse_thresholds(pairs: list[str]) -> Thresholds:
    """Thresholds from KEY=VALUE strings; keys in camelCase or snake_case."""
    raw: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--threshold {pair!r}: expected KEY=VALUE, e.g. maxMeanKl=1e-4")
        raw[key.strip()] = None if value.strip().lower() in _NULLS else value.strip()
    try:
        return Thresholds.model_validate(raw)
    except ValidationError as err:
        allowed = ", ".join(sorted(f.alias or n for n, f in Thresholds.model_fields.items()))
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}={e.get('input')!r}: {e['msg']}"
            for e in err.errors()
        )
        raise ValueError(f"--threshold: {problems} (keys: {allowed})") from err


def run_compare(args: argparse.Namespace) -> int:
    try:
        explicit = parse_thresholds(args.threshold)
        baseline = RecordReader(args.baseline)
        candidate = RecordReader(args.candidate)
        previous = _previous_metrics(args.previous) if args.previous else None
        noise = _noise(args.noise) if args.noise else None
    except (ValueError, RecordFormatError) as err:
        return _fail_early(args, str(err))
    try:
        gate = plan_gate(
            baseline.meta,
            candidate.meta,
            profile=None if args.profile == _AUTO else ProfileName(args.profile),
            explicit=explicit,
            hidden_states=not args.no_hidden_states,
        )
    except ProfileChoiceError as err:
        return _fail_early(args, f"{err} (here: --profile)")
    derived = noise_limits(gate, candidate.meta.dtype, noise, explicit)
    gate = with_limits(gate, derived)
    profile = gate.profile
    why = "chosen on the command line" if args.profile != _AUTO else gate.reason
    allowed = (*gate.expected_differences, *args.allow_config_diff)
    try:
        result = compare_sources(
            baseline,
            candidate,
            gate.thresholds,
            allowed,
            disabled=gate.disabled,
            fingerprints=FingerprintExpectation(args.fingerprints),
            limits=gate.limits,
        )
    except (RecordFormatError, ParityInputError) as err:
        return _fail_early(args, str(err))
    result = result.model_copy(update={"calibration": derived})
    verdict = decide(result, gate.warn, previous, RegressionTolerance())
    if args.json:
        document = {
            "status": verdict.status.value,
            "profile": profile.value,
            "profileReason": why,
            "verdict": verdict.model_dump(mode="json", by_alias=True),
            "result": result.model_dump(mode="json", by_alias=True),
        }
        _write(args.json, json.dumps(document, indent=1) + "\n")
    if args.report:
        _write(args.report, render_report(result, verdict, f"{profile.value} ({why})"))
    _print_summary(verdict, profile, why, gate.limits, provenance_lines(derived))
    return EXIT_CODES[verdict.status]


def _previous_metrics(path: Path) -> ParityMetrics | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"--previous {path}: cannot read a JSON result ({err})") from err
    if document.get("status") != VerdictStatus.PASSED.value:
        print(
            f"--previous {path}: status {document.get('status')!r} is not Passed; "
            "no regression test",
            file=sys.stderr,
        )
        return None
    try:
        return ParityMetrics.model_validate(document["result"]["metrics"])
    except (KeyError, TypeError, ValidationError) as err:
        raise ValueError(f"--previous {path}: result.metrics is missing or invalid") from err


def _noise(path: Path) -> ModelNoise:
    try:
        return ModelNoise.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as err:
        raise ValueError(f"--noise {path}: not a readable noise record ({err})") from err


def _fail_early(args: argparse.Namespace, reason: str) -> int:
    print(f"parity Error: {reason}", file=sys.stderr)
    if args.json:
        _write(args.json, json.dumps({"status": "Error", "reasons": [reason]}, indent=1) + "\n")
    return EXIT_CODES[VerdictStatus.ERROR]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _print_summary(
    verdict: Verdict, profile: ProfileName, why: str, limits: LimitSource, provenance: list[str]
) -> None:
    lines = [f"parity {verdict.status.value} (profile {profile.value}: {why})"]
    lines += [f"  limits: {line}" for line in provenance]
    lines.append(f"  limits: {limits.describe()}")
    lines += [f"  reason: {r}" for r in verdict.reasons]
    lines += [f"  warning: {w}" for w in verdict.warnings]
    lines += [f"  not decided: {e}" for e in verdict.excluded]
    lines += [f"  {c.outcome:>10}  {c.message.split(';')[0]}" for c in verdict.checks]
    print("\n".join(lines))
