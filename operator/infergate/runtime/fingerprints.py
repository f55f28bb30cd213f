"""What an engine actually runs, as fingerprints (see `infergate.parity.fingerprints`).

Computed from the model directory the engine loaded, with no engine import, so our
adapters serve them at `/v1/parity/config` and `/v1/parity/fingerprints`, and a probe
next to a vLLM server (same image, same mounted model directory, same pinned config)
can serve the same keys for the vLLM side (`infergate.runtime.fingerprint_server`).

Digests are of content, not files: a tokenizer re-saved in another layout (reformatted
JSON, merges as pairs or strings, added tokens in another order) or a checkpoint
re-sharded or re-saved with the same tensors keeps its digest; a changed merge, token,
special-token setting, template or weight does not.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

PROBE_TEXT = "Hello, world! 你好，世界。"  # noqa: RUF001 - Chinese punctuation
"""Encoded with special tokens into `tokenizer.probe_ids`: a BOS that starts being
prepended, or an EOS appended, changes them."""

_CHUNK = 8 << 20
_MODEL_CONFIG_EXTRA = (
    "hidden_act",
    "head_dim",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "attention_bias",
    "mlp_bias",
    "partial_rotary_factor",
    "layer_norm_eps",
    "rope_scaling",
    "bos_token_id",
    "pad_token_id",
)
"""config.json keys that change numerics beyond those every engine loads by name."""
_GENERATION_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "max_new_tokens",
    "max_length",
    "min_length",
    "min_new_tokens",
    "no_repeat_ngram_size",
)
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


# -- tokenizer ------------------------------------------------------------------------------


def _normalized_tokenizer(data: Mapping[str, Any]) -> dict[str, Any]:
    """tokenizer.json content with layout choices taken out (merge format, list orders)."""
    model = dict(data.get("model") or {})
    merges = model.get("merges")
    if isinstance(merges, list):
        model["merges"] = [m if isinstance(m, str) else " ".join(m) for m in merges]
    added = sorted(
        (dict(t) for t in data.get("added_tokens") or []), key=lambda t: int(t.get("id", 0))
    )
    kept = {k: data.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}
    return {"model": model, "added_tokens": added, **kept}


def _token_name(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def tokenizer_fingerprints(
    model_dir: Path, encode: Callable[[str], list[int]] | None = None
) -> dict[str, Any]:
    """tokenizer.*: content digest, special-token settings and ids, probe text ids."""
    data = _read_json(model_dir / "tokenizer.json")
    config = _read_json(model_dir / "tokenizer_config.json") or {}
    out: dict[str, Any] = {}
    if data is not None:
        out["tokenizer.digest"] = _sha(_canonical(_normalized_tokenizer(data)))
        vocab = dict((data.get("model") or {}).get("vocab") or {})
        vocab.update({t["content"]: t["id"] for t in data.get("added_tokens") or []})
    else:
        files = [model_dir / n for n in ("vocab.json", "merges.txt") if (model_dir / n).is_file()]
        digest = hashlib.sha256()
        for file in files:
            digest.update(file.read_bytes())
        out["tokenizer.digest"] = digest.hexdigest()[:16] if files else None
        vocab = _read_json(model_dir / "vocab.json") or {}
    out["tokenizer.add_bos_token"] = bool(config.get("add_bos_token", False))
    out["tokenizer.add_eos_token"] = bool(config.get("add_eos_token", False))
    for special in _SPECIAL:
        name = _token_name(config.get(special))
        out[f"tokenizer.{special}_id"] = None if name is None else vocab.get(name)
    if encode is not None:
        out["tokenizer.probe_ids"] = list(encode(PROBE_TEXT))
    return out


def chat_template(model_dir: Path) -> str | None:
    """The chat template the model ships: chat_template.jinja, or tokenizer_config's."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for source in (model_dir / "chat_template.json", model_dir / "tokenizer_config.json"):
        template = (_read_json(source) or {}).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: the default one is served
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            found = named.get("default")
            if isinstance(found, str):
                return found
    return None


