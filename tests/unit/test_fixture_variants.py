"""Fixture model variants: each changes exactly what it says, on a small synthetic model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infergate.fixture import variants as v

NAMES = (
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.q_proj.bias",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.1.self_attn.q_proj.weight",
    "model.layers.1.self_attn.k_proj.bias",
    "model.layers.1.mlp.down_proj.weight",
    "model.norm.weight",
    "lm_head.weight",
)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    root = tmp_path / "base"
    root.mkdir()
    tensors = {
        n: rng.standard_normal((8,) if n.endswith(("bias", "norm.weight")) else (8, 8)).astype(
            np.float32
        )
        * 0.05
        for n in NAMES
    }
    v.save_weights(root, tensors)
    (root / "config.json").write_text(
        json.dumps({"rms_norm_eps": 1e-6, "rope_parameters": {"rope_theta": 1e6}})
    )
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    (root / "chat_template.jinja").write_text("{{ messages }}")
    added = [{"id": i, "content": t} for i, t in enumerate(["<|endoftext|>", "<|im_end|>"])]
    tokenizer = {
        "added_tokens": added,
        "post_processor": None,
        "model": {"vocab": {"a": 2, "b": 3, "ab": 4}, "merges": [["a", "b"]]},
    }
    (root / "tokenizer.json").write_text(json.dumps(tokenizer))
    return root


def _changed(base: Path, other: Path) -> set[str]:
    a, b = v.load_weights(base), v.load_weights(other)
    return {n for n in a if not np.array_equal(a[n], b[n])}


def test_residual_scale_touches_only_the_residual_writers(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "scaled"
    v.residual_scale(1000.0)(model, out)
    assert _changed(model, out) == {
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
    }
    a, b = v.load_weights(model), v.load_weights(out)
    np.testing.assert_allclose(
        b["model.embed_tokens.weight"], a["model.embed_tokens.weight"] * 1000
    )


def test_the_fp16_overflow_factor_lifts_activations_but_not_weights_past_65504(
    model: Path,
) -> None:
    factor = v.residual_scale_for_fp16_overflow(model, residual_max=20.0)
    assert factor * 20.0 == pytest.approx(4 * 65504.0)
    with pytest.raises(ValueError, match="fp16's range"):
        v.residual_scale_for_fp16_overflow(model, residual_max=1e-3)


def test_final_norm_scale_and_layer_corruption_change_what_they_name(
    model: Path, tmp_path: Path
) -> None:
    v.scale_final_norm(1.02)(model, tmp_path / "norm")
    assert _changed(model, tmp_path / "norm") == {"model.norm.weight"}
    np.testing.assert_allclose(
        v.load_weights(tmp_path / "norm")["model.norm.weight"],
        v.load_weights(model)["model.norm.weight"] * np.float32(1.02),
    )
    v.corrupt_layer(1, 0.1, seed=3)(model, tmp_path / "bad")
    assert _changed(model, tmp_path / "bad") == {
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
    }
    v.drop_qkv_bias()(model, tmp_path / "nobias")
    assert _changed(model, tmp_path / "nobias") == {
        "model.layers.0.self_attn.q_proj.bias",
        "model.layers.1.self_attn.k_proj.bias",
    }


def test_reshard_keeps_every_tensor_bit_for_bit(model: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    out = tmp_path / "sharded"
    v.reshard(3)(model, out)
    assert not (out / v.WEIGHTS).exists()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    merged: dict[str, np.ndarray] = {}
    for file in set(index["weight_map"].values()):
        merged.update(load_file(str(out / file)))
    original = v.load_weights(model)
    assert merged.keys() == original.keys()
    assert all(np.array_equal(merged[n], original[n]) for n in original)


def test_config_and_tokenizer_variants_edit_one_setting(model: Path, tmp_path: Path) -> None:
    v.norm_epsilon(1e-5)(model, tmp_path / "eps")
    assert json.loads((tmp_path / "eps" / "config.json").read_text())["rms_norm_eps"] == 1e-5
    v.rope_theta(1e4)(model, tmp_path / "rope")
    config = json.loads((tmp_path / "rope" / "config.json").read_text())
    assert config["rope_parameters"]["rope_theta"] == 1e4
    v.generation_eos()(model, tmp_path / "eos")
    assert json.loads((tmp_path / "eos" / "generation_config.json").read_text()) == {
        "eos_token_id": 1
    }
    v.tokenizer_adds_bos()(model, tmp_path / "bos")
    post = json.loads((tmp_path / "bos" / "tokenizer.json").read_text())["post_processor"]
    assert post["single"][0] == {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    assert post["special_tokens"]["<|endoftext|>"]["ids"] == [0]
    v.chat_template("changed")(model, tmp_path / "chat")
    assert (tmp_path / "chat" / "chat_template.jinja").read_text() == "changed"
    v.tokenizer_with_vocab_files()(model, tmp_path / "files")
    assert json.loads((tmp_path / "files" / "vocab.json").read_text()) == {"a": 2, "b": 3, "ab": 4}
    assert (tmp_path / "files" / "merges.txt").read_text().splitlines()[1] == "a b"
    assert (tmp_path / "files" / "tokenizer.json").read_bytes() == (
        model / "tokenizer.json"
    ).read_bytes()


def test_q8_0_rounds_every_matrix_to_a_block_scale_and_leaves_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    base = tmp_path / "base"
    base.mkdir()
    matrix = rng.standard_normal((4, 64)).astype(np.float32)
    v.save_weights(base, {"w": matrix, "model.norm.weight": np.ones(64, np.float32)})
    v.quantize_q8_0()(base, tmp_path / "q8")
    out = v.load_weights(tmp_path / "q8")
    np.testing.assert_array_equal(out["model.norm.weight"], np.ones(64, np.float32))
    blocks, q = matrix.reshape(4, 2, 32), out["w"].reshape(4, 2, 32)
    scale = np.abs(blocks).max(axis=2, keepdims=True) / 127.0
    steps = q / scale
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)  # int8 steps of its block
    assert np.abs(steps).max() <= 127.0 + 1e-3
    assert 0 < np.abs(q - blocks).max() <= scale.max() / 2 + 1e-7  # at most half a step off
