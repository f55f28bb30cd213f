"""Drive one side with many requests at once, streamed, timing every token.

A run is a list of `LoadRequest`s served by `concurrency` workers in list order, so the
requests in flight at any moment are the next ones of the list: suite prompts placed
among background requests are batched with strangers. Every completion is streamed
(server-sent events) and timed: the first token's arrival gives the time to first
token, the gaps between later ones the inter-token latencies. A suite prompt's answer
keeps its token ids and top-k logprobs (and, when asked, the side's teacher-forced
scores of another answer, requested right after it, under the same load).

Failures are sorted as the suite drive sorts them (`infergate.runner.drive.classify`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import httpx

from infergate.engines.client import (
    Completion,
    EngineClientError,
    parse_completion_choice,
    parse_prompt_logprobs,
)
from infergate.parity.record import TeacherForced
from infergate.runner.drive import SideAnswerError, classify


@dataclass(frozen=True)
class LoadRequest:
    """One request of a run."""

    id: str
    prompt: tuple[int, ...]
    max_tokens: int
    top_logprobs: int = 0
    """0 for background requests (their answers are not compared)."""
    seed: int = 42
    score: tuple[int, ...] | None = None
    """Tokens to score teacher-forced after the completion (a suite prompt's baseline answer)."""


@dataclass
class LoadAnswer:
    """One streamed answer, timed."""

    id: str
    started: float
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)
    completion: Completion | None = None
    forced: TeacherForced | None = None
    output_tokens: int = 0

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    def inter_token(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in pairwise(times)]


@dataclass
class RunResult:
    """Every answer of a run and its wall time."""

    answers: list[LoadAnswer]
    seconds: float

    @property
    def output_tokens(self) -> int:
        return sum(a.output_tokens for a in self.answers)


def _merge_choice(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The streamed chunks of one choice as one non-streamed choice."""
    merged: dict[str, Any] = {"text": "", "token_ids": [], "finish_reason": None}
    tokens: list[str] = []
    tops: list[Any] = []
    has_ids = True
    for part in parts:
        merged["text"] += str(part.get("text") or "")
        if part.get("token_ids") is None:
            has_ids = False
        else:
            merged["token_ids"] += list(part["token_ids"])
        logprobs = part.get("logprobs") or {}
        tokens += list(logprobs.get("tokens") or [])
        tops += list(logprobs.get("top_logprobs") or [])
        merged["finish_reason"] = part.get("finish_reason") or merged["finish_reason"]
        if part.get("prompt_token_ids"):
            merged["prompt_token_ids"] = part["prompt_token_ids"]
    if not has_ids:
        merged.pop("token_ids")
    merged["logprobs"] = {"tokens": tokens, "top_logprobs": tops}
    return merged


async def _stream(
    http: httpx.AsyncClient, url: str, model: str, request: LoadRequest
) -> LoadAnswer:
    answer = LoadAnswer(request.id, time.monotonic())
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(request.prompt),
        "max_tokens": request.max_tokens,
        "temperature": 0.0,
        "seed": request.seed,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    if request.top_logprobs:
        body["logprobs"] = request.top_logprobs
    parts: list[dict[str, Any]] = []
    async with http.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            raise EngineClientError(
                f"POST /v1/completions: HTTP {response.status_code}: {text[:300]}"
            )
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            now = time.monotonic()
            for choice in event.get("choices") or []:
                produced = len(choice.get("token_ids") or []) or (1 if choice.get("text") else 0)
                if produced and answer.first_token is None:
                    answer.first_token = now
                answer.token_times += [now] * produced
                answer.output_tokens += produced
                parts.append(choice)
    if request.top_logprobs:
        answer.completion = parse_completion_choice(
            _merge_choice(parts), request.prompt, request.top_logprobs
        )
    return answer


async def _score(
    http: httpx.AsyncClient, url: str, model: str, request: LoadRequest
) -> TeacherForced:
    assert request.score is not None  # noqa: S101 - only called for requests that score
    sequence = [*request.prompt, *request.score]
    body = {
        "model": model,
        "prompt": sequence,
        "max_tokens": 1,
        "temperature": 0.0,
        "seed": request.seed,
        "prompt_logprobs": request.top_logprobs,
    }
    response = await http.post(f"{url}/v1/completions", json=body)
    if response.status_code != 200:
        raise EngineClientError(
            f"POST /v1/completions: HTTP {response.status_code}: {response.text[:300]}"
        )
    entries = response.json()["choices"][0]["prompt_logprobs"]
    return parse_prompt_logprobs(entries, sequence, len(request.prompt), request.top_logprobs)


async def drive(
    side: str,
    url: str,
    model: str,
    requests: Sequence[LoadRequest],
    concurrency: int,
    *,
    timeout: float = 600.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> RunResult:
    """Serve `requests` with `concurrency` workers taking them in order; every answer timed.
    (`transport`: tests serve an engine in process.)"""
    queue = list(enumerate(requests))
    answers: list[LoadAnswer | None] = [None] * len(requests)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport) as http:

        async def worker() -> None:
            while queue:
                index, request = queue.pop(0)
                try:
                    answer = await _stream(http, url, model, request)
                    if request.score is not None:
                        answer.forced = await _score(http, url, model, request)
                except Exception as err:
                    raised = classify(f"{side} {request.id}", err)
                    if raised is err:
                        raise
                    raise raised from err
                answers[index] = answer

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))
    seconds = time.monotonic() - started
    done = [a for a in answers if a is not None]
    if len(done) != len(requests):
        raise SideAnswerError(f"{side}: {len(requests) - len(done)} requests got no answer")
    return RunResult(done, seconds)


async def drive_both(
    sides: Sequence[tuple[str, str, str]],
    requests: Sequence[LoadRequest],
    concurrency: int,
    *,
    first: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[RunResult]:
    """The same requests to every side at the same moment: (name, url, model) each; results
    in the order of `sides`. The side at index `first` is started first: the side started
    first gets its requests to the engines and the CPU ahead of the other (measured: an
    equal candidate on the same pod, started second, 13-19% worse TTFT P99 in each of three
    repeats, experiments/TRAFFIC.md), so callers alternate it over repeats."""
    order = [*range(first, len(sides)), *range(first)]
    runs = await asyncio.gather(
        *(
            drive(sides[i][0], sides[i][1], sides[i][2], requests, concurrency, transport=transport)
            for i in order
        )
    )
    by_side = dict(zip(order, runs, strict=True))
    return [by_side[i] for i in range(len(sides))]


def preemptions(metrics_text: str) -> int | None:
    """vLLM's own preemption counter (`vllm:num_preemptions_total`, summed), if it reports one."""
    total, found = 0.0, False
    for line in metrics_text.splitlines():
        if line.startswith("vllm:num_preemptions_total"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                found = True
            except (IndexError, ValueError):
                continue
    return int(total) if found else None


def read_preemptions(url: str) -> int | None:
    """The side's preemption counter now (None when it serves no such metric)."""
    try:
        response = httpx.get(f"{url}/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return preemptions(response.text)
