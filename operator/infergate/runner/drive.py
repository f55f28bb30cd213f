"""Drive both sides through a suite, prompt by prompt, with bounded concurrency.

For each prompt: both sides get it the way production requests come (text tokenized by
each engine with its own special tokens, a chat rendered by its served template, token
ids as they are; `ignoreEos` and `maxTokens` per prompt), and the prompt ids each used
are recorded, so tokenizer or template drift shows as differing prompt ids; both
generate greedily with top-k logprobs; both are scored along the baseline's sequence
from position 1 (teacher forcing: the baseline on its own tokens, the candidate on the
baseline's), so every position, a long prompt's own text included, is compared; and
both probes return the last-layer hidden states of the baseline's sequence, so the
states line up position by position even after the outputs fork.

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
    score_from,
)
from infergate.engines.record import generate, record_prompt
from infergate.parity.record import PromptRecord, TeacherForced
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
    full_vocab: bool = False
    """Also ask for full-vocabulary distributions of the generated positions (our adapters)."""


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
    """Both sides' records of one prompt, both scored along the baseline's sequence."""
    max_tokens = prompt.output_tokens(settings.max_tokens)

    def complete(side: Channels) -> Completion:
        return _call(
            side.name,
            f"completion of {prompt.id!r}",
            lambda: generate(
                side.serving, prompt, max_tokens=max_tokens,
                top_logprobs=settings.top_logprobs, seed=settings.seed,
            ),
        )  # fmt: skip

    base = complete(baseline)
    cand = complete(candidate)
    base_prompt = list(base.prompt_token_ids)
    reference = base_prompt + list(base.token_ids)
    full = len(base.token_ids) if settings.full_vocab else 0

    def scores(side: Channels, what: str) -> TeacherForced:
        return _call(
            side.name,
            f"{what} of {prompt.id!r}",
            lambda: score_from(
                side.serving, reference, 1, top_logprobs=settings.top_logprobs,
                seed=settings.seed, full_vocab=full,
            ),
        )  # fmt: skip

    own = scores(baseline, "scoring")
    forced = scores(candidate, "teacher-forced scoring")
    sequence = reference[: settings.max_hidden_positions]

    def hidden(side: Channels) -> NDArray[np.float32] | None:
        probe = side.probe
        if probe is None:
            return None
        return _call(
            side.name, f"hidden states of {prompt.id!r}", lambda: probe.hidden_states(sequence)
        )

    return (
        record_prompt(prompt, base, own, hidden(baseline)),
        record_prompt(prompt, cand, forced, hidden(candidate)),
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
