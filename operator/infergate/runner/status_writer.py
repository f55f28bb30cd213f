"""Every write the runner makes to its check's status, and how API errors end a run.

The runner marks the check Running (unless it ended meanwhile), shows progress, and
ends it once: with a verdict, or in Error. A terminal write is conditional on the
check not having ended yet (`write_terminal_status`), so a retried pod never
overwrites a verdict. A failed attempt is recorded as the `RunnerError` condition
only, for the controller to end the check if no attempt succeeds.

API errors are sorted fail closed (`api_failure`): what the API server may answer
differently later retries; a refusal (forbidden, not found, invalid) ends the check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from infergate.api.check_status import ProgressStage
from infergate.api.common import ConfigMapKeyReference
from infergate.errors import (
    ConflictError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    RetriableKubeError,
)
from infergate.kube.paritycheck_api import write_terminal_status
from infergate.plan.check.status import (
    Binding,
    Judgement,
    error_status,
    runner_error_conditions,
    spec_digest,
    verdict_status,
)
from infergate.plan.phases import is_check_terminal
from infergate.retry import retry_call
from infergate.runner.context import (
    EXIT_DONE,
    EXIT_RETRY,
    CheckEndedError,
    RetryableRunError,
    RunContext,
    say,
)
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState

_T = TypeVar("_T")


def api_failure(err: KubeError) -> Exception:
    """The fail-closed class of an API error: refused requests end the check, the rest retry."""
    if isinstance(err, RetriableKubeError):
        return RetryableRunError("ApiUnavailable", str(err))
    if isinstance(err, ForbiddenError) or err.status == 401:
        return CheckEndedError("Forbidden", f"the runner's ServiceAccount may not: {err}")
    if isinstance(err, NotFoundError):
        return CheckEndedError("NotFound", str(err))
    return CheckEndedError("ApiRefused", str(err))


def api_call(fn: Callable[[], _T]) -> _T:
    """`fn()`, its API errors sorted by `api_failure`."""
    try:
        return fn()
    except KubeError as err:
        raise api_failure(err) from err


def get_check(run: RunContext) -> dict[str, Any]:
    """The check as the API server has it now."""
    return api_call(lambda: run.api.get_check(run.name))


def is_ended(check: Mapping[str, Any]) -> bool:
    """The check already has a terminal phase (a verdict, or Error)."""
    return is_check_terminal((check.get("status") or {}).get("phase"))


def mark_running(run: RunContext, state: RunState, total: int) -> bool:
    """Phase Running, unless the check ended meanwhile (then False: nothing to do)."""

    def mark() -> bool:
        phase = (state.check.get("status") or {}).get("phase")
        if is_check_terminal(phase):
            say(f"check ended ({phase}) before the runner started; nothing to do")
            return False
        fields = {
            "phase": "Running",
            "observedGeneration": state.generation,
            "progress": {"done": 0, "total": total},
            **_start_time(run, state),
        }
        version = state.check["metadata"].get("resourceVersion")
        state.check = run.api.patch_check_status(run.name, fields, resource_version=version)
        return True

    def reread() -> None:
        state.check = run.api.get_check(run.name)

    try:
        return retry_call(mark, on_conflict=reread)
    except ConflictError as err:
        raise RetryableRunError("ApiConflict", f"status kept changing: {err}") from err
    except KubeError as err:
        raise api_failure(err) from err


def _start_time(run: RunContext, state: RunState) -> dict[str, str]:
    if (state.check.get("status") or {}).get("startTime"):
        return {}
    return {"startTime": run.clock().strftime("%Y-%m-%dT%H:%M:%SZ")}


def show_progress(
    run: RunContext, state: RunState, done: int, total: int,
    stage: ProgressStage = ProgressStage.SUITE,
) -> None:  # fmt: skip
    """The progress field (`done` of `total`, driven for `stage`) and a log line."""
    say(f"progress {done}/{total}" + ("" if stage is ProgressStage.SUITE else f" ({stage.value})"))
    fields = {"progress": {"done": done, "total": total, "stage": stage.value}}
    updated = api_call(lambda: run.api.patch_check_status(run.name, fields))
    if updated:
        state.check = updated


def progress_writer(
    run: RunContext, state: RunState, total: int, stage: ProgressStage = ProgressStage.SUITE
) -> Callable[[int], None]:
    """A `drive_suite` progress callback: `show_progress` at most once per
    `progress_interval`, and always at the last prompt."""
    last_write = 0.0

    def progress(done: int) -> None:
        nonlocal last_write
        if done == total or time.monotonic() - last_write >= run.options.progress_interval:
            last_write = time.monotonic()
            show_progress(run, state, done, total, stage)

    return progress


def finish(run: RunContext, fields: Mapping[str, Any]) -> bool:
    """Write a terminal status unless the check already ended; False if it had."""
    written = api_call(lambda: write_terminal_status(run.api, run.name, fields))
    if not written:
        say("check already ended; result not written")
    return written


def finish_with_verdict(
    run: RunContext,
    state: RunState,
    verdict: Judgement,
    sides: tuple[SideTarget, SideTarget],
    *,
    report: ConfigMapKeyReference,
    extra: Mapping[str, Any],
) -> None:
    """The verdict, bound to the spec and revisions it judged, with `extra` status fields."""
    baseline, candidate = sides
    binding = Binding(
        spec_digest=spec_digest(state.check.get("spec") or {}),
        generation=state.generation,
        baseline_revision=baseline.revision,
        candidate_revision=candidate.revision,
        suite_digest=state.suite_digest,
    )
    fields = verdict_status(
        verdict, binding, status=state.check.get("status") or {}, report=report, at=run.clock()
    )
    finish(run, {**fields, **extra})


def end_in_error(run: RunContext, state: RunState, reason: str, message: str) -> int:
    """End the check in Error; the exit code (a retry when even that could not be written)."""
    try:
        if not state.check:
            state.check = get_check(run)
        fields = error_status(
            message,
            reason,
            status=state.check.get("status") or {},
            generation=state.check.get("metadata", {}).get("generation"),
            at=run.clock(),
        )
        finish(run, fields)
    except RetryableRunError as err:
        say(f"could not write the Error status: {err}")
        return EXIT_RETRY
    return EXIT_DONE


def record_attempt_failure(run: RunContext, reason: str, message: str) -> None:
    """The `RunnerError` condition says why this attempt failed (the check goes on)."""

    def record() -> None:
        current = run.api.get_check(run.name)
        conditions = runner_error_conditions(
            current.get("status") or {},
            reason,
            message,
            generation=current["metadata"].get("generation"),
            at=run.clock(),
        )
        run.api.patch_check_status(
            run.name,
            {"conditions": conditions},
            resource_version=current["metadata"].get("resourceVersion"),
        )

    try:
        retry_call(record)
    except KubeError as err:
        say(f"could not record the failure in the status: {err}")
