"""The proxy as a client sees it: answers untouched, whatever the shadow session does.

The stable engine here is a small ASGI app served in process (no sockets): it answers
completions whole or streamed. A session with a scorer of our own shows which copies
were admitted, and that a scorer failing or stuck never reaches the client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infergate.mirror.app import Mirror, proxy_app
from infergate.mirror.capture import Captured
from infergate.mirror.scoring import ScoredPair
from infergate.mirror.session import Session, SessionRequest
from tests.unit.parity.builders import meta

ANSWER = {"id": "x", "choices": [{"index": 0, "text": " is sunny", "finish_reason": "length"}]}


async def _completions(request: Request) -> Response:
    body = await request.json()
    if body.get("stream"):

        async def events() -> Any:
            for word in (" is", " sunny"):
                chunk = {"choices": [{"index": 0, "text": word}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
    return JSONResponse(ANSWER, headers={"x-engine": "stable"})


ENGINE = Starlette(routes=[Route("/v1/completions", _completions, methods=["POST"])])


class _Upstream:
    urls = ("http://stable",)
    problem = None

    def pick(self) -> str:
        return "http://stable"


def _mirror() -> Mirror:
    return Mirror(
        "qwen",
        reads=None,  # type: ignore[arg-type] - no session is opened through the control API here
        upstream=_Upstream(),  # type: ignore[arg-type]
        proxy_http=httpx.AsyncClient(transport=httpx.ASGITransport(app=ENGINE)),
    )


def _session(
    scorer: Callable[[str, Captured], Awaitable[ScoredPair | None]], *, max_queue: int = 8
) -> Session:
    request = SessionRequest(
        id="llm/qwen-check",
        candidate_revision="0123456789",
        model="fixture",
        sample_rate=1.0,
        max_requests_per_second=1000.0,
        max_queue=max_queue,
        window_seconds=600,
        baseline=meta(),
        candidate=meta(),
    )
    return Session(request, scorer)


async def _client(mirror: Mirror) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxy_app(mirror)), base_url="http://mirror"
    )


BODY = {"model": "fixture", "prompt": "The weather", "max_tokens": 2, "temperature": 0}


async def _direct(body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=ENGINE), base_url="http://stable"
    ) as http:
        return await http.post("/v1/completions", json=body)


@pytest.mark.parametrize("stream", [False, True])
def test_answers_pass_through_untouched(stream: bool) -> None:
    async def run() -> None:
        mirror = _mirror()
        body = {**BODY, "stream": stream}
        async with await _client(mirror) as client:
            through = await client.post("/v1/completions", json=body)
        direct = await _direct(body)
        assert through.status_code == direct.status_code == 200
        assert through.content == direct.content
        assert through.headers["content-type"] == direct.headers["content-type"]
        await mirror.close()

    asyncio.run(run())


def test_a_session_copies_finished_exchanges_and_scores_them_off_the_client_path() -> None:
    seen: list[Captured] = []

    async def scorer(prompt_id: str, captured: Captured) -> ScoredPair | None:
        seen.append(captured)
        return None

    async def run() -> None:
        mirror = _mirror()
        session = _session(scorer)
        session.start()
        mirror.sessions[session.request.id] = session
        async with await _client(mirror) as client:
            for stream in (False, True):
                answer = await client.post("/v1/completions", json={**BODY, "stream": stream})
                assert answer.status_code == 200
            await client.post("/v1/embeddings", json={"input": "x"})  # not a scored route
        for _ in range(50):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        assert [c.output_text for c in seen] == [" is sunny", " is sunny"]
        assert session.mirrored == 2
        await mirror.close()

    asyncio.run(run())


def test_a_stuck_or_failing_scorer_never_delays_or_fails_a_client() -> None:
    release = asyncio.Event()

    async def stuck(prompt_id: str, captured: Captured) -> ScoredPair | None:
        await release.wait()
        raise RuntimeError("the canary is gone")

    async def run() -> None:
        mirror = _mirror()
        session = _session(stuck, max_queue=1)
        session.start()
        mirror.sessions[session.request.id] = session
        async with await _client(mirror) as client:
            answers = [await client.post("/v1/completions", json=BODY) for _ in range(6)]
        assert [a.json() for a in answers] == [ANSWER] * 6
        counts = session.counts()
        # One copy is being scored, one waits; every other one was refused, not queued.
        assert counts["sampled"] == 2
        assert counts["refused"] == {"queueFull": 4}
        release.set()
        await asyncio.sleep(0.05)
        assert session.counts()["stableFailures"] >= 1
        await mirror.close()

    asyncio.run(run())


def test_without_a_session_nothing_is_kept() -> None:
    async def run() -> None:
        mirror = _mirror()
        async with await _client(mirror) as client:
            answer = await client.post("/v1/completions", json=BODY)
        assert answer.json() == ANSWER
        assert mirror.active() is None
        await mirror.close()

    asyncio.run(run())


def test_no_stable_endpoint_is_a_503_naming_why() -> None:
    class _Nowhere:
        urls = ()
        problem = "Service qwen has no ready endpoint"

        def pick(self) -> None:
            return None

    async def run() -> None:
        mirror = _mirror()
        mirror.upstream = _Nowhere()  # type: ignore[assignment]
        async with await _client(mirror) as client:
            answer = await client.post("/v1/completions", json=BODY)
        assert answer.status_code == 503
        assert "no ready endpoint" in answer.text
        await mirror.close()

    asyncio.run(run())
