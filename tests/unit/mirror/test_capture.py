"""What a copy keeps of an exchange: one prompt answered once, whole or streamed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infergate.mirror.capture import capture
from infergate.mirror.sampling import Refusal, Sampler, TokenBucket


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _sse(*events: Any) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


COMPLETION = {"model": "m", "prompt": "The weather", "max_tokens": 8, "temperature": 0}
ANSWER = {"choices": [{"index": 0, "text": " is fine", "finish_reason": "length"}]}


def test_a_greedy_completion_is_kept_with_its_answer() -> None:
    got = capture("/v1/completions", _json(COMPLETION), 200, "application/json", _json(ANSWER))
    assert got is not None
    assert (got.route, got.prompt, got.output_text, got.greedy) == (
        "completions", "The weather", " is fine", True,
    )  # fmt: skip
    assert got.max_tokens == 8
    assert got.finish_reason == "length"


def test_a_streamed_chat_answer_is_joined() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    body = _sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
    )
    got = capture("/v1/chat/completions", _json(request), 200, "text/event-stream", body)
    assert got is not None
    assert got.route == "chat"
    assert got.messages == [{"role": "user", "content": "hi"}]
    assert got.output_text == "Hello"
    assert got.greedy is False  # sampled: scored teacher-forced only


def test_token_id_prompts_are_kept_as_ids() -> None:
    request = {"model": "m", "prompt": [11, 42, 7], "top_k": 1}
    got = capture("/v1/completions", _json(request), 200, "application/json", _json(ANSWER))
    assert got is not None
    assert got.prompt == [11, 42, 7]
    assert got.greedy is True


@pytest.mark.parametrize(
    ("path", "request_", "status", "answer"),
    [
        ("/v1/embeddings", COMPLETION, 200, ANSWER),  # not a route scored
        ("/v1/completions", COMPLETION, 500, ANSWER),  # an error answer
        ("/v1/completions", {**COMPLETION, "n": 2}, 200, ANSWER),  # several choices
        ("/v1/completions", {**COMPLETION, "echo": True}, 200, ANSWER),  # prompt in the text
        ("/v1/completions", {**COMPLETION, "prompt": ["a", "b"]}, 200, ANSWER),  # two prompts
        ("/v1/completions", COMPLETION, 200, {"choices": [{"index": 0, "text": ""}]}),
        ("/v1/chat/completions", {"model": "m"}, 200, ANSWER),  # no messages
    ],
)
def test_what_cannot_be_scored_is_not_copied(
    path: str, request_: dict[str, Any], status: int, answer: dict[str, Any]
) -> None:
    assert capture(path, _json(request_), status, "application/json", _json(answer)) is None


def test_a_body_that_is_not_json_is_not_copied() -> None:
    assert capture("/v1/completions", b"{", 200, "application/json", _json(ANSWER)) is None
    assert capture("/v1/completions", _json(COMPLETION), 200, "application/json", b"<") is None


def test_the_token_bucket_bounds_the_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=2.0)
    taken = [bucket.take(0.0) for _ in range(5)]
    assert taken == [True, True, False, False, False]
    assert bucket.take(0.5)  # one more token after half a second at 2/s
    assert not bucket.take(0.5)


def test_the_sampler_counts_why_it_refuses() -> None:
    sampler = Sampler.of(sample_rate=0.5, per_second=1.0, queue_max=2)
    assert sampler.admit(now=0.0, draw=0.7, queued=0) is Refusal.NOT_SAMPLED
    assert sampler.admit(now=0.0, draw=0.1, queued=2) is Refusal.QUEUE_FULL
    assert sampler.admit(now=0.0, draw=0.1, queued=0) is None
    assert sampler.admit(now=0.1, draw=0.1, queued=0) is Refusal.RATE_LIMITED
    assert sampler.admitted == 1
    assert sampler.refused == {
        Refusal.NOT_SAMPLED: 1, Refusal.QUEUE_FULL: 1, Refusal.RATE_LIMITED: 1,
    }  # fmt: skip