def generation_config_fingerprints(model_dir: Path) -> dict[str, Any]:
    """generation_config.*: the settings an engine applies by default (EOS ids included)."""
    data = _read_json(model_dir / "generation_config.json")
    if data is None:
        return {"generation_config.present": False}
    out: dict[str, Any] = {"generation_config.present": True}
    for key in _GENERATION_KEYS:
        if key not in data:
            continue
        value = data[key]
        if key == "eos_token_id":
            value = sorted(value) if isinstance(value, list) else [value]
        out[f"generation_config.{key}"] = value
    return out


# -- weights ----------------------------------------------------------------------------------


def weights_digest(model_dir: Path) -> str | None:
    """Digest of every tensor's name, dtype, shape and bytes, in name order.

    Read from the safetensors headers and byte ranges, so it needs no framework and is
    the same whatever the sharding or the order of tensors in the files.
    """
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        bins = sorted(model_dir.glob("*.bin"))
        if not bins:
            return None
        digest = hashlib.sha256()
        for file in bins:
            digest.update(file.read_bytes())
        return digest.hexdigest()[:16]
    tensors: list[tuple[str, Path, int, dict[str, Any]]] = []
    for file in files:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        header.pop("__metadata__", None)
        tensors.extend((name, file, 8 + length, info) for name, info in header.items())
    digest = hashlib.sha256()
    for name, file, base, info in sorted(tensors, key=lambda t: t[0]):
        digest.update(_canonical([name, info["dtype"], info["shape"]]))
        begin, end = info["data_offsets"]
        with file.open("rb") as handle:
            handle.seek(base + begin)
            left = end - begin
            while left > 0:
                block = handle.read(min(_CHUNK, left))
                if not block:
                    raise OSError(f"{file}: tensor {name} is cut short")
                digest.update(block)
                left -= len(block)
    return digest.hexdigest()[:16]


# -- configuration and versions ----------------------------------------------------------------


def model_config_fingerprints(
    model_dir: Path, loaded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """model_config.*: the numeric configuration as loaded (overrides applied).

    `loaded` holds what the engine built its model with (our adapters: ModelConfig); keys
    it lacks are read from config.json for the numerics-relevant extras listed above.
    """
    data = _read_json(model_dir / "config.json") or {}
    values: dict[str, Any] = {}
    for key in _MODEL_CONFIG_EXTRA:
        if key in data and data[key] is not None:
            values[key] = data[key]
    values.update({k: v for k, v in (loaded or {}).items() if k != "dtype"})
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update({f"model_config.{key}.{k}": v for k, v in value.items()})
        else:
            flat[f"model_config.{key}"] = value
    return flat


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions(engine: str, engine_version: str) -> dict[str, Any]:
    """versions.*: engine, framework and the libraries that tokenize and load the model."""
    framework = "mindspore" if engine == "mindformers" else "torch"
    found = _version(framework)
    return {
        "versions.engine": engine_version,
        "versions.framework": None if found is None else f"{framework} {found}",
        "versions.transformers": _version("transformers"),
        "versions.tokenizers": _version("tokenizers"),
    }


_WEIGHTS_CACHE: dict[tuple[str, int, float], str | None] = {}


def _cached_weights_digest(model_dir: Path) -> str | None:
    stats = [p.stat() for p in sorted(model_dir.glob("*.safetensors"))]
    newest = max((s.st_mtime for s in stats), default=0.0)
    key = (str(model_dir.resolve()), sum(s.st_size for s in stats), newest)
    if key not in _WEIGHTS_CACHE:
        _WEIGHTS_CACHE[key] = weights_digest(model_dir)
    return _WEIGHTS_CACHE[key]


def model_fingerprints(
    model_dir: Path,
    *,
    engine: str,
    engine_version: str,
    dtype: str,
    loaded_config: Mapping[str, Any] | None = None,
    encode: Callable[[str], list[int]] | None = None,
) -> dict[str, Any]:
    """Every engine-side fingerprint of a model directory as an engine loaded it."""
    template = chat_template(model_dir)
    return {
        "engine.kind": engine,
        "engine.dtype": dtype,
        **versions(engine, engine_version),
        **tokenizer_fingerprints(model_dir, encode),
        "chat_template.digest": None if template is None else _sha(template.encode("utf-8")),
        **generation_config_fingerprints(model_dir),
        "weights.digest": _cached_weights_digest(model_dir),
        **model_config_fingerprints(model_dir, loaded_config),
    }
