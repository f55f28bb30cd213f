"""Qwen2 weights from the Hugging Face layout to MindFormers' LlamaForCausalLM names.

Pure name mapping over numpy arrays (no MindSpore import), so it is testable anywhere.
Qwen2 has q/k/v biases (`qkv_has_bias=True` in MindFormers) and no output-projection
bias. The Hugging Face q/k layout already suits MindFormers' rotary embedding (its own
converter copies them unpermuted); logits agree with transformers in float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numpy.typing import NDArray

from infergate.runtime.backend import BackendError

_LAYER_NAMES: dict[str, str] = {
    "self_attn.q_proj.weight": "attention.wq.weight",
    "self_attn.q_proj.bias": "attention.wq.bias",
    "self_attn.k_proj.weight": "attention.wk.weight",
    "self_attn.k_proj.bias": "attention.wk.bias",
    "self_attn.v_proj.weight": "attention.wv.weight",
    "self_attn.v_proj.bias": "attention.wv.bias",
    "self_attn.o_proj.weight": "attention.wo.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "input_layernorm.weight": "attention_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}

_GLOBAL_NAMES: dict[str, str] = {
    "model.embed_tokens.weight": "model.tok_embeddings.embedding_weight",
    "model.norm.weight": "model.norm_out.weight",
    "lm_head.weight": "lm_head.weight",
}


def mindformers_name(hf_name: str) -> str:
    """The MindFormers parameter name of a Hugging Face Qwen2 weight name."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    prefix = "model.layers."
    if hf_name.startswith(prefix):
        index, _, rest = hf_name[len(prefix) :].partition(".")
        if index.isdigit() and rest in _LAYER_NAMES:
            return f"model.layers.{index}.{_LAYER_NAMES[rest]}"
    raise BackendError(
        f"weight {hf_name!r}: no MindFormers name for it; a Qwen2 checkpoint has "
        f"{', '.join(sorted(_GLOBAL_NAMES))} and model.layers.N.{{{', '.join(_LAYER_NAMES)}}}"
    )


def convert_qwen2_weights(
    weights: Mapping[str, NDArray[Any]], num_layers: int
) -> dict[str, NDArray[Any]]:
    """All weights renamed; with tied embeddings the lm_head is the embedding matrix."""
    converted = {mindformers_name(name): value for name, value in weights.items()}
    if "lm_head.weight" not in converted and "model.tok_embeddings.embedding_weight" in converted:
        converted["lm_head.weight"] = converted["model.tok_embeddings.embedding_weight"]
    layers = {int(n.split(".")[2]) for n in converted if n.startswith("model.layers.")}
    if layers != set(range(num_layers)):
        raise BackendError(
            f"weights: layers {sorted(layers)} found, config.json says num_hidden_layers="
            f"{num_layers}"
        )
    return converted
