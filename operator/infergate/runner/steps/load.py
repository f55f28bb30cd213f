"""Load levels and performance, after the suite, when the spec asks for them.

Both sides are driven again at each load level and for performance (`runner.load`),
compared with the baseline's records the drive kept; their judgements are folded into
the suite's when the report is written. A side that cannot be reached retries the run;
an answer that cannot be used ends the check.
"""

from __future__ import annotations

from infergate.parity.record import ParityInputError
from infergate.plan import reasons
from infergate.runner.context import CheckEndedError, RetryableRunError, RunContext, say
from infergate.runner.drive import SideAnswerError, SideUnavailableError
from infergate.runner.load import run_load
from infergate.runner.state import RunState, need


def measure_load(run: RunContext, state: RunState) -> None:
    """The load levels' and performance's outcome (nothing when neither is asked)."""
    spec = need(state.spec, "the spec")
    if spec.load is None and spec.performance is None:
        return
    baseline, candidate = need(state.sides, "the sides")
    try:
        state.load = run_load(
            spec,
            baseline,
            candidate,
            kept=state.kept,
            metas=need(state.metas, "the sides' metadata"),
            gate=need(state.gate, "the gate"),
            say=say,
        )
    except SideUnavailableError as err:
        raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
    except (SideAnswerError, ParityInputError) as err:
        raise CheckEndedError(reasons.CHECK_COULD_NOT_MEASURE, str(err)) from err
