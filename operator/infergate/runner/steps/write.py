"""Write what a run found: the report ConfigMap, then the terminal status.

The report document holds the verdict, the result, both sides, what the candidate
revision changes (environment values left out: a report is read more widely than the
spec), the runner's overhead, and the load, golden and layer findings there are. The
judgement written to the status is the suite's with load and performance folded in
(the worst wins) and the first diverging layer among its reasons. The status is
written only if the check is still not terminal.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from pydantic.alias_generators import to_camel

from infergate.api.check_status import VerdictReason
from infergate.api.common import ConfigMapKeyReference
from infergate.plan.check.status import Judgement
from infergate.plan.deployment.revision_diff import revision_changes
from infergate.render.check_names import REPORT_HTML_KEY, child_labels, report_name
from infergate.runner.combine import combined
from infergate.runner.context import CheckEndedError, RunContext, say
from infergate.runner.report_page import check_page
from infergate.runner.report_store import ReportTooLargeError, build_report_data
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import api_call, finish_with_verdict
from infergate.runner.summary import judgement

ROLE_REPORT = "report"


def write(run: RunContext, state: RunState) -> None:
    """The report, then the verdict with the run's figures."""
    result, verdict = need(state.result, "the result"), need(state.verdict, "the verdict")
    gate, sides = need(state.gate, "the gate"), need(state.sides, "the sides")
    profile, why = gate.profile, gate.reason
    changes = revision_changes_shown(*sides)
    document: dict[str, Any] = {
        "check": {"namespace": run.api.namespace, "name": run.name},
        "changes": changes,
        "status": verdict.status.value,
        "profile": profile.value,
        "profileReason": why,
        "sides": {s.side: side_summary(s) for s in sides},
        "seconds": round(state.seconds, 2),
        "overhead": state.overhead,
        "verdict": verdict.model_dump(mode="json", by_alias=True),
        "result": result.model_dump(mode="json", by_alias=True),
    }
    judged = judgement(result, verdict, profile.value)
    if state.load is not None:
        judged = combined(judged, state.load.judgements, metrics=state.load.metrics)
        document["status"] = judged.phase.value
        document |= state.load.document
        say(f"with load and performance: {judged.phase.value}")
    if state.golden is not None:
        document["golden"] = state.golden
    if state.golden_base is not None:
        document["goldenBaseline"] = state.golden_base.status()
    html = check_page(
        result,
        verdict,
        f"{profile.value} ({why})",
        changes,
        sections=[state.layers.html] if state.layers.html else [],
        overhead=state.overhead,
    )
    state.report = store_report(run, state, document, html)
    total = len(need(state.suite, "the suite").prompts)
    extra: dict[str, Any] = {
        "progress": {"done": result.metrics.prompts, "total": total},
        "overhead": state.overhead,
        **(state.load.status if state.load is not None else {}),
    }
    if state.golden is not None:
        extra["golden"] = state.golden
    if state.golden_base is not None:
        extra["goldenBaseline"] = state.golden_base.status()
    finish_with_verdict(
        run, state, _with_layer(judged, state), sides, report=state.report, extra=extra
    )


def _with_layer(judged: Judgement, state: RunState) -> Judgement:
    """The judgement with the first diverging layer among its reasons, when one was found."""
    reason = state.layers.reason
    if reason is None:
        return judged
    layer = VerdictReason(metric="layers.firstDiverging", message=reason)
    return replace(judged, reasons=[*judged.reasons, layer])


def store_report(
    run: RunContext, state: RunState, document: dict[str, Any], html: str
) -> ConfigMapKeyReference:
    """The report ConfigMap, owned by the check; the key people open (the HTML when it fit)."""
    try:
        data = build_report_data(document, html)
    except ReportTooLargeError as err:
        raise CheckEndedError("ReportTooLarge", str(err)) from err
    name = report_name(run.name)
    owner = {
        "apiVersion": state.check["apiVersion"],
        "kind": state.check["kind"],
        "name": run.name,
        "uid": state.check["metadata"]["uid"],
        "controller": True,
    }
    api_call(
        lambda: run.api.write_report(
            name,
            data=data.data,
            binary_data=data.binary_data,
            labels=child_labels(run.name, ROLE_REPORT),
            owner=owner,
        )
    )
    for note in data.trimmed:
        say(f"report: {note}")
    key = (
        REPORT_HTML_KEY
        if REPORT_HTML_KEY in data.data
        else next(iter([*data.data, *data.binary_data]))
    )
    return ConfigMapKeyReference(name=name, key=key)


def revision_changes_shown(baseline: SideTarget, candidate: SideTarget) -> list[str] | None:
    """What the candidate revision changes, one line each; None unless both are revisions.

    Environment values are not shown: a report is read more widely than the spec.
    """
    if baseline.revision_spec is None or candidate.revision_spec is None:
        return None
    lines = []
    for change in revision_changes(baseline.revision_spec, candidate.revision_spec):
        if change.path.startswith("engine.env."):
            lines.append(f"{change.path}: changed")
        else:
            lines.append(change.describe())
    return lines


def side_summary(target: SideTarget) -> dict[str, Any]:
    """A side as the report shows it (no effective config, no uid)."""
    summary = asdict(target)
    summary.pop("effective_config", None)
    summary.pop("deployment_uid", None)
    return {to_camel(k): v for k, v in summary.items() if v is not None}
