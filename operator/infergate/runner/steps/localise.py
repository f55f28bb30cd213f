"""A failed check's first diverging layer, asked of both sides after the verdict.

Only a Failed check is localised (`runner.layers`): the layer goes into the verdict's
reasons and the result's notes, its chart into the report. A golden baseline keeps no
per-layer states, so a check against one says that instead.
"""

from __future__ import annotations

from infergate.parity.verdict import VerdictStatus
from infergate.runner.context import RunContext, say
from infergate.runner.layers import LayerReport, localise_failure
from infergate.runner.noise import baseline_noise
from infergate.runner.state import RunState, need


def localise(run: RunContext, state: RunState) -> None:
    """The layer report; its notes join the result's, its reason the verdict's."""
    result, verdict = need(state.result, "the result"), need(state.verdict, "the verdict")
    layers = _layer_report(run, state)
    if layers.notes:
        result = result.model_copy(update={"notes": [*result.notes, *layers.notes]})
    if layers.reason is not None:
        say(f"  {layers.reason}")
        verdict = verdict.model_copy(update={"reasons": [*verdict.reasons, layers.reason]})
    state.layers, state.result, state.verdict = layers, result, verdict


def _layer_report(run: RunContext, state: RunState) -> LayerReport:
    """A failed check's first diverging layer (nothing for any other verdict)."""
    if need(state.verdict, "the verdict").status is not VerdictStatus.FAILED:
        return LayerReport(None, (), "")
    if state.golden_base is not None:
        return LayerReport.skipped(
            "the baseline is a golden record, which keeps no per-layer states"
        )
    say("failed: asking both sides for every layer's states on the worst prompts")
    return localise_failure(
        need(state.result, "the result"),
        need(state.sides, "the sides"),
        state.references,
        run.connector.layers,
        timeout=run.options.request_timeout,
        noise=baseline_noise(run, state),
    )
