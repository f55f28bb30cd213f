"""Drive both sides (or the candidate against a golden record) through the suite.

Prompts run with bounded concurrency (`runner.drive`); each measured pair feeds the
comparison, the golden recorder when there is one, and the baseline's sequence kept
for the layer probe. Progress shows in the status at most every `progress_interval`
seconds. Every engine is scraped before and after, so the report can say how much of
the check's time was the runner's own (`runner.overhead`). A side that cannot be
reached retries the run; an answer that cannot be used ends the check; either way what
the recorder staged is dropped.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import replace

from infergate.parity.record import ParityInputError, PromptRecord
from infergate.plan import reasons
from infergate.runner import overhead
from infergate.runner.context import CheckEndedError, RetryableRunError, RunContext, say
from infergate.runner.drive import (
    DriveSettings,
    SideAnswerError,
    SideUnavailableError,
    drive_suite,
    measure_against_record,
    measure_prompt,
)
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import progress_writer
from infergate.suite import PromptSpec


def drive(run: RunContext, state: RunState) -> None:
    """Measure the suite into the comparison (and the golden recorder, if any); what the
    recorder staged is dropped when the run ends without measuring everything. The
    baseline's records (without hidden states) are kept when spec.load or
    spec.performance will compare with them."""
    try:
        _drive(run, state)
    except BaseException:
        if state.recorder is not None:
            state.recorder.discard()
        raise


def _drive(run: RunContext, state: RunState) -> None:
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    comparison = need(state.comparison, "the comparison")
    baseline, candidate = need(state.sides, "the sides")
    recorder, record = state.recorder, state.golden_base
    keep = spec.load is not None or spec.performance is not None
    settings = DriveSettings(
        max_tokens=spec.sampling.max_tokens,
        top_logprobs=spec.sampling.top_logprobs,
        seed=spec.sampling.seed,
        max_hidden_positions=spec.hidden_states.max_positions_per_prompt,
    )
    total = len(suite.prompts)
    progress = progress_writer(run, state, total)

    def feed(base: PromptRecord, cand: PromptRecord) -> None:
        state.references[base.prompt_id] = [
            *base.prompt_token_ids.tolist(),
            *base.output_token_ids.tolist(),
        ][: settings.max_hidden_positions]
        comparison.add(base, cand)
        if recorder is not None:
            recorder.add(base, cand)
        if keep:
            state.kept.append(replace(base, hidden_states=None))

    log = overhead.RequestLog()
    engines = overhead.check_engines((candidate,) if record is not None else (baseline, candidate))
    concurrency = max(1, min(run.options.concurrency, total))
    timeout = run.options.request_timeout
    with ExitStack() as stack:
        cand = run.connector.open(candidate, stack, timeout, log)
        if record is not None:

            def measure(prompt: PromptSpec) -> tuple[PromptRecord, PromptRecord]:
                return measure_against_record(prompt, record.prompt(prompt.id), cand, settings)

        else:
            base = run.connector.open(baseline, stack, timeout, log)

            def measure(prompt: PromptSpec) -> tuple[PromptRecord, PromptRecord]:
                return measure_prompt(prompt, base, cand, settings)

        before, unmeasured = overhead.first_scrape(engines, run.connector.scrape)
        if before is None:
            state.overhead = unmeasured
        started = time.monotonic()
        try:
            drive_suite(
                suite.prompts,
                measure,
                feed,
                concurrency=run.options.concurrency,
                progress=progress,
            )
        except SideUnavailableError as err:
            raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
        except (SideAnswerError, ParityInputError) as err:
            raise CheckEndedError(reasons.CHECK_COULD_NOT_MEASURE, str(err)) from err
        wall = time.monotonic() - started
        if before is not None:
            state.overhead = overhead.window_overhead(
                engines,
                before,
                run.connector.scrape,
                log,
                wall_seconds=wall,
                concurrency=concurrency,
            )
    say(overhead.describe(state.overhead))
