"""Pure pieces of the engine layer: response parsing, weight names, vLLM flags."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from numpy.typing import NDArray

from infergate.engines.client import (
    EngineClientError,
    parse_completion_choice,
    parse_prompt_logprobs,
)
from infergate.render.vllm import VllmServe, pooling_args, vllm_serve_args
from infergate.runtime.backend import BackendError, parse_config_overrides
from infergate.runtime.mindformers_weights import convert_qwen2_weights, mindformers_name


def test_completion_choice_reads_ids_and_best_first_top_k() -> None:
    choice = {
        "text": " the old",
        "finish_reason": "length",
        "logprobs": {
            "tokens": ["token_id:271", "token_id:662"],
            "token_logprobs": [-0.0016, -0.0167],
            "top_logprobs": [
                {"token_id:262": -9.0, "token_id:271": -0.0016},
                {"token_id:662": -0.0167, "token_id:1418": -5.98},
            ],
        },
    }
    completion = parse_completion_choice(choice, [334, 1309], k=2)
    assert completion.token_ids == [271, 662]
    assert completion.prompt_token_ids == [334, 1309]
    assert completion.top.token_ids.tolist() == [[271, 262], [662, 1418]]
    assert completion.top.logprobs[0, 0] == pytest.approx(-0.0016)


def test_completion_choice_refuses_token_strings() -> None:
    choice = {"text": "x", "logprobs": {"tokens": ["the"], "top_logprobs": [{"the": -0.1}]}}
    with pytest.raises(EngineClientError, match="return_tokens_as_token_ids"):
        parse_completion_choice(choice, [1], k=1)


def test_prompt_logprobs_give_teacher_forced_scores_past_the_prompt() -> None:
    sequence = [10, 11, 12, 13]
    entries = [
        None,
        {"11": {"logprob": -0.5, "rank": 1}},
        {"12": {"logprob": -2.0, "rank": 3}, "7": {"logprob": -0.1, "rank": 1},
         "8": {"logprob": -1.0, "rank": 2}},
        {"13": {"logprob": -0.3, "rank": 1}, "9": {"logprob": -1.5, "rank": 2}},
    ]  # fmt: skip
    forced = parse_prompt_logprobs(entries, sequence, prompt_len=2, k=2)
    assert forced.token_ids.tolist() == [12, 13]
    assert forced.target_logprobs.tolist() == [-2.0, -0.3]
    # Top-k is this side's own best two; the forced token outside it is not added.
    assert forced.top.token_ids.tolist() == [[7, 8], [13, 9]]
    with pytest.raises(EngineClientError, match="3 entries for a sequence of 4"):
        parse_prompt_logprobs(entries[:3], sequence, prompt_len=2, k=2)


def test_qwen2_names_map_to_mindformers_including_qkv_bias() -> None:
    assert mindformers_name("model.layers.3.self_attn.k_proj.bias") == (
        "model.layers.3.attention.wk.bias"
    )
    assert mindformers_name("model.embed_tokens.weight") == "model.tok_embeddings.embedding_weight"
    assert mindformers_name("model.norm.weight") == "model.norm_out.weight"
    with pytest.raises(BackendError, match=r"model\.layers\.0\.rotary\.inv_freq"):
        mindformers_name("model.layers.0.rotary.inv_freq")
    weights: dict[str, NDArray[np.float32]] = {
        "model.embed_tokens.weight": np.zeros((4, 2), np.float32),
        "model.layers.0.input_layernorm.weight": np.zeros(2, np.float32),
    }
    converted = convert_qwen2_weights(weights, num_layers=1)
    assert "lm_head.weight" in converted  # tied embeddings give the head its weights
    with pytest.raises(BackendError, match=r"layers \[0\] found, config.json says"):
        convert_qwen2_weights(weights, num_layers=2)


def test_config_overrides_become_vllm_hf_overrides() -> None:
    overrides = parse_config_overrides(["rms_norm_eps=1e-5", "rope_theta=10000"])
    argv = pooling_args(
        vllm_serve_args(
            VllmServe(
                model="/m", served_model_name="m", dtype="bfloat16", max_model_len=4096,
                seed=42, host="127.0.0.1", port=8000, config=overrides,
            )
        )
    )  # fmt: skip
    hf = json.loads(argv[argv.index("--hf-overrides") + 1])
    assert hf == {
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    }
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert json.loads(argv[argv.index("--pooler-config") + 1])["tok_pooling_type"] == "ALL"
    with pytest.raises(BackendError, match=r"unknown key 'eps'; allowed: rms_norm_eps, rope_theta"):
        parse_config_overrides(["eps=1"])
    with pytest.raises(BackendError, match="not a number"):
        parse_config_overrides(["rope_theta=big"])
    assert math.isclose(overrides["rope_theta"], 1e4)
