"""What a copy keeps of one finished exchange (pure: bytes in, a `Captured` or None out).

Two OpenAI-compatible routes are understood, answered whole or streamed (server-sent
events): `/v1/completions` with one prompt (text or token ids) and
`/v1/chat/completions`. Anything else (several prompts or choices, `echo`, an error
answer, a body that is not JSON) is forwarded as usual and never copied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Route = Literal["completions", "chat"]
ROUTES: Mapping[str, Route] = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}


@dataclass(frozen=True)
class Captured:
    """One exchange, as scoring needs it."""

    route: Route
    prompt: str | list[int] | None
    """The completion prompt (text or token ids); None for chat."""
    messages: list[dict[str, Any]] | None
    """The chat messages; None for completions."""
    output_text: str
    """The stable revision's answer, as the client received it."""
    greedy: bool
    """temperature 0 (or top_k 1): the canary's own greedy answer must match too."""
    max_tokens: int | None
    stop: list[str]
    finish_reason: str | None
    ending: dict[str, Any] = field(default_factory=dict)
    """What else decided where the stable's answer ended (vLLM's `ignore_eos`,
    `min_tokens`, `stop_token_ids`), as asked: the canary's greedy answer gets the same."""


def route_of(path: str) -> Route | None:
    """The route a request path is, when it is one a copy can be made of."""
    return ROUTES.get(path.rstrip("/"))


def _greedy(request: Mapping[str, Any]) -> bool:
    temperature = request.get("temperature")
    top_k = request.get("top_k")
    return (isinstance(temperature, int | float) and float(temperature) == 0.0) or top_k == 1


def _stop(request: Mapping[str, Any]) -> list[str] | None:
    stop = request.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    return None


def _prompt(request: Mapping[str, Any]) -> str | list[int] | None:
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt({"prompt": prompt[0]})
    return None


def _answer_text(route: Route, choice: Mapping[str, Any], *, streamed: bool) -> str:
    if route == "completions":
        return str(choice.get("text") or "")
    part = choice.get("delta" if streamed else "message") or {}
    return str(part.get("content") or "")


def _events(body: bytes) -> list[Mapping[str, Any]] | None:
    """The JSON payloads of a server-sent event stream, up to `[DONE]`."""
    events: list[Mapping[str, Any]] = []
    for line in body.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return events
        try:
            event = json.loads(data)
        except ValueError:
            return None
        if not isinstance(event, Mapping):
            return None
        events.append(event)
    return events  # a stream cut short is still what the client got


def _single_choice(choices: Sequence[Any]) -> bool:
    return all(isinstance(c, Mapping) and int(c.get("index") or 0) == 0 for c in choices)


@dataclass(frozen=True)
class _Asked:
    prompt: str | list[int] | None
    messages: list[dict[str, Any]] | None
    greedy: bool
    max_tokens: int | None
    stop: list[str]
    ending: dict[str, Any]


def _asked(route: Route, request_body: bytes) -> _Asked | None:
    """What the client asked, when it is one prompt answered once."""
    try:
        request = json.loads(request_body)
    except ValueError:
        return None
    if not isinstance(request, Mapping):
        return None
    if int(request.get("n") or 1) != 1 or request.get("echo") or request.get("best_of"):
        return None
    prompt = _prompt(request) if route == "completions" else None
    messages = request.get("messages") if route == "chat" else None
    stop = _stop(request)
    ending = _ending(request)
    usable = (
        prompt is not None if route == "completions" else isinstance(messages, list) and messages
    )
    if not usable or stop is None or ending is None:
        return None
    max_tokens = request.get("max_tokens", request.get("max_completion_tokens"))
    return _Asked(
        prompt=prompt,
        messages=[dict(m) for m in messages] if isinstance(messages, list) else None,
        greedy=_greedy(request),
        max_tokens=int(max_tokens) if isinstance(max_tokens, int) else None,
        stop=stop,
        ending=ending,
    )


def _ending(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's other end-of-answer settings, checked; None when one is malformed
    (the copy is then unusable: the canary must not be asked what the stable was not)."""
    ending: dict[str, Any] = {}
    ignore_eos = request.get("ignore_eos")
    if ignore_eos is not None:
        if not isinstance(ignore_eos, bool):
            return None
        ending["ignore_eos"] = ignore_eos
    min_tokens = request.get("min_tokens")
    if min_tokens is not None:
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
            return None
        ending["min_tokens"] = min_tokens
    stop_ids = request.get("stop_token_ids")
    if stop_ids is not None:
        if not isinstance(stop_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in stop_ids
        ):
            return None
        ending["stop_token_ids"] = list(stop_ids)
    return ending


def _answered(route: Route, content_type: str, body: bytes) -> tuple[str, str | None] | None:
    """The answer's text and finish reason, whole or streamed."""
    text, finish = "", None
    if "text/event-stream" in content_type:
        events = _events(body)
        if events is None:
            return None
        for event in events:
            choices = event.get("choices") or []
            if not _single_choice(choices):
                return None
            for choice in choices:
                text += _answer_text(route, choice, streamed=True)
                finish = choice.get("finish_reason") or finish
        return text, finish
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    choices = answer.get("choices") if isinstance(answer, Mapping) else None
    if not isinstance(choices, list) or len(choices) != 1 or not _single_choice(choices):
        return None
    finish = choices[0].get("finish_reason")
    return _answer_text(route, choices[0], streamed=False), finish


def capture(
    path: str, request_body: bytes, status: int, content_type: str, response_body: bytes
) -> Captured | None:
    """The copy of a finished exchange, or None when it is not one a copy can be made of."""
    route = route_of(path)
    if route is None or status != 200:
        return None
    asked = _asked(route, request_body)
    answered = _answered(route, content_type, response_body) if asked is not None else None
    if asked is None or answered is None or not answered[0]:
        return None
    text, finish = answered
    return Captured(
        route=route,
        prompt=asked.prompt,
        messages=asked.messages,
        output_text=text,
        greedy=asked.greedy,
        max_tokens=asked.max_tokens,
        stop=asked.stop,
        finish_reason=str(finish) if finish is not None else None,
        ending=asked.ending,
    )
