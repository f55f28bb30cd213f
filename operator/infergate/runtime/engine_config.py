"""The pinned engine.json of a revision, as our servers beside or inside it read it.

The operator renders it into the revision's ConfigMap (render/mindformers.py,
render/vllm.py); `infergate serve --engine mindformers --engine-config engine.json`
takes the model, dtype, length, seed and numeric overrides from it, so what runs is
exactly what was hashed. Beside a vLLM side, the fingerprint server and the layer
stand-in read the same file (`fingerprint_settings`, `stand_in_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infergate.runtime.backend import CONFIG_KEYS


class EngineConfigError(ValueError):
    """engine.json lacks a field the adapter needs, or holds one it cannot honour."""


@dataclass(frozen=True)
class ServeSettings:
    model: Path
    dtype: str
    max_model_len: int | None
    seed: int
    served_model_name: str | None
    overrides: dict[str, float]
    notes: list[str] = field(default_factory=list)


def _required(config: dict[str, Any], *path: str) -> Any:
    value: Any = config
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise EngineConfigError(f"field {'.'.join(path)} is missing")
        value = value[key]
    return value


@dataclass(frozen=True)
class FingerprintSettings:
    """What the fingerprint server beside a vLLM side reads from its pinned engine.json."""

    model: Path
    dtype: str
    overrides: dict[str, float]


def fingerprint_settings(config: dict[str, Any]) -> FingerprintSettings:
    """The model directory, dtype and pinned numeric overrides of a vLLM revision."""
    model = _vllm_model_dir(
        config,
        "fingerprints are served for vllm revisions (the adapters serve their own)",
        "fingerprints are read from the model directory, so the revision must load from a path",
    )
    overrides_in = config.get("hfOverrides") or {}
    overrides = {k: float(overrides_in[k]) for k in CONFIG_KEYS if k in overrides_in}
    return FingerprintSettings(
        model=model, dtype=str(_required(config, "dtype")), overrides=overrides
    )


def _vllm_model_dir(config: dict[str, Any], engine_why: str, path_why: str) -> Path:
    """The model directory of a vLLM revision's engine.json, or an error naming the field."""
    if config.get("engine") != "vllm":
        raise EngineConfigError(f"field engine is {config.get('engine')!r}: {engine_why}")
    reference = str(_required(config, "model", "reference"))
    if not reference.startswith("/"):
        raise EngineConfigError(
            f"field model.reference is {reference!r}: {path_why} (pvc:// or file:// model URIs)"
        )
    return Path(reference)


def serve_settings(config: dict[str, Any]) -> ServeSettings:
    model = config.get("model") or {}
    if "path" not in model:
        raise EngineConfigError(
            "field model.path is missing: this adapter serves weights from a local path "
            f"(file:// or pvc:// model URIs), got model {model!r}"
        )
    model_config: dict[str, Any] = (config.get("mindformers") or {}).get("model_config") or {}
    overrides = {k: float(model_config[k]) for k in CONFIG_KEYS if k in model_config}
    notes = []
    if model_config.get("use_past"):
        # The CPU path recomputes the whole sequence each step: the same arithmetic as
        # incremental inference, without the KV-cache kernels CPU MindSpore lacks.
        notes.append("use_past requested: on CPU each decode step recomputes the full sequence")
    return ServeSettings(
        model=Path(str(model["path"])),
        dtype=str(_required(config, "dtype")),
        max_model_len=int(config["maxModelLen"]) if "maxModelLen" in config else None,
        seed=int(config.get("seed", 42)),
        served_model_name=config.get("servedModelName"),
        overrides=overrides,
        notes=notes,
    )


@dataclass(frozen=True)
class StandInSettings:
    """What the transformers stand-in of a vLLM side loads, from its pinned engine.json."""

    model: Path
    dtype: str
    overrides: dict[str, float]
    served_model_name: str
    max_model_len: int | None
    seed: int


def stand_in_settings(config: dict[str, Any]) -> StandInSettings:
    """The vLLM revision's model path, dtype and numeric overrides, for the stand-in.

    Fails closed: an override the transformers reference cannot apply (anything but
    CONFIG_KEYS) would make its layers differ from the side's for a reason of our own,
    so it is refused, naming the key, rather than dropped.
    """
    model = _vllm_model_dir(
        config,
        "the stand-in answers for vllm revisions (the adapters answer the layer probe themselves)",
        "the stand-in loads the weights from the mounted model directory",
    )
    pinned = config.get("hfOverrides") or {}
    unknown = sorted(k for k in pinned if k not in CONFIG_KEYS)
    if unknown:
        raise EngineConfigError(
            f"field hfOverrides: {', '.join(unknown)} cannot be applied by the transformers "
            f"stand-in (it applies {', '.join(CONFIG_KEYS)})"
        )
    return StandInSettings(
        model=model,
        dtype=str(_required(config, "dtype")),
        overrides={k: float(v) for k, v in pinned.items()},
        served_model_name=str(_required(config, "servedModelName")),
        max_model_len=int(config["maxModelLen"]) if "maxModelLen" in config else None,
        seed=int(config.get("seed", 42)),
    )
