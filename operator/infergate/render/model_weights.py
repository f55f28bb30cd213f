"""How an engine container reaches the model weights named by `spec.model.uri`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infergate.api.model_uri import ModelLocation, UriScheme

MODEL_VOLUME = "model"
MODELS_DIR = "/models"
HF_HOME = f"{MODELS_DIR}/.hf"


@dataclass(frozen=True)
class ModelWeights:
    """Volumes and mounts that expose the weights, and the reference an engine loads."""

    # A filesystem path, a Hub repository id, or an s3:// URI.
    reference: str
    location: ModelLocation
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    env: tuple[dict[str, Any], ...] = field(default=())


def model_weights(location: ModelLocation, uri: str) -> ModelWeights:
    """Weights from a PVC or host path are mounted read-only; Hub downloads get a cache dir."""
    if location.scheme is UriScheme.PVC:
        path = f"{MODELS_DIR}/{location.path}" if location.path else MODELS_DIR
        return ModelWeights(
            reference=path,
            location=location,
            volumes=(
                {
                    "name": MODEL_VOLUME,
                    "persistentVolumeClaim": {"claimName": location.authority, "readOnly": True},
                },
            ),
            mounts=({"name": MODEL_VOLUME, "mountPath": MODELS_DIR, "readOnly": True},),
        )
    if location.scheme is UriScheme.FILE:
        # Mounted at the same path, so the path in the engine's arguments is the node's.
        return ModelWeights(
            reference=location.path,
            location=location,
            volumes=(
                {
                    "name": MODEL_VOLUME,
                    "hostPath": {"path": location.path, "type": "Directory"},
                },
            ),
            mounts=({"name": MODEL_VOLUME, "mountPath": location.path, "readOnly": True},),
        )
    if location.scheme is UriScheme.HF:
        return ModelWeights(
            reference=location.authority,
            location=location,
            volumes=({"name": MODEL_VOLUME, "emptyDir": {}},),
            mounts=({"name": MODEL_VOLUME, "mountPath": MODELS_DIR},),
            env=({"name": "HF_HOME", "value": HF_HOME},),
        )
    return ModelWeights(reference=uri, location=location)
