"""The adapter server over a toy backend: what the parity runner relies on, without an engine.

Text prompts get the tokenizer's special tokens, chats go through the template, prompt
logprobs come a chunk of positions at a time (full-vocabulary rows on request, bounded),
non-finite numbers arrive as data (never a 500), fingerprints are served.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from starlette.testclient import TestClient

from infergate.accounting import ENGINE_SECONDS_HEADER
from infergate.engines.client import EngineClient, score_from
from infergate.runtime.backend import GreedyLoop, GreedyOutput, log_softmax
from infergate.runtime.server import AdapterServer

VOCAB = 8
BOS = 7


class ToyBackend:
    """Next token (last + 1) % VOCAB with logits rising towards it; BOS with special tokens."""

    engine = "transformers"
    engine_version = "toy 1"
    dtype = "bfloat16"
    max_model_len = 64
    eos_token_id = 0

    def __init__(self, *, broken: bool = False, chunk: int = 3) -> None:
        self.broken = broken
        self.chunk = chunk

    def effective_config(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "vocab_size": VOCAB}

    def fingerprints(self) -> dict[str, Any]:
        return {"engine.kind": self.engine, "tokenizer.add_bos_token": True}

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [1 + ord(c) % (VOCAB - 2) for c in text]
        return [BOS, *ids] if add_special_tokens else ids

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return " ".join(str(t) for t in token_ids)

    def token_text(self, token_id: int) -> str:
        return str(token_id)

    def _logits(self, last: int) -> NDArray[np.float32]:
        logits = np.arange(VOCAB, dtype=np.float32) * 0.1
        logits[(last + 1) % VOCAB] = 5.0
        if self.broken:
            logits[2] = np.nan
        return logits

    def generate_greedy(
        self, prompt: Sequence[int], max_tokens: int, top_k: int, *, ignore_eos: bool
    ) -> GreedyOutput:
        loop = GreedyLoop(max_tokens, top_k, self.eos_token_id)
        sequence = list(prompt)
        going = max_tokens > 0
        while going:
            logits = self._logits(sequence[-1])
            going = loop.push(log_softmax(logits[None, :])[0], ignore_eos=ignore_eos, logits=logits)
            sequence.append(loop.tokens[-1])
        return loop.result()

    def prompt_logprob_chunks(
        self, token_ids: Sequence[int], first_row: int = 0, chunk: int = 512
    ) -> Iterator[tuple[int, NDArray[np.float32]]]:
        del chunk  # a small chunk of its own, to show the rows are stitched in order
        rows = len(token_ids) - 1
        for start in range(first_row, rows, self.chunk):
            stop = min(start + self.chunk, rows)
            block = np.stack([self._logits(token_ids[i]) for i in range(start, stop)])
            yield start, log_softmax(block)

    def prompt_logprobs(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        return np.concatenate([r for _, r in self.prompt_logprob_chunks(token_ids)])

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        return np.ones((len(token_ids), 4), np.float32)


def client(backend: ToyBackend | None = None) -> EngineClient:
    app = AdapterServer(backend or ToyBackend(), "toy").app  # type: ignore[arg-type]
    engine = EngineClient("http://toy", "toy")
    # An in-process transport in place of the network.
    engine._http = TestClient(app, base_url="http://toy")
    return engine


def test_a_text_prompt_is_tokenized_with_special_tokens_and_the_ids_come_back() -> None:
    answer = client().complete("hi", max_tokens=3, top_logprobs=2, seed=0)
    assert answer.prompt_token_ids[0] == BOS
    assert answer.prompt_token_ids == ToyBackend().tokenize("hi")
    assert client().tokenize("hi") == answer.prompt_token_ids  # /tokenize: same defaults


def test_the_chosen_logit_magnitude_is_reported_for_the_fork_tau() -> None:
    answer = client().complete([1, 2], max_tokens=3, top_logprobs=2, seed=0)
    assert answer.logit_scale == [5.0, 5.0, 5.0]


def test_a_chat_is_rendered_by_the_template_and_its_prompt_ids_returned() -> None:
    messages = [{"role": "user", "content": "hi"}]
    answer = client().chat(messages, max_tokens=2, top_logprobs=2, seed=0)
    backend = ToyBackend()
    expected = backend.tokenize(backend.render_chat(messages), add_special_tokens=False)
    assert answer.prompt_token_ids == expected
    assert answer.token_ids == [(expected[-1] + 1) % VOCAB, (expected[-1] + 2) % VOCAB]
    assert answer.top.k == 2


def test_generation_stops_at_eos_unless_told_to_ignore_it() -> None:
    engine = client()
    # From token 6 the toy model says 7 then 0 (its end of sequence).
    stopped = engine.complete([6], max_tokens=5, top_logprobs=1, seed=0, ignore_eos=False)
    assert stopped.token_ids == [7, 0]
    assert stopped.finish_reason == "stop"
    ignored = engine.complete([6], max_tokens=5, top_logprobs=1, seed=0)
    assert len(ignored.token_ids) == 5


def test_scores_from_position_one_cover_the_whole_sequence_in_chunks() -> None:
    backend = ToyBackend(chunk=3)
    sequence = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    scored = score_from(client(backend), sequence, 1, top_logprobs=3, seed=0)
    assert scored.start == 1
    assert scored.token_ids.tolist() == sequence[1:]
    rows = backend.prompt_logprobs(sequence)
    expected = [rows[i, sequence[i + 1]] for i in range(len(sequence) - 1)]
    np.testing.assert_allclose(scored.target_logprobs, expected, rtol=1e-6)


def test_full_vocabulary_rows_of_the_last_positions_on_request() -> None:
    backend = ToyBackend(chunk=3)
    sequence = [1, 2, 3, 4, 5, 6, 7]
    scored = score_from(client(backend), sequence, 1, top_logprobs=2, seed=0, full_vocab=4)
    assert scored.full_logprobs is not None
    assert scored.full_logprobs.shape == (4, VOCAB)
    np.testing.assert_allclose(scored.full_logprobs, backend.prompt_logprobs(sequence)[-4:])


def test_full_vocabulary_rows_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from infergate.runtime import server

    monkeypatch.setattr(server, "MAX_FULL_LOGPROB_VALUES", 2 * VOCAB)
    engine = client()
    with pytest.raises(Exception, match="parity_full_logprobs: 4 positions x 8 tokens exceed"):
        score_from(engine, [1, 2, 3, 4, 5], 1, top_logprobs=2, seed=0, full_vocab=4)


def test_non_finite_logprobs_travel_as_data_never_a_server_error() -> None:
    engine = client(ToyBackend(broken=True))
    answer = engine.complete([1, 2], max_tokens=2, top_logprobs=VOCAB, seed=0)
    assert np.isnan(answer.top.logprobs).any()
    scored = score_from(engine, [1, 2, 3], 1, top_logprobs=VOCAB, seed=0)
    assert np.isnan(scored.top.logprobs).any()


def test_fingerprints_are_served_with_the_config() -> None:
    engine = client()
    assert engine.parity_fingerprints() == ToyBackend().fingerprints()
    config = engine.parity_config()
    assert config is not None
    assert config["fingerprints"]["tokenizer.add_bos_token"] is True


def test_each_answer_states_the_engine_seconds_the_metrics_add_up() -> None:
    """The header gives a client its own requests' engine time; together the answers
    state exactly what the busy-seconds counter gained (the only client here)."""
    app = AdapterServer(ToyBackend(), "toy").app  # type: ignore[arg-type]
    http = TestClient(app, base_url="http://toy")

    def busy() -> float:
        page = http.get("/metrics").text
        line = next(x for x in page.splitlines() if x.startswith("infergate_adapter_busy"))
        return float(line.rsplit(" ", 1)[1])

    before = busy()
    answers = [
        http.post("/v1/completions", json={"model": "toy", "prompt": [1, 2], "max_tokens": 4}),
        http.post("/tokenize", json={"model": "toy", "prompt": "ab"}),
        http.post("/v1/parity/hidden_states", json={"model": "toy", "input": [1, 2, 3]}),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    stated = [float(a.headers[ENGINE_SECONDS_HEADER]) for a in answers]
    assert all(s >= 0 for s in stated)
    assert sum(stated) == pytest.approx(busy() - before, abs=1e-5)
    refused = http.post("/v1/completions", json={"model": "other", "prompt": [1]})
    assert refused.status_code == 400
    assert ENGINE_SECONDS_HEADER not in refused.headers
