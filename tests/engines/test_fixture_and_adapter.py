"""The fixture model and the adapter server's contract, on the real engines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from safetensors import safe_open

from infergate.engines.client import EngineClient
from infergate.engines.venvs import engine_environment, engine_python
from infergate.fixture.generate import GENERATOR_VERSION, MANIFEST_NAME
from infergate.suite import load_suite
from tests.engines.conftest import EngineFarm

pytestmark = pytest.mark.engines


_SHORT_FIXTURE = (
    "import sys; from pathlib import Path; "
    "from infergate.fixture.generate import FixtureSpec, ensure_fixture_model; "
    "print(ensure_fixture_model(Path(sys.argv[1]), "
    "FixtureSpec(train_steps=12, long_steps=2, long_window=512)))"
)
"""The generator with its training cut short: the same code path as the full fixture
(tokenizer training, corpus, seeded batches, deterministic kernels) in seconds rather than
the ~90 CPU seconds of the real training, which `make test` should not pay twice."""


def test_fixture_model_is_generated_the_same_every_time(
    fixture_model: Path, tmp_path: Path
) -> None:
    manifests = []
    for name in ("first", "second"):
        out = tmp_path / name
        done = subprocess.run(
            [str(engine_python("vllm")), "-c", _SHORT_FIXTURE, str(out)],
            check=True, capture_output=True, text=True, env=engine_environment(), timeout=600,
        )  # fmt: skip
        assert done.stdout.strip() == str(out)
        manifests.append(json.loads((out / MANIFEST_NAME).read_text()))
    assert manifests[0]["files"] == manifests[1]["files"], "two processes, the same bytes"
    cached = json.loads((fixture_model / MANIFEST_NAME).read_text())
    assert cached["generator"] == manifests[0]["generator"] == GENERATOR_VERSION
    assert set(cached["files"]) == set(manifests[0]["files"])
    assert not list(tmp_path.glob(".first.*")), "the staging directory is renamed away"


def test_fixture_model_shape(fixture_model: Path) -> None:
    config = json.loads((fixture_model / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["max_position_embeddings"] >= 10_240
    with safe_open(str(fixture_model / "model.safetensors"), "np") as weights:
        names = set(weights.keys())
    assert "model.layers.0.self_attn.q_proj.bias" in names


def test_tokenizer_round_trips_and_greedy_output_is_varied(engines: EngineFarm) -> None:
    server = engines.server("transformers", "float32")
    with EngineClient(server.url, "fixture") as client:
        for prompt in load_suite("default").select(long=False, chat=False).prompts:
            assert prompt.text is not None
            ids = client.tokenize(prompt.text)
            back = httpx.post(f"{server.url}/detokenize", json={"tokens": ids}).json()["prompt"]
            assert back == prompt.text
            out = client.complete(ids, max_tokens=32, top_logprobs=2, seed=42)
            # Not collapsed to a few tokens (an untrained model repeats one). A trained model
            # may go round one sentence under greedy decoding, as real models do: the
            # mixed-language prompt repeats one sentence (11 distinct tokens in 32).
            assert len(set(out.token_ids)) >= 8, (prompt.id, out.text)


def test_adapter_refuses_sampling_and_unknown_models(engines: EngineFarm) -> None:
    server = engines.server("transformers", "float32")
    body = {"model": "fixture", "prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0.7}
    answer = httpx.post(f"{server.url}/v1/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("temperature: 0.7 is not served")
    answer = httpx.post(
        f"{server.url}/v1/completions", json={**body, "temperature": 0, "model": "other"}
    )
    assert answer.status_code == 400
    assert "model: 'other' is not served here; served: 'fixture'" in answer.text
    too_long = {"model": "fixture", "prompt": [5] * 16_380, "max_tokens": 10}
    answer = httpx.post(f"{server.url}/v1/completions", json=too_long)
    assert answer.status_code == 400
    assert "exceed the maximum model length 16384" in answer.text
    models = httpx.get(f"{server.url}/v1/models").json()
    assert models["data"][0]["id"] == "fixture"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'infergate_adapter_requests_total{engine="transformers"' in metrics


def test_mindformers_refuses_bfloat16_on_cpu(fixture_model: Path) -> None:
    done = subprocess.run(
        [
            str(engine_python("mindformers")), "-m", "infergate.cli", "serve",
            "--engine", "mindformers", "--model", str(fixture_model), "--dtype", "bfloat16",
        ],
        check=False, capture_output=True, text=True, env=engine_environment(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert "dtype: 'bfloat16' is not supported by MindSpore's CPU kernels" in done.stderr
    assert "allowed on CPU: float32, float16" in done.stderr
