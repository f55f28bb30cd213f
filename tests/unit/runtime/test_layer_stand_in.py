"""The transformers stand-in of a vLLM side: loads on the first probe, answers like an adapter,
and refuses (never hides) what it cannot reproduce."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from infergate.engines.layer_probe import parse_layer_states
from infergate.runtime.engine_config import EngineConfigError, stand_in_settings
from infergate.runtime.layer_stand_in import LayerStandIn

from .test_layer_states import LayeredBackend, known_state


def ask(stand_in: LayerStandIn, *requests: tuple[str, str, dict[str, Any] | None]) -> list[Any]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=stand_in.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stand-in") as http:
            answers = []
            for method, path, body in requests:
                answers.append(await http.request(method, path, json=body))
            return answers

    return asyncio.run(run())


PROBE = ("POST", "/v1/parity/layer_states", {"model": "fixture", "input": [5, 6, 7]})


def test_the_model_loads_on_the_first_probe_only() -> None:
    loaded: list[LayeredBackend] = []

    def load() -> LayeredBackend:
        loaded.append(LayeredBackend())
        return loaded[-1]

    stand_in = LayerStandIn(load, "fixture")
    [health, described] = ask(
        stand_in, ("GET", "/health", None), ("GET", "/v1/parity/stand_in", None)
    )
    assert health.status_code == 200
    assert described.json()["loaded"] is False
    assert loaded == []  # a check that passes never asks: nothing is loaded
    first, second, described = ask(stand_in, PROBE, PROBE, ("GET", "/v1/parity/stand_in", None))
    assert len(loaded) == 1
    assert first.status_code == second.status_code == 200
    answer = first.json()
    assert answer["engine"] == "transformers"
    assert answer["standInFor"] == "vllm"
    states = parse_layer_states(answer)
    np.testing.assert_array_equal(states.states[1], known_state(1, [5, 6, 7]))
    assert described.json()["loaded"] is True


def test_a_failed_load_is_answered_every_time_without_loading_again() -> None:
    calls = []

    def load() -> LayeredBackend:
        calls.append(1)
        raise OSError("no such file: /models/qwen/model.safetensors")

    stand_in = LayerStandIn(load, "fixture")
    first, second = ask(stand_in, PROBE, PROBE)
    assert first.status_code == second.status_code == 400
    assert "model.safetensors" in second.json()["error"]["message"]
    assert len(calls) == 1


def test_a_refused_config_is_said_on_every_probe() -> None:
    stand_in = LayerStandIn(None, "fixture", refusal="field hfOverrides: max_window_layers")
    [health, probe] = ask(stand_in, ("GET", "/health", None), PROBE)
    assert health.status_code == 200  # the probe pod (and its check) does not fail for it
    assert probe.status_code == 400
    assert "max_window_layers" in probe.json()["error"]["message"]


def test_requests_for_another_model_or_out_of_vocabulary_ids_are_refused() -> None:
    stand_in = LayerStandIn(LayeredBackend, "fixture")
    other, wide = ask(
        stand_in,
        ("POST", "/v1/parity/layer_states", {"model": "other", "input": [1]}),
        ("POST", "/v1/parity/layer_states", {"input": [1, 100]}),
    )
    assert other.status_code == 400
    assert "'other'" in other.json()["error"]["message"]
    assert wide.status_code == 400
    assert "100" in wide.json()["error"]["message"]


def vllm_config(**fields: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "engine": "vllm",
        "servedModelName": "qwen",
        "model": {"uri": "pvc://models/qwen", "reference": "/models/qwen"},
        "dtype": "bfloat16",
        "maxModelLen": 4096,
        "seed": 7,
        "hfOverrides": {"rms_norm_eps": 1e-5},
    }
    config.update(fields)
    return config


def test_the_stand_in_loads_what_the_vllm_side_pinned() -> None:
    settings = stand_in_settings(vllm_config())
    assert str(settings.model) == "/models/qwen"
    assert settings.dtype == "bfloat16"
    assert settings.overrides == {"rms_norm_eps": 1e-5}
    assert settings.served_model_name == "qwen"
    assert (settings.max_model_len, settings.seed) == (4096, 7)
    rope = stand_in_settings(vllm_config(hfOverrides={"rope_theta": 5e5}))
    assert rope.overrides == {"rope_theta": 5e5}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"engine": "mindformers"}, "field engine"),
        ({"model": {"uri": "hf://Qwen/Qwen2", "reference": "Qwen/Qwen2"}}, "model.reference"),
        ({"hfOverrides": {"max_window_layers": 3}}, "max_window_layers"),
    ],
)
def test_what_the_stand_in_cannot_reproduce_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(EngineConfigError, match=message):
        stand_in_settings(vllm_config(**fields))
    missing = vllm_config()
    missing.pop("dtype")
    with pytest.raises(EngineConfigError, match="field dtype is missing"):
        stand_in_settings(missing)
