"""A scored copy as a mirror pod keeps and hands it over: exact, bounded, no text."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.mirror.capture import Captured
from infergate.mirror.pairs import decode_pair, encode_pair, pair_bytes
from infergate.mirror.scoring import ScoredPair
from infergate.mirror.session import Copy, Session, SessionRequest
from infergate.parity.record import PromptRecord, TopLogprobs
from tests.unit.parity.builders import meta, prompt, replace, teacher_forced_on


def _pair(i: int = 0, greedy: bool = True) -> ScoredPair:
    base = prompt(f"m{i:06d}", seed=i, hidden=None, output_tokens=32)
    forced = teacher_forced_on(base)
    on_canary = replace(base, top_logprobs=forced.top, teacher_forced=forced)
    return ScoredPair(base, on_canary, on_canary if greedy else None)


def _same(a: PromptRecord, b: PromptRecord) -> bool:
    def arrays(r: PromptRecord) -> list[NDArray[Any]]:
        tf = r.teacher_forced
        out = [r.prompt_token_ids, r.output_token_ids, r.top_logprobs.token_ids]
        out.append(r.top_logprobs.logprobs)
        if tf is not None:
            out += [tf.token_ids, tf.target_logprobs, tf.top.token_ids, tf.top.logprobs]
        return out

    return (
        a.prompt_id == b.prompt_id
        and dict(a.tags) == dict(b.tags)
        and (a.teacher_forced is None) == (b.teacher_forced is None)
        and all(
            x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
            for x, y in zip(arrays(a), arrays(b), strict=True)
        )
    )


def test_a_pair_travels_exactly_nan_and_padding_included() -> None:
    """A canary's NaN and the -inf of a short top-k row are JSON-unsafe numbers; they must
    reach the runner's hygiene check as they were."""
    pair = _pair()
    top = pair.forced.top_logprobs
    scores = top.logprobs.copy()
    scores[2, 0], scores[5, 4] = math.nan, -math.inf
    forced_top = TopLogprobs(top.token_ids, scores)
    forced = replace(pair.forced, top_logprobs=forced_top)
    sent = ScoredPair(pair.baseline, forced, pair.greedy)
    document = json.loads(json.dumps(encode_pair(sent), allow_nan=False))
    got = decode_pair(document)
    assert _same(got.baseline, sent.baseline)
    assert _same(got.forced, sent.forced)
    assert got.greedy is not None
    assert sent.greedy is not None
    assert _same(got.greedy, sent.greedy)


def test_no_text_travels() -> None:
    pair = _pair()
    with_text = ScoredPair(replace(pair.baseline, output_text="a secret"), pair.forced, None)
    assert "secret" not in json.dumps(encode_pair(with_text))


def test_the_budget_counts_every_array_and_an_overhead() -> None:
    one, two = _pair(greedy=False), _pair(greedy=True)
    assert pair_bytes(two) > pair_bytes(one) > one.baseline.top_logprobs.logprobs.nbytes
    # What travels stays within the runner's read limit for what was counted.
    assert len(json.dumps(encode_pair(two))) < pair_bytes(two) * 3 // 2


def _session(max_pair_bytes: int) -> Session:
    async def never(prompt_id: str, captured: Captured) -> ScoredPair | None:
        raise AssertionError("not scored here")

    request = SessionRequest(
        id="llm/qwen-check", candidate_revision="0123456789", model="fixture",
        sample_rate=1.0, max_requests_per_second=1000.0, max_queue=8, window_seconds=600,
        baseline=meta(), candidate=meta(), max_pair_bytes=max_pair_bytes,
    )  # fmt: skip
    return Session(request, never)


def test_a_full_pair_budget_stops_the_session_collecting() -> None:
    """Pairs are kept up to the budget; the one past it and every later copy are refused
    as poolFull, and the result holds exactly the pairs the counts say were scored."""

    async def run() -> None:
        size = pair_bytes(_pair())
        session = _session(max(64 * 1024, size * 3 + size // 2))
        kept = session.request.max_pair_bytes // size
        for i in range(kept + 2):
            session._add(_pair(i))  # what the worker does with each scored copy
        session.offer(Copy("/v1/completions", b"{}", 200, "application/json", b"{}"))
        counts = session.counts()
        assert counts["scored"] == kept == len(session.result()["pairs"])
        assert counts["poolFull"] is True
        assert counts["refused"] == {"poolFull": 3}
        assert session.queue.qsize() == 0
        assert session.pair_bytes <= session.request.max_pair_bytes

    asyncio.run(run())
