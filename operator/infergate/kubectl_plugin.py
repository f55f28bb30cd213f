"""`kubectl infergate`: watch and steer rollouts from kubectl.

Installed as the `kubectl-infergate` executable (pip install infergate), which
kubectl finds on PATH:

  kubectl infergate status qwen -n llm        revisions, the current check's progress and verdict
  kubectl infergate -n llm promote qwen --wait
  kubectl infergate abort qwen
  kubectl infergate rollback qwen --to 3f2a9c1d0e
  kubectl infergate diff qwen                 what the canary changes against stable
  kubectl infergate report qwen -o qwen.html  the last check's HTML report, to a file
  kubectl infergate golden list --store s3://golden --s3-endpoint https://s3.example.com
  kubectl infergate golden list               what this namespace's Passed checks recorded
                                              (their status.golden; any store, a PVC's too)

As kubectl does, it reads $KUBECONFIG (or --kubeconfig), uses --context when given,
and -n/--namespace defaults to the context's namespace; these flags go before or
after the command. promote, abort and rollback set the annotations the operator acts
on (the same as `infergate promote|abort|rollback`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infergate.api.check_status import ProgressStage
from infergate.commands import control, golden
from infergate.errors import InfergateError, NotFoundError
from infergate.jsontypes import JSON

_CONNECTION_FLAGS = ("namespace", "kubeconfig", "context")


def build_parser() -> argparse.ArgumentParser:
    """The plugin's parser: the control commands, `status` with the check, and `report`."""
    parser = argparse.ArgumentParser(
        prog="kubectl infergate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Given before the command; the command's own flags of the same name win.
    parser.add_argument("-n", "--namespace", dest="global_namespace", metavar="NAMESPACE")
    parser.add_argument("--kubeconfig", dest="global_kubeconfig", metavar="FILE")
    parser.add_argument("--context", dest="global_context", metavar="CONTEXT")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    control.register(commands)
    commands.choices["status"].set_defaults(handler=run_status)
    _register_report(commands)
    golden.register(commands)
    return parser


def _register_report(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="write the HTML report of a deployment's last parity check to a file",
        description="Fetch a ParityCheck's HTML report (and JSON result) from the ConfigMap its "
        "status.reportRef names. NAME is an InferenceDeployment (its last check) unless "
        "--check names the ParityCheck itself.",
    )
    report.add_argument("name", nargs="?", help="InferenceDeployment name")
    report.add_argument("--check", metavar="NAME", help="ParityCheck name (instead of NAME)")
    report.add_argument(
        "-o", "--output", type=Path, help="HTML file to write (default: CHECK.html)"
    )
    report.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON result")
    report.add_argument("-n", "--namespace", help="namespace (default: kubeconfig context's)")
    report.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    report.add_argument("--context", help="kubeconfig context")
    report.set_defaults(handler=run_report)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kubectl-infergate` executable."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag in _CONNECTION_FLAGS:
        if getattr(args, flag, None) is None:
            setattr(args, flag, getattr(args, f"global_{flag}"))
    if args.command == "report" and (args.name is None) == (args.check is None):
        parser.error("report: give an InferenceDeployment NAME or --check CHECK (one of them)")
    code: int = args.handler(args)
    return code


class _Session:
    """One namespace of one cluster, as the flags and the kubeconfig name them."""

    def __init__(self, args: argparse.Namespace) -> None:
        from infergate.kube.client import KubeClient, kubeconfig_namespace

        self.client = KubeClient.from_environment(args.kubeconfig, args.context)
        self.namespace: str = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)

    def deployment(self, name: str) -> JSON:
        from infergate.kube.client import INFERENCE_DEPLOYMENTS

        return self.client.get(INFERENCE_DEPLOYMENTS, self.namespace, name)

    def check(self, name: str) -> JSON:
        from infergate.kube.client import PARITY_CHECKS

        return self.client.get(PARITY_CHECKS, self.namespace, name)

    def config_map(self, name: str) -> JSON:
        from infergate.kube.client import CONFIG_MAPS

        return self.client.get(CONFIG_MAPS, self.namespace, name)


def _last_check(deployment: Mapping[str, Any]) -> str | None:
    last = (deployment.get("status") or {}).get("lastParityCheck") or {}
    name = last.get("name")
    return str(name) if name else None


def check_lines(check: Mapping[str, Any]) -> list[str]:
    """The check's progress and verdict, as `status` prints them under the deployment."""
    name = check["metadata"]["name"]
    status: Mapping[str, Any] = check.get("status") or {}
    phase = status.get("phase") or "Pending"
    progress = status.get("progress") or {}
    parts = [f"  check:    {name}  {phase}"]
    if progress:
        noise = progress.get("stage") == ProgressStage.BASELINE_NOISE
        measuring = " (baseline noise)" if noise else ""
        parts.append(f"{progress.get('done', 0)}/{progress.get('total', 0)} prompts{measuring}")
    if status.get("profile"):
        parts.append(f"profile {status['profile']}")
    sides = [
        f"{side} {status[key]}"
        for side, key in (("baseline", "baselineRevision"), ("candidate", "candidateRevision"))
        if status.get(key)
    ]
    lines = ["  ".join(parts + sides)]
    verdict: Mapping[str, Any] = status.get("verdict") or {}
    if verdict:
        outcome = verdict.get("outcome") or ("Passed" if verdict.get("passed") else "Failed")
        summary = verdict.get("summary") or ""
        lines.append(f"  verdict:  {outcome}{'  ' + summary if summary else ''}")
        lines += [f"    {_reason(reason)}" for reason in verdict.get("reasons") or []]
        lines += [f"    warning: {warning}" for warning in verdict.get("warnings") or []]
    metrics: Mapping[str, float] = status.get("metrics") or {}
    if metrics:
        shown = ", ".join(f"{key}={_number(value)}" for key, value in sorted(metrics.items()))
        lines.append(f"  metrics:  {shown}")
    if status.get("reportRef"):
        lines.append(f"  report:   kubectl infergate report --check {name}")
    return lines


def _reason(reason: Mapping[str, Any]) -> str:
    metric = reason.get("metric", "?")
    value, threshold = reason.get("value"), reason.get("threshold")
    comparison = reason.get("comparison") or ""
    if value is None:
        text = f"{metric}: not measured"
    elif threshold is None:
        text = f"{metric} = {_number(value)}"
    else:
        text = f"{metric} = {_number(value)}, needs {comparison} {_number(threshold)}"
    prompts = reason.get("prompts") or []
    if prompts:
        more = f" (+{len(prompts) - 5} more)" if len(prompts) > 5 else ""
        text += f"; prompts: {', '.join(prompts[:5])}{more}"
    return text


def _say(line: str) -> None:
    """A line for the person at the terminal (a plugin's output is its interface)."""
    sys.stdout.write(line + "\n")


def _complain(line: str) -> None:
    sys.stderr.write(line + "\n")


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def run_status(args: argparse.Namespace) -> int:
    """The operator CLI's status, followed by the current check's progress and verdict."""
    code = control.run_status(args)
    if code != 0 or args.output == "json":
        return code
    try:
        session = _Session(args)
        check_name = _last_check(session.deployment(args.name))
        if check_name is None:
            _say("  check:    none yet")
            return 0
        try:
            check = session.check(check_name)
        except NotFoundError:
            _say(f"  check:    {check_name} (deleted)")
            return 0
    except InfergateError as error:
        _complain(f"error: {error}")
        return 1
    for line in check_lines(check):
        _say(line)
    return 0


def run_report(args: argparse.Namespace) -> int:
    """Write the HTML report (and, with --json, the result) of a check."""
    from infergate.commands.parity_run import html_from_json
    from infergate.render.check_names import REPORT_HTML_KEY, REPORT_JSON_KEY, report_name
    from infergate.runner.report_store import read_report

    try:
        session = _Session(args)
        check_name = args.check or _last_check(session.deployment(args.name))
        if check_name is None:
            _say(f"InferenceDeployment {session.namespace}/{args.name} has no parity check yet")
            return 1
        check = session.check(check_name)
        status = check.get("status") or {}
        ref = status.get("reportRef") or {}
        try:
            config_map = session.config_map(ref.get("name") or report_name(check_name))
        except NotFoundError:
            phase = status.get("phase") or "Pending"
            _say(f"ParityCheck {session.namespace}/{check_name} has no report yet ({phase})")
            return 1
    except NotFoundError as error:
        _complain(f"not found: {error}")
        return 1
    except InfergateError as error:
        _complain(f"error: {error}")
        return 1
    documents = read_report(config_map.get("data"), config_map.get("binaryData"))
    html = documents.get(REPORT_HTML_KEY) or html_from_json(documents.get(REPORT_JSON_KEY))
    if html is None:
        _say(f"ParityCheck {session.namespace}/{check_name}: the report ConfigMap holds no report")
        return 1
    output: Path = args.output or Path(f"{check_name}.html")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(html, encoding="utf-8")
    verdict = (status.get("verdict") or {}).get("outcome") or status.get("phase") or "Pending"
    _say(f"wrote {output} (ParityCheck {session.namespace}/{check_name}, {verdict})")
    if args.json is not None and REPORT_JSON_KEY in documents:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(documents[REPORT_JSON_KEY], encoding="utf-8")
        _say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
