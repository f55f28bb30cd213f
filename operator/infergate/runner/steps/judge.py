"""Judge what the drive measured: the result, the regression test, the verdict.

The result carries notes on how it was measured (a golden baseline, a settled suite).
A regression is a worsening against a comparable check: the last passing check's
metrics count only when it ran under the same profile, since a previous check under
another profile (a migration, say, against a kernel update) measured a different change.
"""

from __future__ import annotations

import json
import time

from pydantic import ValidationError

from infergate.parity.metrics import ParityMetrics, ParityResult
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import VerdictStatus, decide
from infergate.runner.context import RunContext, say
from infergate.runner.report_store import read_report
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import api_call


def judge(run: RunContext, state: RunState) -> None:
    """The finalized result with its notes, and the core's verdict on it."""
    spec, gate = need(state.spec, "the spec"), need(state.gate, "the gate")
    comparison = need(state.comparison, "the comparison")
    golden = state.golden_base
    result = with_notes(
        comparison.finalize(),
        golden.note() if golden is not None else None,
        state.stopped_early,
    )
    if state.limits is not None:
        result = result.model_copy(update={"calibration": state.limits})
    previous = previous_metrics(run, gate.profile)
    verdict = decide(result, gate.warn, previous, spec.effective_regression())
    state.seconds = time.monotonic() - state.started
    say(f"verdict {verdict.status.value} after {state.seconds:.1f}s")
    for reason in verdict.reasons:
        say(f"  reason: {reason}")
    state.result, state.verdict = result, verdict


def with_notes(result: ParityResult, *notes: str | None) -> ParityResult:
    """The result with `notes` (those given) ahead of its own."""
    return result.model_copy(update={"notes": [n for n in notes if n] + result.notes})


def previous_metrics(run: RunContext, profile: ProfileName) -> ParityMetrics | None:
    """Metrics of the last passing check, when it judged the same kind of change."""
    name = run.options.previous_report
    if name is None:
        return None
    config_map = api_call(lambda: run.api.config_map(name))
    if config_map is None:
        say(f"previous report {name} not found; no regression test")
        return None
    documents = read_report(config_map.get("data"), config_map.get("binaryData"))
    try:
        document = json.loads(documents["result.json"])
        if document.get("status") != VerdictStatus.PASSED.value:
            return None
        if document.get("profile") != profile.value:
            say(
                f"previous passing check ran under profile {document.get('profile')}, this one "
                f"under {profile.value}; no regression test"
            )
            return None
        metrics = ParityMetrics.model_validate(document["result"]["metrics"])
    except (KeyError, ValueError, ValidationError) as err:
        say(f"previous report {name} unreadable ({err}); no regression test")
        return None
    say(f"regression test against the last passing check ({name})")
    return metrics
