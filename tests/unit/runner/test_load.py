"""The load check through the runner's own drive, against engines served in process.

A simulated engine that picks another token once more than two requests are in flight,
as a kernel chosen by batch size would, keeps these tests fast; the stable engine never
does. The same catch on a real vLLM engine (a logits processor that flips near-ties in
batches of two or more, tests/faults/batch_drift.py) is tests/e2e/test_load_check.py. Both speak the OpenAI completions API as vLLM
does (streamed, token ids, top-k logprobs, prompt_logprobs for teacher forcing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infergate.api.enums import CheckPhase
from infergate.api.parity_check import ParityCheckSpec
from infergate.parity.profiles import plan_gate
from infergate.parity.record import PromptRecord, RecordMeta, TopLogprobs
from infergate.parity.thresholds import ProfileName
from infergate.runner.load import level_requests, run_load
from infergate.runner.load_drive import drive_both
from infergate.runner.sides import SideTarget
from tests.unit.parity.builders import meta

VOCAB = 200
TOP = (-0.05, -3.0, -3.5, -4.0, -4.5)
# The strict profile's own evidence floor: 32 prompts, and TOKENS answers each give over
# its 1,024 scored positions.
PROMPTS = [[(11 + 37 * i + 13 * j) % VOCAB for j in range(3 + i % 6)] for i in range(32)]
TOKENS = 32


def _next(sequence: list[int], sensitive_now: bool) -> list[tuple[int, float]]:
    best = (sum(sequence) * 7 + len(sequence)) % VOCAB
    ranked = [((best + j) % VOCAB, TOP[j]) for j in range(len(TOP))]
    if sensitive_now:
        # Another kernel at this batch size: the runner-up wins.
        ranked[0], ranked[1] = (ranked[1][0], TOP[0]), (ranked[0][0], TOP[1])
    return ranked


class Engine:
    """A deterministic engine; `sensitive` ones change their answers above two in flight."""

    def __init__(self) -> None:
        self.in_flight = 0

    def app(self, sensitive: bool) -> Starlette:
        async def completions(request: Request) -> Response:
            body = await request.json()
            self.in_flight += 1
            try:
                return await self._answer(body, sensitive)
            finally:
                if not body.get("stream"):
                    self.in_flight -= 1

        return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])

    async def _answer(self, body: dict[str, Any], sensitive: bool) -> Response:
        prompt = list(body["prompt"])
        k = int(body.get("logprobs") or 0)
        if body.get("prompt_logprobs"):
            entries: list[dict[str, Any] | None] = [None]
            for i in range(1, len(prompt)):
                ranked = _next(prompt[:i], sensitive and self.in_flight > 2)
                entry = {str(t): {"logprob": lp, "rank": r + 1} for r, (t, lp) in enumerate(ranked)}
                entry.setdefault(str(prompt[i]), {"logprob": -9.0, "rank": 99})
                entries.append(entry)
            return JSONResponse({"choices": [{"prompt_logprobs": entries, "text": ""}]})

        async def stream() -> AsyncIterator[bytes]:
            sequence = list(prompt)
            try:
                for _ in range(int(body["max_tokens"])):
                    await asyncio.sleep(0.002)
                    ranked = _next(sequence, sensitive and self.in_flight > 2)
                    token = ranked[0][0]
                    sequence.append(token)
                    choice: dict[str, Any] = {"index": 0, "text": "x", "token_ids": [token]}
                    if k:
                        choice["logprobs"] = {
                            "tokens": [f"token_id:{token}"],
                            "top_logprobs": [{f"token_id:{t}": lp for t, lp in ranked[:k]}],
                        }
                    yield f"data: {json.dumps({'choices': [choice]})}\n\n".encode()
                yield b"data: [DONE]\n\n"
            finally:
                self.in_flight -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")


def _router(stable: Engine, candidate: Engine, *, sensitive: bool) -> Starlette:
    apps = {"stable": stable.app(False), "candidate": candidate.app(sensitive)}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        host = dict(scope["headers"]).get(b"host", b"").decode().split(":")[0]
        await apps[host](scope, receive, send)

    return app  # type: ignore[return-value]


def _baseline(tokens: int = TOKENS) -> list[PromptRecord]:
    """The stable engine's answers at concurrency 1."""
    records = []
    for index, prompt in enumerate(PROMPTS):
        sequence, steps, out = list(prompt), [], []
        for _ in range(tokens):
            ranked = _next(sequence, False)
            out.append(ranked[0][0])
            steps.append(ranked)
            sequence.append(ranked[0][0])
        records.append(
            PromptRecord(
                prompt_id=f"p{index}",
                prompt_token_ids=np.asarray(prompt, np.int64),
                output_token_ids=np.asarray(out, np.int64),
                top_logprobs=TopLogprobs.from_pairs(steps, k=5),
            )
        )
    return records


def _side(name: str) -> SideTarget:
    return SideTarget(
        side="baseline" if name == "stable" else "candidate",
        url=f"http://{name}",
        model="fixture",
        engine="vllm",
        engine_version="0.32.0",
        dtype="bfloat16",
        description=name,
    )


