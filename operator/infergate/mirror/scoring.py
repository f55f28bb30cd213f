"""Score one copied exchange on both sides, teacher-forced on the stable revision's answer.

The answer the client got is text; both sides score the same token path: the prompt
as the stable engine tokenizes it (the chat template applied for chat requests), then
the answer's text tokenized alone. Each side returns its own log-probability of every
answer token and its top-k there (vLLM `prompt_logprobs`, one request with
`max_tokens: 1`), so a sampled (non-greedy) answer is as good evidence as a greedy one:
what is compared is the two models' distributions along one path, not two samples.
A greedy request is also answered by the canary itself, and its answer (tokenized the
same way) is compared token by token.

Failures are sorted like the runner's: the stable side failing leaves the copy out
(`StableFailedError`); the canary failing is evidence against it (`CanaryFailedError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from infergate.engines.client import EngineClientError, parse_prompt_logprobs
from infergate.mirror.capture import Captured
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs


class StableFailedError(RuntimeError):
    """The stable side could not score the copy; it is left out."""


class CanaryFailedError(RuntimeError):
    """The canary could not answer or score the copy (an error or an unreadable answer)."""


@dataclass(frozen=True)
class ScoredPair:
    """A copy's records: the forced pair (every copy), and the greedy pair (greedy copies)."""

    baseline: PromptRecord
    forced: PromptRecord
    greedy: PromptRecord | None


class SideScorer:
    """One side's HTTP calls (tokenize, score, complete) over a shared async client."""

    def __init__(self, http: httpx.AsyncClient, url: str, model: str) -> None:
        self._http, self._url, self._model = http, url.rstrip("/"), model

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = await self._http.post(self._url + path, json={"model": self._model, **body})
        if response.status_code != 200:
            raise EngineClientError(
                f"POST {path}: HTTP {response.status_code}: {response.text[:300]}"
            )
        return response.json()

    async def prompt_ids(self, captured: Captured) -> list[int]:
        """The prompt as this engine tokenized it for the request."""
        if captured.route == "chat":
            body: dict[str, Any] = {"messages": captured.messages, "add_generation_prompt": True}
        elif isinstance(captured.prompt, list):
            return list(captured.prompt)
        else:
            body = {"prompt": captured.prompt}
        answer = await self._post("/tokenize", body)
        return [int(t) for t in answer["tokens"]]

    async def text_ids(self, text: str) -> list[int]:
        answer = await self._post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return [int(t) for t in answer["tokens"]]

    async def score(self, prompt: Sequence[int], forced: Sequence[int], k: int) -> TeacherForced:
        sequence = [*prompt, *forced]
        answer = await self._post(
            "/v1/completions",
            {"prompt": sequence, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k},
        )
        entries = answer["choices"][0]["prompt_logprobs"]
        return await asyncio.to_thread(parse_prompt_logprobs, entries, sequence, len(prompt), k)

    async def greedy_text(self, prompt: Sequence[int], captured: Captured, max_tokens: int) -> str:
        body: dict[str, Any] = {
            "prompt": list(prompt),
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        if captured.stop:
            body["stop"] = captured.stop
        # Where the stable's answer ended was decided by these too (ignore_eos, min_tokens):
        # without them the canary stops at its first EOS and every greedy copy "diverges".
        body |= captured.ending
        answer = await self._post("/v1/completions", body)
        return str(answer["choices"][0].get("text") or "")


async def _stable(call: Any) -> Any:
    try:
        return await call
    except (httpx.HTTPError, EngineClientError, KeyError, TypeError, ValueError) as err:
        raise StableFailedError(f"stable: {type(err).__name__}: {err}") from err


async def _canary(call: Any) -> Any:
    try:
        return await call
    except (httpx.HTTPError, EngineClientError, KeyError, TypeError, ValueError) as err:
        raise CanaryFailedError(f"canary: {type(err).__name__}: {err}") from err


def _first_steps(forced: TeacherForced, steps: int) -> TeacherForced:
    """`forced` cut to its first `steps` steps (the record's own length). Full-vocabulary
    rows, kept for the last positions only, are dropped from a cut copy."""
    if steps >= forced.top.steps:
        return forced
    top = forced.top
    return TeacherForced(
        token_ids=forced.token_ids[:steps],
        target_logprobs=forced.target_logprobs[:steps],
        top=TopLogprobs(top.token_ids[:steps], top.logprobs[:steps]),
        start=forced.start,
    )


def _record(
    prompt_id: str,
    prompt: Sequence[int],
    output: Sequence[int],
    forced: TeacherForced,
    *,
    teacher_forced: bool,
    tags: Mapping[str, str],
) -> PromptRecord:
    return PromptRecord(
        prompt_id=prompt_id,
        prompt_token_ids=np.asarray(prompt, np.int64),
        output_token_ids=np.asarray(output, np.int64),
        top_logprobs=forced.top,
        teacher_forced=forced if teacher_forced else None,
        tags=dict(tags),
    )


async def score_copy(
    prompt_id: str,
    captured: Captured,
    stable: SideScorer,
    canary: SideScorer,
    *,
    top_logprobs: int,
) -> ScoredPair | None:
    """Both sides' records of one copy; None when the answer tokenizes to nothing."""
    prompt = await _stable(stable.prompt_ids(captured))
    canary_prompt = await _canary(canary.prompt_ids(captured))
    output = await _stable(stable.text_ids(captured.output_text))
    if not output:
        return None
    on_stable = await _stable(stable.score(prompt, output, top_logprobs))
    on_canary = await _canary(canary.score(prompt, output, top_logprobs))
    tags = {"route": captured.route, "greedy": str(captured.greedy).lower()}
    baseline = _record(prompt_id, prompt, output, on_stable, teacher_forced=False, tags=tags)
    # The canary forced along the stable's path: its "output" is that path, by construction.
    forced = _record(prompt_id, canary_prompt, output, on_canary, teacher_forced=True, tags=tags)
    greedy = None
    if captured.greedy:
        limit = captured.max_tokens or len(output)
        text = await _canary(canary.greedy_text(prompt, captured, limit))
        own = await _stable(stable.text_ids(text)) if text else []
        # Its top-k is the canary's along the stable's path: the same context up to and
        # including the first divergence, which is all the legitimacy test reads. That path
        # has the stable's length; the canary's own answer may end sooner (a different EOS:
        # the shorter answer shows as a divergence where it ends) or, re-tokenized, run
        # longer (compared over the stable's length, where the top-k exists).
        steps = min(len(own), on_canary.top.steps)
        greedy = _record(
            prompt_id,
            canary_prompt,
            own[:steps],
            _first_steps(on_canary, steps),
            teacher_forced=True,
            tags=tags,
        )
    return ScoredPair(baseline, forced, greedy)
