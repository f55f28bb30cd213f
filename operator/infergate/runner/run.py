"""The runner: one ParityCheck from spec to verdict, written into its status and report.

`run_check` is what `infergate parity run --check NS/NAME` does inside the runner Job:

1. read the check; a check that already ended is left alone (a retried pod never
   overwrites a verdict);
2. load the suite and resolve both sides (endpoints from EndpointSlices, engines,
   probes), waiting a little for pods that are still starting;
3. drive both sides with bounded concurrency, feeding the parity core, and show
   progress in the status;
4. decide, write the report ConfigMap, then the terminal status — only if the check
   is still not terminal (conditional update on its resourceVersion).

Each of these is a step of `runner.steps` over one `RunState`; `runner.modes` says
which steps a kind of check runs, in which order.

Fail closed: anything that prevents measuring ends in `Error`, never `Passed`.
A failure a retry may fix (a side unreachable or failing, the API server away) is
recorded as the `RunnerError` condition and the process exits non-zero, so the Job
retries it within `runner.backoffLimit` and the controller ends the check in `Error`
with that reason if no attempt succeeds. A failure a retry cannot fix (a side that
does not exist, an unusable answer, an invalid suite) ends the check in `Error` at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime

from infergate.plan.check.status import now
from infergate.runner import status_writer
from infergate.runner.context import (
    EXIT_DONE,
    EXIT_RETRY,
    CheckEndedError,
    Connector,
    RetryableRunError,
    RunContext,
    RunnerApi,
    RunOptions,
    say,
)
from infergate.runner.modes import run_mode
from infergate.runner.state import RunState
from infergate.runner.steps.gate import SETTLED_PROMPTS, settled_suite

__all__ = [
    "EXIT_DONE",
    "EXIT_RETRY",
    "SETTLED_PROMPTS",
    "CheckEndedError",
    "Connector",
    "RetryableRunError",
    "RunOptions",
    "RunnerApi",
    "main_entry",
    "run_check",
    "settled_suite",
]


def run_check(
    api: RunnerApi,
    name: str,
    options: RunOptions,
    *,
    connector: Connector | None = None,
    clock: Callable[[], datetime] = now,
) -> int:
    """Run one check to its verdict; the exit code the runner process returns."""
    run = RunContext(api, name, options, connector or Connector(), clock)
    state = RunState()
    try:
        run_mode(run, state)
    except CheckEndedError as err:
        say(f"Error ({err.reason}): {err}")
        return status_writer.end_in_error(run, state, err.reason, str(err))
    except RetryableRunError as err:
        say(f"attempt failed ({err.reason}): {err}")
        status_writer.record_attempt_failure(run, err.reason, str(err))
        return EXIT_RETRY
    return EXIT_DONE


def main_entry(
    api: RunnerApi, name: str, options: RunOptions, connector: Connector | None = None
) -> int:
    """For the CLI: run, and turn an unexpected crash into a retry (the traceback is logged)."""
    try:
        return run_check(api, name, options, connector=connector)
    except Exception:  # noqa: BLE001 - a crash must never pass for a verdict; the Job retries
        import traceback

        traceback.print_exc(file=sys.stdout)
        run = RunContext(api, name, options, connector or Connector(), now)
        status_writer.record_attempt_failure(
            run, "RunnerCrashed", f"runner crashed: {traceback.format_exc(limit=3)[-2000:]}"
        )
        return EXIT_RETRY
