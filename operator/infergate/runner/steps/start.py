"""The first steps of a run: the check as read, its suite, and the Running phase.

A check that already ended is left alone (a retried pod never overwrites a verdict),
and so is one that ends while the runner starts. An invalid spec or suite ends the
check in Error: no retry can fix it; so does a suite ConfigMap edited since the check
was made (its content no longer the digest the spec pins).
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from infergate.api.parity_check import ParityCheck
from infergate.plan import reasons
from infergate.runner import status_writer
from infergate.runner.context import CheckEndedError, RunContext, say
from infergate.runner.state import RunState, need
from infergate.suite import (
    PromptSpec,
    Suite,
    SuiteError,
    SuiteNotFoundError,
    config_map_suite,
)


def read_check(run: RunContext, state: RunState) -> None:
    """The check and its validated spec; done when it already ended."""
    state.check = status_writer.get_check(run)
    phase = (state.check.get("status") or {}).get("phase")
    if status_writer.is_ended(state.check):
        say(f"check {run.api.namespace}/{run.name} already ended ({phase}); nothing to do")
        state.done = True
        return
    state.generation = state.check["metadata"].get("generation")
    try:
        state.spec = ParityCheck.model_validate(state.check).spec
    except ValidationError as err:
        raise CheckEndedError(reasons.CHECK_INVALID, f"spec is invalid: {err}") from err


def load_suite(run: RunContext, state: RunState) -> None:
    """The suite the spec names, inline or in a ConfigMap of the check's namespace; the
    run's clock starts here. A ConfigMap whose prompts are not the ones spec.suite.digest
    pins ends the check (SuiteChanged): the verdict would stand for other prompts."""
    source = need(state.spec, "the spec").suite
    if source is None:
        raise CheckEndedError(reasons.CHECK_INVALID, "spec.suite is unset")
    if source.inline is not None:
        prompts = tuple(
            PromptSpec.model_validate(p.model_dump(mode="json", by_alias=True, exclude_none=True))
            for p in source.inline
        )
        state.suite = Suite("inline", prompts)
    else:
        ref = source.config_map_ref
        assert ref is not None  # noqa: S101 - PromptSuite guarantees exactly one source
        config_map = status_writer.api_call(lambda: run.api.config_map(ref.name))
        try:
            state.suite = config_map_suite(config_map, ref.name, ref.key)
        except SuiteNotFoundError as err:
            raise CheckEndedError("SuiteNotFound", str(err)) from err
        except SuiteError as err:
            raise CheckEndedError("InvalidSuite", str(err)) from err
        found = state.suite.content_digest()
        if source.digest is not None and found != source.digest:
            raise CheckEndedError(
                reasons.CHECK_SUITE_CHANGED,
                f"suite.configMapRef {ref.name}/{ref.key}: ConfigMap {ref.name} holds suite "
                f"content {found}, but the check was made for {source.digest} "
                "(spec.suite.digest): it was edited after the check was created; create a new "
                "check to judge the new prompts",
            )
    state.suite_digest = state.suite.content_digest()
    state.started = time.monotonic()


def mark_running(run: RunContext, state: RunState) -> None:
    """Phase Running with the suite's size as progress; done when the check ended meanwhile."""
    total = len(need(state.suite, "the suite").prompts)
    if not status_writer.mark_running(run, state, total):
        state.done = True
