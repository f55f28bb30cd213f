"""Golden records in a run: a record as the baseline, or both sides' records kept.

A check whose `baseline.golden` names a record compares the candidate with it (no
baseline pods run); it is opened after the candidate is resolved (the latest record
excludes the candidate's revision) and closed when the run ends. Any other check
stages both sides' records while it drives and commits them when it Passes, then
applies the store's retention; a store that fails never changes the verdict.
"""

from __future__ import annotations

from infergate.golden.retention import deployment_history
from infergate.parity.verdict import VerdictStatus
from infergate.runner.context import CheckEndedError, RetryableRunError, RunContext, say
from infergate.runner.golden import GoldenRecorder
from infergate.runner.golden_baseline import (
    GoldenBaselineError,
    golden_target,
    open_golden_baseline,
)
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import api_call


def use_golden_baseline(run: RunContext, state: RunState) -> None:
    """The record `baseline.golden` names, verified, as the baseline beside the candidate."""
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    candidate = need(state.candidate, "the candidate")
    try:
        found = open_golden_baseline(
            run.options.golden,
            namespace=run.api.namespace,
            spec=spec,
            suite=suite,
            candidate_revision=candidate.revision,
            environ=run.options.environ,
        )
    except GoldenBaselineError as err:
        if err.retry:
            raise RetryableRunError(err.reason, str(err)) from err
        raise CheckEndedError(err.reason, str(err)) from err
    say(f"golden baseline: {found.note()}")
    state.golden_base = found
    state.sides = (golden_target(found), candidate)


def start_recording(run: RunContext, state: RunState) -> None:
    """A recorder staging both sides' records (none when the operator keeps no records)."""
    baseline, candidate = need(state.sides, "the sides")
    meta_b, meta_c = need(state.metas, "the sides' metadata")
    state.recorder = GoldenRecorder.start(
        run.options.golden,
        namespace=run.api.namespace,
        check=run.name,
        spec=need(state.spec, "the spec"),
        suite=need(state.suite, "the suite"),
        baseline=(baseline, meta_b),
        candidate=(candidate, meta_c),
        environ=run.options.environ,
    )


def record_golden(run: RunContext, state: RunState) -> None:
    """Commit the golden records on Passed and apply retention; the status `golden` field
    (None: the operator keeps no records)."""
    recorder = state.recorder
    if recorder is None:
        return
    status = need(state.verdict, "the verdict").status
    profile = need(state.gate, "the gate").profile
    history = None
    where = recorder.where
    if status is VerdictStatus.PASSED and where is not None:
        deployment = api_call(lambda: run.api.inference_deployment(where[1]))
        history = deployment_history(deployment)
    golden = recorder.finish(
        status is VerdictStatus.PASSED,
        outcome=status.value,
        profile=profile.value,
        history=history,
        list_deployments=run.api.inference_deployments,
    )
    say(f"golden records: {golden.get('entries') or golden.get('message')}")
    state.golden = golden
