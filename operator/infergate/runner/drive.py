"""Drive both sides through a suite, prompt by prompt, with bounded concurrency.

For each prompt: both sides tokenize it (so tokenizer drift shows as differing prompt
ids) or take its token ids; both generate greedily with top-k logprobs; the candidate
is scored on the baseline's tokens (teacher forcing); and both probes return the
last-layer hidden states of the baseline's sequence, so the states line up position
by position even after the outputs fork.

At most `concurrency` prompts are in flight; results are fed to the comparison in
suite order, so memory holds at most `concurrency` prompt pairs whatever the suite
size, and the comparison never sees two prompts at once.

Failures are sorted for the fail-closed rules: a side that cannot be reached (a
transport error, a 5xx) is `SideUnavailableError` — retrying the runner may help; an
answer that cannot be used (a 4xx, a malformed body) is `SideAnswerError` — it will
not change on a retry. Neither ever yields a verdict.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import httpx
import numpy as np
from numpy.typing import NDArray

from infergate.engines.client import (
    Completion,
    EngineClientError,
    ProbeChannel,
    ServingChannel,
)
from infergate.parity.record import PromptRecord
from infergate.suite import PromptSpec

_HTTP_STATUS = re.compile(r"HTTP (\d{3})")
_T = TypeVar("_T")


class SideUnavailableError(RuntimeError):
    """A side could not be reached or failed on the server side; a retry may help."""


class SideAnswerError(RuntimeError):
    """A side answered something the runner cannot use; a retry will not help."""


@dataclass(frozen=True)
class Channels:
    """One side's channels; `probe` is None when hidden states are not compared."""

    name: str
    serving: ServingChannel
    probe: ProbeChannel | None


@dataclass(frozen=True)
class DriveSettings:
    max_tokens: int
    top_logprobs: int
    seed: int
    max_hidden_positions: int


def classify(side: str, err: Exception) -> Exception:
    """The fail-closed class of an error raised while talking to `side`."""
    if isinstance(err, httpx.TransportError):
        return SideUnavailableError(f"{side}: {type(err).__name__}: {err}")
    if isinstance(err, EngineClientError):
        match = _HTTP_STATUS.search(str(err))
        if match is not None and match.group(1).startswith("5"):
            return SideUnavailableError(f"{side}: {err}")
        return SideAnswerError(f"{side}: {err}")
    if isinstance(err, (KeyError, TypeError, ValueError)):
        return SideAnswerError(f"{side}: unreadable answer ({type(err).__name__}: {err})")
    return err


def _call(side: str, what: str, fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except Exception as err:
        raised = classify(f"{side} {what}", err)
        if raised is err:
            raise
        raise raised from err


def measure_prompt(
    prompt: PromptSpec, baseline: Channels, candidate: Channels, settings: DriveSettings
) -> tuple[PromptRecord, PromptRecord]:
    """Both sides' records of one prompt; the candidate's teacher-forced on the baseline."""

    def ids(side: Channels) -> list[int]:
        if prompt.token_ids is not None:
            return list(prompt.token_ids)
        text = prompt.text or ""
        return _call(side.name, f"tokenize {prompt.id!r}", lambda: side.serving.tokenize(text))

    def complete(side: Channels, prompt_ids: list[int]) -> Completion:
        return _call(
            side.name,
            f"completion of {prompt.id!r}",
            lambda: side.serving.complete(
                prompt_ids,
                max_tokens=settings.max_tokens,
                top_logprobs=settings.top_logprobs,
                seed=settings.seed,
            ),
        )

    base = complete(baseline, ids(baseline))
    cand = complete(candidate, ids(candidate))
    base_prompt = list(base.prompt_token_ids)
    forced = _call(
        candidate.name,
        f"teacher-forced scoring of {prompt.id!r}",
        lambda: candidate.serving.score(
            base_prompt, base.token_ids, top_logprobs=settings.top_logprobs, seed=settings.seed
        ),
    )
    sequence = (base_prompt + list(base.token_ids))[: settings.max_hidden_positions]

    def hidden(side: Channels) -> NDArray[np.float32] | None:
        probe = side.probe
        if probe is None:
            return None
        return _call(
            side.name, f"hidden states of {prompt.id!r}", lambda: probe.hidden_states(sequence)
        )

    tags = dict.fromkeys(prompt.tags, "true")
    return (
        PromptRecord(
            prompt_id=prompt.id,
            prompt_token_ids=np.asarray(base_prompt, np.int64),
            output_token_ids=np.asarray(base.token_ids, np.int64),
            top_logprobs=base.top,
            hidden_states=hidden(baseline),
            output_text=base.text,
            tags=tags,
        ),
        PromptRecord(
            prompt_id=prompt.id,
            prompt_token_ids=np.asarray(cand.prompt_token_ids, np.int64),
            output_token_ids=np.asarray(cand.token_ids, np.int64),
            top_logprobs=cand.top,
            teacher_forced=forced,
            hidden_states=hidden(candidate),
            output_text=cand.text,
            tags=tags,
        ),
    )


def drive_suite(
    prompts: Iterable[PromptSpec],
    measure: Callable[[PromptSpec], tuple[PromptRecord, PromptRecord]],
    feed: Callable[[PromptRecord, PromptRecord], None],
    *,
    concurrency: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Measure every prompt (at most `concurrency` at once), feed pairs in suite order.

    Returns the number of prompts fed. The first error stops the run: prompts not
    started are cancelled and the error is raised.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency: {concurrency} is not allowed; it must be at least 1")
    pending: deque[Future[tuple[PromptRecord, PromptRecord]]] = deque()
    queue = iter(prompts)
    done = 0
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="parity")
    try:
        for prompt in queue:
            pending.append(pool.submit(measure, prompt))
            if len(pending) >= concurrency:
                break
        while pending:
            baseline, candidate = pending.popleft().result()
            feed(baseline, candidate)
            done += 1
            if progress is not None:
                progress(done)
            following = next(queue, None)
            if following is not None:
                pending.append(pool.submit(measure, following))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return done