def _spec(**extra: Any) -> ParityCheckSpec:
    return ParityCheckSpec.model_validate(
        {
            "baseline": {"endpoint": {"url": "http://stable", "model": "fixture"}},
            "candidate": {"endpoint": {"url": "http://candidate", "model": "fixture"}},
            "suite": {"inline": [{"id": "p0", "text": "x"}]},
            "sampling": {"maxTokens": TOKENS, "topLogprobs": 5},
            "hiddenStates": {"enabled": False},
            # Deterministic engines answer bit-identically: judged as a replay.
            "profile": "strict",
            **extra,
        }
    )


def _run(spec: ParityCheckSpec, *, sensitive: bool) -> Any:
    transport = httpx.ASGITransport(app=_router(Engine(), Engine(), sensitive=sensitive))
    metas: tuple[RecordMeta, RecordMeta] = (meta(suite="load"), meta(suite="load"))
    return run_load(
        spec,
        _side("stable"),
        _side("candidate"),
        kept=_baseline(),
        metas=metas,
        gate=plan_gate(
            *metas,
            profile=ProfileName.STRICT,
            explicit=spec.effective_thresholds(),
            hidden_states=False,
        ),
        say=lambda _: None,
        transport=transport,
        preemption_counter=lambda _: None,
    )


LOAD = {"concurrency": [1, 8], "backgroundRequests": 24, "backgroundMaxTokens": 8}


def test_a_candidate_that_changes_only_under_concurrency_is_caught_at_that_level() -> None:
    outcome = _run(_spec(load=LOAD), sensitive=True)
    levels = {level["concurrency"]: level for level in outcome.status["load"]}
    assert levels[1]["phase"] == CheckPhase.PASSED.value
    assert levels[1]["tokenMatchRate"] == 1.0
    assert levels[8]["phase"] == CheckPhase.FAILED.value
    assert levels[8]["tokenMatchRate"] < 1.0
    phases = {label: j.phase for label, j in outcome.judgements}
    assert phases == {"load c=1": CheckPhase.PASSED, "load c=8": CheckPhase.FAILED}


def test_each_level_reports_the_candidate_serving_figures() -> None:
    outcome = _run(_spec(load=LOAD), sensitive=False)
    reported = {level["concurrency"]: level["candidate"] for level in outcome.document["load"]}
    assert sorted(reported) == [1, 8]
    for figures in reported.values():
        assert figures["outputTokensPerSecond"] > 0
        assert figures["ttftP50Seconds"] <= figures["ttftP99Seconds"]
        assert figures["itlP50Seconds"] <= figures["itlP99Seconds"]


def test_an_invariant_candidate_passes_every_level() -> None:
    outcome = _run(_spec(load=LOAD), sensitive=False)
    assert {j.phase for _, j in outcome.judgements} == {CheckPhase.PASSED}
    assert outcome.metrics["loadC8TokenMatchRate"] == 1.0


def test_performance_runs_pair_both_sides_and_judge_on_bounds() -> None:
    performance = {"maxThroughputDrop": 0.5, "repeats": 2, "requests": 8}
    outcome = _run(_spec(performance=performance), sensitive=False)
    status = outcome.status["performance"]
    assert status["repeats"] == 2
    assert status["baseline"]["outputTokensPerSecond"] > 0
    assert status["candidate"]["ttftP99Seconds"] is not None
    assert [label for label, _ in outcome.judgements] == ["performance"]


@pytest.mark.parametrize("background", [0, 48, 200])
def test_suite_prompts_are_spread_among_the_background(background: int) -> None:
    load = _spec(load={**LOAD, "backgroundRequests": background}).load
    assert load is not None
    requests = level_requests(_baseline(), load, 5, 42)
    suite = [i for i, r in enumerate(requests) if r.score is not None]
    assert len(requests) == background + len(PROMPTS)
    assert len(suite) == len(PROMPTS)
    if background:
        # Neither bunched at the start nor at the end: strangers before and after.
        assert suite[0] > 0
        assert suite[-1] < len(requests) - 1


@pytest.mark.parametrize(("first", "starter"), [(0, "stable"), (1, "candidate")])
def test_paired_runs_start_the_chosen_side_first(first: int, starter: str) -> None:
    arrivals: list[str] = []
    router = _router(Engine(), Engine(), sensitive=False)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        arrivals.append(dict(scope["headers"]).get(b"host", b"").decode())
        await router(scope, receive, send)

    requests = level_requests(_baseline(), _spec(load=LOAD).load, 5, 42)[:4]  # type: ignore[arg-type]
    sides = [("baseline", "http://stable", "fixture"), ("candidate", "http://candidate", "fixture")]
    runs = asyncio.run(
        drive_both(sides, requests, 1, first=first, transport=httpx.ASGITransport(app=app))
    )
    assert arrivals[0] == starter
    assert [len(run.answers) for run in runs] == [4, 4]
