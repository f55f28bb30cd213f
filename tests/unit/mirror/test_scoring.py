"""A copy's records, scored on both sides: the greedy copy is asked what the client asked.

The engine here is a word-level one behind httpx.MockTransport: `/tokenize` maps words to
ids, prompt logprobs score any sequence, and a greedy completion stops at its EOS after
two words unless `ignore_eos` or `min_tokens` say otherwise (as vLLM's do).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from infergate.mirror.capture import Captured, capture
from infergate.mirror.scoring import ScoredPair, SideScorer, score_copy

WORDS = [f"w{i}" for i in range(64)]
EARLY_EOS_WORDS = 2


def _ids(text: str) -> list[int]:
    return [WORDS.index(word) for word in text.split()]


class _Engine:
    def __init__(self) -> None:
        self.greedy_bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": _ids(body["prompt"])})
        if "prompt_logprobs" in body:
            sequence = body["prompt"]
            entries: list[Any] = [None]
            for token in sequence[1:]:
                entries.append(
                    {str(token): {"logprob": -0.1, "rank": 1}, "63": {"logprob": -3.0, "rank": 2}}
                )
            return httpx.Response(200, json={"choices": [{"prompt_logprobs": entries}]})
        self.greedy_bodies.append(body)
        wanted = body["max_tokens"]
        if not body.get("ignore_eos"):
            wanted = min(wanted, max(EARLY_EOS_WORDS, int(body.get("min_tokens") or 0)))
        return httpx.Response(200, json={"choices": [{"text": " ".join(WORDS[:wanted])}]})


def _captured(request: dict[str, Any], answer_words: int) -> Captured:
    answer = {"choices": [{"text": " ".join(WORDS[:answer_words]), "finish_reason": "length"}]}
    got = capture(
        "/v1/completions",
        json.dumps(request).encode(),
        200,
        "application/json",
        json.dumps(answer).encode(),
    )
    assert got is not None
    return got


def _score(captured: Captured, engine: _Engine) -> ScoredPair | None:
    async def run() -> ScoredPair | None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine)) as http:
            stable = SideScorer(http, "http://stable", "m")
            canary = SideScorer(http, "http://canary", "m")
            return await score_copy("m000001", captured, stable, canary, top_logprobs=2)

    return asyncio.run(run())


REQUEST = {"model": "m", "prompt": "w1 w2 w3", "max_tokens": 16, "temperature": 0}


@pytest.mark.parametrize("ending", [{"ignore_eos": True}, {"min_tokens": 16}])
def test_the_canary_greedy_answer_ends_where_the_client_asked(ending: dict[str, Any]) -> None:
    """A client that forced 16 tokens past EOS got 16; the canary is asked the same, so an
    identical canary agrees token for token instead of stopping at its EOS."""
    engine = _Engine()
    pair = _score(_captured({**REQUEST, **ending}, 16), engine)
    assert pair is not None
    assert pair.greedy is not None
    [body] = engine.greedy_bodies
    assert {k: body[k] for k in ending} == ending
    assert pair.greedy.output_token_ids.tolist() == pair.baseline.output_token_ids.tolist()


def test_a_canary_answer_ending_sooner_is_a_shorter_greedy_record() -> None:
    """The client did not ask past EOS, but the stable answered 16 words and the canary
    stops after two: the greedy record holds the canary's two tokens (a divergence where
    it ends), with its top-k cut to them, instead of failing the copy."""
    engine = _Engine()
    pair = _score(_captured(REQUEST, 16), engine)
    assert pair is not None
    assert pair.greedy is not None
    assert pair.greedy.output_token_ids.tolist() == _ids("w0 w1")
    assert pair.greedy.top_logprobs.steps == EARLY_EOS_WORDS
    assert pair.baseline.output_token_ids.size == 16
    assert pair.forced.top_logprobs.steps == 16


@pytest.mark.parametrize(
    "bad",
    [{"ignore_eos": "yes"}, {"min_tokens": -1}, {"min_tokens": True}, {"stop_token_ids": ["x"]}],
)
def test_a_malformed_ending_is_not_copied(bad: dict[str, Any]) -> None:
    answer = {"choices": [{"text": "w0", "finish_reason": "length"}]}
    got = capture(
        "/v1/completions",
        json.dumps({**REQUEST, **bad}).encode(),
        200,
        "application/json",
        json.dumps(answer).encode(),
    )
    assert got is None
