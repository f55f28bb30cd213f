"""Each kind of check as the order its steps run in.

    suite check       start, resolve both sides, gate, the baseline's noise where none is
                      kept, limits, record, drive, judge, golden, noise, localise
    golden baseline   start, resolve the candidate, open the record, gate, limits, drive,
                      judge, localise
    load/performance  either of the above, then the load levels, before writing
    shadow            the mirror's copies instead of a suite (`runner.shadow`), on the same
                      status, side and report steps

A mode stops after any step that finds nothing left to do (the check ended meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from infergate.api.common import ConfigMapKeyReference
from infergate.api.parity_check import ParityCheckSpec
from infergate.api.shadow import CheckSource
from infergate.parity.calibrated import DerivedLimits
from infergate.parity.profiles import Gate
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import Thresholds
from infergate.plan.check.status import Judgement
from infergate.runner import status_writer
from infergate.runner.context import CheckEndedError, RetryableRunError, RunContext, say
from infergate.runner.noise import derived_limits, keep_change_pair, measure_baseline_noise
from infergate.runner.shadow import ShadowError, run_shadow
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState, need
from infergate.runner.steps.drive import drive
from infergate.runner.steps.gate import plan_gate, plan_limits, record_meta
from infergate.runner.steps.golden import record_golden, start_recording, use_golden_baseline
from infergate.runner.steps.judge import judge
from infergate.runner.steps.load import measure_load
from infergate.runner.steps.localise import localise
from infergate.runner.steps.resolve import (
    check_health,
    resolve,
    resolve_candidate,
    resolve_sides,
    wait_healthy,
)
from infergate.runner.steps.start import load_suite, mark_running, read_check
from infergate.runner.steps.write import store_report, write
from infergate.suite import Suite

Step = Callable[[RunContext, RunState], None]

SUITE_CHECK: tuple[Step, ...] = (
    load_suite, mark_running, resolve_sides, check_health, plan_gate, measure_baseline_noise,
    plan_limits, start_recording, drive, judge, record_golden, keep_change_pair, localise,
)  # fmt: skip
"""Both sides live: measure the suite; a Passed check keeps both sides' records (and, a
dtype change of one set of weights, its own pair as the candidate's expected-change
noise). A baseline revision with no self noise kept has it measured first, when the
check's limits read it, once both sides answer and before the limits are derived from
it; nothing is driven after the verdict, so promotion never waits on a measurement."""

GOLDEN_BASELINE: tuple[Step, ...] = (
    load_suite, mark_running, resolve_candidate, use_golden_baseline, check_health, plan_gate,
    plan_limits, drive, judge, localise,
)  # fmt: skip
"""The candidate against a golden record: no baseline pods, nothing recorded."""

LOAD: tuple[Step, ...] = (measure_load,)
"""Load levels and performance, after the suite (`spec.load`, `spec.performance`)."""

WRITE: tuple[Step, ...] = (write,)


def steps_for(spec: ParityCheckSpec) -> tuple[Step, ...]:
    """The steps a suite check of `spec` runs, in order."""
    measure = GOLDEN_BASELINE if spec.baseline.golden is not None else SUITE_CHECK
    load = LOAD if spec.load is not None or spec.performance is not None else ()
    return (*measure, *load, *WRITE)


def run_mode(run: RunContext, state: RunState) -> None:
    """Read the check, then run its mode's steps until one finds nothing left to do."""
    read_check(run, state)
    if state.done:
        return
    spec = need(state.spec, "the spec")
    if spec.source is CheckSource.SHADOW:
        shadow_check(run, state)
        return
    try:
        run_steps(steps_for(spec), run, state)
    finally:
        if state.golden_base is not None:
            state.golden_base.close()


def run_steps(steps: Sequence[Step], run: RunContext, state: RunState) -> None:
    """`steps` in order, stopping after one that finds nothing left to do."""
    for step in steps:
        step(run, state)
        if state.done:
            return


def shadow_check(run: RunContext, state: RunState) -> None:
    """A shadow check: the mirror's copies, through the runner's own status and side steps."""
    try:
        run_shadow(_ShadowSteps(run, state), need(state.spec, "the spec"))
    except ShadowError as err:
        if err.retry:
            raise RetryableRunError(err.reason, str(err)) from err
        raise CheckEndedError(err.reason, str(err)) from err


class _ShadowSteps:
    """The runner's steps as the shadow flow uses them (`runner.shadow.RunnerSteps`)."""

    def __init__(self, run: RunContext, state: RunState) -> None:
        self._run, self._state = run, state
        self.name = run.name
        self.check = state.check

    @property
    def namespace(self) -> str:
        return self._run.api.namespace

    def mark_running(self, total: int) -> bool:
        return status_writer.mark_running(self._run, self._state, total)

    def resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]:
        baseline, candidate = resolve(self._run, self._state, spec, ("baseline", "candidate"))
        return baseline, candidate

    def health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        wait_healthy(self._run, baseline, candidate)

    def meta(self, target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
        return record_meta(target, suite, asked)

    def limits(
        self, gate: Gate, metas: tuple[RecordMeta, RecordMeta], baseline: SideTarget,
        explicit: Thresholds,
    ) -> DerivedLimits:  # fmt: skip
        return derived_limits(self._run, gate, metas, baseline, explicit)

    def progress(self, done: int, total: int) -> None:
        status_writer.show_progress(self._run, self._state, done, total)

    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        api = self._run.api
        service = status_writer.api_call(lambda: api.service(name))
        slices = status_writer.api_call(lambda: api.endpoint_slices(name))
        return service, slices

    def write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference:
        return store_report(self._run, self._state, document, html)

    def finish(
        self,
        verdict: Judgement,
        baseline: SideTarget,
        candidate: SideTarget,
        report: ConfigMapKeyReference,
        extra: Mapping[str, Any],
    ) -> None:
        say(f"verdict {verdict.phase.value}: {verdict.summary}")
        status_writer.finish_with_verdict(
            self._run, self._state, verdict, (baseline, candidate), report=report, extra=extra
        )
