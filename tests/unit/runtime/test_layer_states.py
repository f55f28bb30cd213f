"""The per-layer probe route of the adapter server, on a backend with known states."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.typing import NDArray

from infergate.engines.layer_probe import parse_layer_states
from infergate.golden.summary import summarize
from infergate.runtime.layer_states import MAX_LAYER_FLOATS
from infergate.runtime.model_config import ModelConfig
from infergate.runtime.server import AdapterServer

CONFIG = ModelConfig(
    architecture="Qwen2ForCausalLM",
    vocab_size=100,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    tie_word_embeddings=False,
    eos_token_id=0,
)


def known_state(state: int, token_ids: Sequence[int]) -> NDArray[np.float32]:
    """State `state` at every position: token id + state + column / 100."""
    ids = np.asarray(token_ids, dtype=np.float32)[:, None]
    return ids + state + np.arange(CONFIG.hidden_size, dtype=np.float32)[None, :] / 100


class LayeredBackend:
    """Just enough of an engine backend for the probe routes."""

    engine = "transformers"
    engine_version = "test"
    dtype = "float32"
    max_model_len = 64
    eos_token_id = 0

    def __init__(self, config: ModelConfig = CONFIG) -> None:
        self.config = config

    def effective_config(self) -> dict[str, Any]:
        return {}

    def layer_states(self, token_ids: Sequence[int], reduce: Any) -> list[NDArray[np.float32]]:
        states = self.config.num_hidden_layers + 2
        return [reduce(known_state(i, token_ids)) for i in range(states)]


class PlainBackend(LayeredBackend):
    engine = "vllm-like"
    layer_states = None  # type: ignore[assignment]


class _Client:
    """Requests to the ASGI app in this process (no sockets)."""

    def __init__(self, backend: Any) -> None:
        self._app = AdapterServer(backend, "fixture").app

    def post(self, path: str, json: dict[str, Any]) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self._app)
            async with httpx.AsyncClient(transport=transport, base_url="http://adapter") as http:
                return await http.post(path, json=json)

        return asyncio.run(call())


def _client(backend: Any) -> _Client:
    return _Client(backend)


def test_full_states_at_chosen_positions() -> None:
    answer = _client(LayeredBackend()).post(
        "/v1/parity/layer_states", json={"input": [5, 6, 7, 8], "positions": [1, 3]}
    )
    assert answer.status_code == 200
    parsed = parse_layer_states(answer.json())
    assert parsed.names == ("embeddings", "layer 0", "layer 1", "layer 2", "final norm")
    assert parsed.positions == (1, 3)
    assert parsed.states.shape == (5, 2, 16)
    np.testing.assert_array_equal(parsed.states[2], known_state(2, [6, 8]))
    assert parsed.norms is None


def test_sketches_of_every_position_match_the_golden_summary() -> None:
    answer = _client(LayeredBackend()).post(
        "/v1/parity/layer_states", json={"input": [5, 6, 7], "sketchDims": 8}
    )
    assert answer.status_code == 200
    parsed = parse_layer_states(answer.json())
    assert parsed.states.shape == (5, 3, 8)
    assert parsed.sketch_dims == 8
    expected = summarize(known_state(4, [5, 6, 7]), 8)
    np.testing.assert_allclose(parsed.states[4], expected.sketch, rtol=1e-6)
    assert parsed.norms is not None
    np.testing.assert_allclose(parsed.norms[4], expected.norms, rtol=1e-6)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input": [1, 2], "positions": [2]}, "positions: 2 is outside the input"),
        ({"input": [1, 2], "positions": [1, 1]}, "once"),
        ({"input": [1, 2], "sketchDims": 4}, "sketchDims"),
        ({"input": []}, "input"),
        ({"input": [1, 2], "layers": [0]}, "layers"),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], message: str) -> None:
    answer = _client(LayeredBackend()).post("/v1/parity/layer_states", json=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]


def test_an_answer_past_the_bound_is_refused_not_truncated() -> None:
    wide = replace(CONFIG, hidden_size=1 << 20, max_position_embeddings=64)
    answer = _client(LayeredBackend(wide)).post(
        "/v1/parity/layer_states", json={"input": list(range(8))}
    )
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert f"at most {MAX_LAYER_FLOATS}" in message
    assert "sketchDims" in message


def test_an_engine_without_layer_states_says_so() -> None:
    answer = _client(PlainBackend()).post("/v1/parity/layer_states", json={"input": [1, 2]})
    assert answer.status_code == 400
    assert "does not serve per-layer hidden states" in answer.json()["error"]["message"]
