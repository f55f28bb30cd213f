"""The transformers stand-in that answers the per-layer probe for a vLLM side (pure).

vLLM returns only its last layer, so when a check with a vLLM side fails, the runner
asks a transformers reference loaded with the side's weights, dtype and numeric
overrides for every layer's states instead (`infergate.parity.layers.layer_probe_plan`),
and the report says so.

Where it runs: a third container of the side's probe pod, beside the engine (pooling
runner) and the fingerprint server. The probe pod is already the revision's own pod
template, so the stand-in gets, with nothing new to validate:

- the model volume the engine pods mount (made from `spec.model.uri` by the same
  validated path as every engine pod: `render.model_weights`), read-only;
- the revision's pinned engine.json (the very dtype and overrides that were hashed),
  from which `infergate layer-stand-in` takes the model path, dtype and overrides;
- the engine pods' placement, pod securityContext and no service account token.

The probe pod lives exactly as long as its check, and the runner already resolves it by
its Service, so the stand-in adds one container and one Service port, and no object, no
RBAC and no scheduling of its own. A sidecar of the runner Job was the other shape; it
would need the model volume in the runner pod (which holds the API token) and pvc
claims that allow a second node. The stand-in loads the model only on its first probe
request, so a check that passes pays for an idle process, not for a second model.

It runs on CPU (no accelerator requested; GPUs hidden) in the image of the side's vLLM
with the infergate runtime (torch and transformers come with vLLM): our own engine
image as given, or for the upstream `vllm/vllm-openai:vX` its infergate build
`ghcr.io/infergate/engine-vllm:X` (runtime_images/vllm/Dockerfile). Where neither
holds, or where the weights are not a mounted directory (hf:// and s3:// weights are
fetched by vLLM itself), no stand-in is started and the probe Service's annotation says
why, so the report can too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from infergate.api.base import GROUP
from infergate.jsontypes import JSON
from infergate.render.images import OWN_IMAGE_PREFIX
from infergate.render.launch import CONFIG_PATH, POD_IP_REF
from infergate.render.model_weights import MODEL_VOLUME
from infergate.render.objects import SHM_VOLUME

LAYERS_CONTAINER: Final = "layers"
LAYERS_PORT: Final = 8002
LAYERS_PORT_NAME: Final = "layers"
ANNOTATION_LAYER_STAND_IN: Final = f"{GROUP}/layer-stand-in"
"""On a probe Service: "transformers" when the stand-in runs, else why it does not."""
STAND_IN_RUNS: Final = "transformers"
ENGINE_VLLM_IMAGE: Final = f"{OWN_IMAGE_PREFIX}engine-vllm"
_UPSTREAM_VLLM = re.compile(
    r"^(?:docker\.io/)?vllm/vllm-openai:v(?P<version>[0-9][0-9A-Za-z.\-]*)$"
)
_OFFLINE: Final = (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    # CPU only: no GPU request, and none seen even where the image asks for all of them.
    ("NVIDIA_VISIBLE_DEVICES", "void"),
    ("CUDA_VISIBLE_DEVICES", ""),
)
_REQUESTS: Final = {"cpu": "100m", "memory": "256Mi"}


def stand_in_image(engine_image: str) -> str | None:
    """The image the stand-in runs in: the side's own vLLM with the infergate runtime.

    Our engine image carries it; the upstream vLLM image of a version maps to our build
    of that version. Anything else (another registry, a digest) is not known to hold
    infergate, torch and transformers together: None.
    """
    if engine_image.startswith(f"{ENGINE_VLLM_IMAGE}:"):
        return engine_image
    match = _UPSTREAM_VLLM.match(engine_image)
    if match is None:
        return None
    return f"{ENGINE_VLLM_IMAGE}:{match['version']}"


@dataclass(frozen=True)
class StandInDecision:
    """Whether a vLLM side's probe pod gets the stand-in: its image, or why not."""

    image: str | None
    why_not: str | None

    @property
    def annotation(self) -> str:
        return STAND_IN_RUNS if self.image is not None else f"none: {self.why_not}"


def _engine_container(pod_spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    containers = pod_spec.get("containers") or []
    return next((c for c in containers if c.get("name") == name), containers[0])


def decide_stand_in(pod_spec: Mapping[str, Any], engine_container: str) -> StandInDecision:
    """From a vLLM revision's pod spec: the stand-in's image, or why it cannot run."""
    engine = _engine_container(pod_spec, engine_container)
    volumes = pod_spec.get("volumes") or []
    model: Mapping[str, Any] = next((v for v in volumes if v.get("name") == MODEL_VOLUME), {})
    if "persistentVolumeClaim" not in model and "hostPath" not in model:
        return StandInDecision(
            None,
            "the weights are not a mounted directory (hf:// and s3:// weights are fetched by "
            "vLLM itself; the stand-in loads pvc:// or file:// weights)",
        )
    image = stand_in_image(str(engine.get("image") or ""))
    if image is None:
        return StandInDecision(
            None,
            f"image {engine.get('image')!r} is not known to carry the infergate runtime with "
            f"torch and transformers (give vllm/vllm-openai:vX or {ENGINE_VLLM_IMAGE}:X)",
        )
    return StandInDecision(image, None)


def _memory_limit(engine: Mapping[str, Any]) -> str | None:
    limit = ((engine.get("resources") or {}).get("limits") or {}).get("memory")
    return str(limit) if limit is not None else None


def stand_in_container(engine: Mapping[str, Any], image: str) -> JSON:
    """The stand-in beside a vLLM engine: its pinned engine.json and model, read-only.

    Its memory limit is the engine's (the same weights must fit in host memory, which
    vLLM also loads them through); its securityContext the engine's, tightened.
    """
    mounts = [m for m in engine.get("volumeMounts") or [] if m.get("name") != SHM_VOLUME]
    security = dict(engine.get("securityContext") or {})
    security.update(
        {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
    )
    resources: JSON = {"requests": dict(_REQUESTS)}
    memory = _memory_limit(engine)
    if memory is not None:
        resources["limits"] = {"memory": memory}
    return {
        "name": LAYERS_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["infergate"],
        "args": [
            "layer-stand-in",
            "--engine-config",
            CONFIG_PATH,
            "--host",
            POD_IP_REF,
            "--port",
            str(LAYERS_PORT),
        ],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            *({"name": k, "value": v} for k, v in _OFFLINE),
        ],
        "ports": [{"name": LAYERS_PORT_NAME, "containerPort": LAYERS_PORT, "protocol": "TCP"}],
        "volumeMounts": [{**m, "readOnly": True} for m in mounts],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": LAYERS_PORT_NAME},
            "periodSeconds": 5,
        },
        "resources": resources,
        "securityContext": security,
    }
