"""`infergate parity run` (the runner Job's command) and `infergate parity report`.

infergate parity run --check NAMESPACE/NAME
    Drive both sides of the ParityCheck, write its verdict, metrics and report.
    Exit 0 once the check has a terminal status (Passed, Failed or Error),
    3 when this attempt failed in a way a retry may fix (the Job retries it).

infergate parity report --check NAMESPACE/NAME [--out report.html] [--json result.json]
    Fetch a finished check's report from its ConfigMap (plain or compressed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infergate.api.parity_check import RUNNER_CONCURRENCY_DEFAULT
from infergate.render.check_names import REPORT_HTML_KEY, REPORT_JSON_KEY, report_name


def add_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `run` and `report` under `infergate parity`."""
    run = commands.add_parser(
        "run",
        help="Run a ParityCheck (what the runner Job does).",
        description="Drive both sides of a ParityCheck and write its verdict and report.",
    )
    run.add_argument("--check", required=True, metavar="NAMESPACE/NAME", type=_check_ref)
    run.add_argument("--kubeconfig", default=None, help="default: in-cluster, then $KUBECONFIG")
    run.add_argument(
        "--concurrency",
        type=int,
        default=RUNNER_CONCURRENCY_DEFAULT,
        help=f"prompts in flight (default {RUNNER_CONCURRENCY_DEFAULT}; spec.runner.concurrency)",
    )
    run.add_argument(
        "--request-timeout", type=float, default=600.0, help="seconds per engine request"
    )
    run.add_argument(
        "--wait-for-sides",
        type=float,
        default=120.0,
        help="seconds to wait for the sides' endpoints to be ready",
    )
    run.add_argument(
        "--previous-report",
        default=None,
        metavar="CONFIGMAP",
        help="report ConfigMap of the last passing check, for the regression test",
    )
    run.set_defaults(handler=run_command)

    report = commands.add_parser(
        "report",
        help="Fetch the report of a finished ParityCheck.",
        description="Write a ParityCheck's HTML report and JSON result from its ConfigMap.",
    )
    report.add_argument("--check", required=True, metavar="NAMESPACE/NAME", type=_check_ref)
    report.add_argument("--kubeconfig", default=None)
    report.add_argument("--out", type=Path, default=None, help="write the HTML report here")
    report.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    report.set_defaults(handler=report_command)


def _check_ref(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAMESPACE/NAME, e.g. llm/qwen-3f2a")
    return namespace, name


def run_command(args: argparse.Namespace) -> int:
    import os

    from infergate.golden.errors import GoldenConfigError
    from infergate.kube.client import KubeClient
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.golden import golden_from_env
    from infergate.runner.run import RunOptions, main_entry

    namespace, name = args.check
    try:
        golden = golden_from_env(os.environ)
    except GoldenConfigError as err:
        # The operator wrote it: a broken setting is its bug; say so and keep no records
        # rather than refuse the check.
        print(f"parity run: {err}; no golden records are kept", file=sys.stderr)
        golden = None
    options = RunOptions(
        concurrency=args.concurrency,
        request_timeout=args.request_timeout,
        wait_for_sides=args.wait_for_sides,
        previous_report=args.previous_report,
        golden=golden,
    )
    api = CheckClient(KubeClient.from_environment(args.kubeconfig), namespace)
    return main_entry(api, name, options)


def report_command(args: argparse.Namespace) -> int:
    from infergate.errors import KubeError
    from infergate.kube.client import KubeClient
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.report_store import read_report

    namespace, name = args.check
    client = CheckClient(KubeClient.from_environment(args.kubeconfig), namespace)
    try:
        check = client.get_check(name)
        ref = (check.get("status") or {}).get("reportRef") or {}
        config_map = client.config_map(ref.get("name") or report_name(name))
    except KubeError as err:
        print(f"parity report: {err}", file=sys.stderr)
        return 2
    if config_map is None:
        phase = (check.get("status") or {}).get("phase") or "Pending"
        print(
            f"parity report: {namespace}/{name} has no report yet (phase {phase})", file=sys.stderr
        )
        return 2
    documents = read_report(config_map.get("data"), config_map.get("binaryData"))
    html = documents.get(REPORT_HTML_KEY) or html_from_json(documents.get(REPORT_JSON_KEY))
    if args.out is not None and html is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(html, encoding="utf-8")
        print(f"HTML report: {args.out}")
    if args.json is not None and REPORT_JSON_KEY in documents:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(documents[REPORT_JSON_KEY], encoding="utf-8")
        print(f"JSON result: {args.json}")
    if args.out is None and args.json is None:
        summary = json.loads(documents.get(REPORT_JSON_KEY, "{}"))
        print(json.dumps({k: summary.get(k) for k in ("status", "profile", "sides")}, indent=1))
    return 0


def html_from_json(text: str | None) -> str | None:
    """The HTML report rebuilt from result.json, when the ConfigMap had no room for the HTML."""
    if text is None:
        return None
    from infergate.report.page import render_report_from_json

    return render_report_from_json(text)
