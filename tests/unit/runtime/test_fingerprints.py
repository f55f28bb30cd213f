"""Fingerprints of a model directory: content digests that see every change and no layout.

A tokenizer re-saved in another layout, or a checkpoint re-sharded, keeps its digest; a
BOS that starts being added, a changed template, EOS id or weight does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from infergate.parity.fingerprints import compare_fingerprints
from infergate.runtime.fingerprints import (
    generation_config_fingerprints,
    model_fingerprints,
    tokenizer_fingerprints,
    weights_digest,
)

TOKENIZER: dict[str, Any] = {
    "version": "1.0",
    "added_tokens": [
        {"id": 5, "content": "<|endoftext|>", "special": True},
        {"id": 6, "content": "<|im_start|>", "special": True},
    ],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel"},
    "post_processor": None,
    "decoder": {"type": "ByteLevel"},
    "model": {
        "type": "BPE",
        "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4},
        "merges": ["a b", "ab c"],
    },
}
WEIGHTS = {
    "model.embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
    "model.norm.weight": np.ones(4, np.float32),
    "lm_head.weight": np.full((3, 4), 0.5, np.float32),
}


def _model(path: Path, **changes: Any) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = changes.get("tokenizer", TOKENIZER)
    indent = changes.get("indent")
    (path / "tokenizer.json").write_text(json.dumps(tokenizer, indent=indent), encoding="utf-8")
    config = {"eos_token": "<|endoftext|>", "add_bos_token": False, **changes.get("config", {})}
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    generation = {"eos_token_id": [5], **changes.get("generation", {})}
    (path / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    shards = changes.get("shards", [WEIGHTS])
    for index, shard in enumerate(shards):
        safetensors.numpy.save_file(shard, str(path / f"model-{index}.safetensors"))
    (path / "config.json").write_text(
        json.dumps({"hidden_act": "silu", "rope_scaling": None, "transformers_version": "5.0"}),
        encoding="utf-8",
    )
    return path


def test_a_tokenizer_in_another_layout_keeps_its_digest(tmp_path: Path) -> None:
    base = tokenizer_fingerprints(_model(tmp_path / "a"))
    relaid = dict(TOKENIZER)
    relaid["model"] = {**TOKENIZER["model"], "merges": [["a", "b"], ["ab", "c"]]}
    relaid["added_tokens"] = list(reversed(TOKENIZER["added_tokens"]))
    other = tokenizer_fingerprints(_model(tmp_path / "b", tokenizer=relaid, indent=2))
    assert other == base
    assert base["tokenizer.eos_token_id"] == 5


def test_a_tokenizer_change_or_a_bos_setting_shows(tmp_path: Path) -> None:
    base = tokenizer_fingerprints(_model(tmp_path / "a"))
    changed = dict(TOKENIZER)
    changed["model"] = {**TOKENIZER["model"], "merges": ["a b"]}
    assert tokenizer_fingerprints(_model(tmp_path / "b", tokenizer=changed)) != base
    bos = tokenizer_fingerprints(_model(tmp_path / "c", config={"add_bos_token": True}))
    found = compare_fingerprints(base, bos)
    assert [d.key for d in found.differing] == ["tokenizer.add_bos_token"]


def test_the_probe_ids_show_a_tokenizer_that_starts_prepending_bos(tmp_path: Path) -> None:
    model = _model(tmp_path / "a")
    plain = tokenizer_fingerprints(model, encode=lambda text: [ord(c) % 7 for c in text[:4]])
    with_bos = tokenizer_fingerprints(
        model, encode=lambda text: [6] + [ord(c) % 7 for c in text[:4]]
    )
    assert plain["tokenizer.probe_ids"] != with_bos["tokenizer.probe_ids"]


def test_a_resharded_checkpoint_keeps_its_weights_digest(tmp_path: Path) -> None:
    whole = weights_digest(_model(tmp_path / "a"))
    names = sorted(WEIGHTS)
    shards = [{n: WEIGHTS[n] for n in names[:1]}, {n: WEIGHTS[n] for n in names[1:]}]
    assert weights_digest(_model(tmp_path / "b", shards=shards)) == whole
    corrupted = dict(WEIGHTS)
    corrupted["model.norm.weight"] = np.ones(4, np.float32) * np.float32(1.02)
    assert weights_digest(_model(tmp_path / "c", shards=[corrupted])) != whole


def test_generation_config_eos_ids_are_compared_as_a_set(tmp_path: Path) -> None:
    one = generation_config_fingerprints(
        _model(tmp_path / "a", generation={"eos_token_id": [5, 6]})
    )
    other = generation_config_fingerprints(
        _model(tmp_path / "b", generation={"eos_token_id": [6, 5]})
    )
    assert one == other
    changed = generation_config_fingerprints(_model(tmp_path / "c", generation={"eos_token_id": 5}))
    assert changed["generation_config.eos_token_id"] == [5]
    assert changed != one


def test_model_fingerprints_name_every_group(tmp_path: Path) -> None:
    found = model_fingerprints(
        _model(tmp_path / "a"),
        engine="transformers",
        engine_version="transformers 5 / torch 2",
        dtype="bfloat16",
        loaded_config={"rms_norm_eps": 1e-6, "num_hidden_layers": 2, "dtype": "bfloat16"},
    )
    groups = {key.split(".", 1)[0] for key in found}
    assert groups >= {
        "engine", "versions", "tokenizer", "chat_template", "generation_config", "weights",
        "model_config",
    }  # fmt: skip
    assert found["model_config.rms_norm_eps"] == 1e-6
    assert found["model_config.hidden_act"] == "silu"
    assert "model_config.transformers_version" not in found  # file metadata, not numerics
    assert found["chat_template.digest"] is None
