"""The adapter server takes what to serve from the revision's pinned engine.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infergate.api.inference_deployment import InferenceDeployment
from infergate.render.objects import render_revision
from infergate.runtime.engine_config import EngineConfigError, serve_settings

EXAMPLE = Path(__file__).resolve().parents[3] / "manifests/examples/mindformers-ascend.yaml"


def _engine_json(config: dict[str, Any]) -> dict[str, Any]:
    import json

    import yaml

    body = next(
        d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "InferenceDeployment"
    )
    body["spec"]["model"]["uri"] = "file:///models/tiny"
    body["spec"]["engine"]["config"] = config
    spec = InferenceDeployment.model_validate(body).spec
    objects = render_revision("m", "default", spec)
    data: dict[str, Any] = json.loads(next(iter(objects.config_map["data"].values())))
    return data


def test_rendered_engine_json_gives_model_dtype_and_numeric_overrides() -> None:
    settings = serve_settings(_engine_json({"rms_norm_eps": 1e-4}))
    assert settings.model == Path("/models/tiny")
    assert settings.dtype == "bfloat16"  # as the example pins it
    assert settings.overrides == {"rms_norm_eps": 1e-4}
    assert any("use_past" in note for note in settings.notes)


def test_engine_json_without_a_local_path_is_refused_naming_the_field() -> None:
    with pytest.raises(EngineConfigError, match=r"model\.path is missing"):
        serve_settings({"model": {"repository": "Qwen/x"}, "dtype": "float16"})
    with pytest.raises(EngineConfigError, match="dtype is missing"):
        serve_settings({"model": {"path": "/m"}})
