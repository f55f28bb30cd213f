"""Default images, pinned: a moving tag would change what runs under one revision."""

from __future__ import annotations

from collections.abc import Sequence

from infergate.api.engine import Engine
from infergate.api.enums import EngineKind

# The operator's own image, which also runs every runner Job: the install sets
# INFERGATE_RUNNER_IMAGE beside the operator's image so the two move together, and a
# check's spec never chooses it.
DEFAULT_RUNNER_IMAGE = "ghcr.io/infergate/infergate:0.1.0"
RUNNER_IMAGE_ENV = "INFERGATE_RUNNER_IMAGE"

DEFAULT_IMAGES: dict[EngineKind, str] = {
    EngineKind.VLLM: "vllm/vllm-openai:v0.32.0",
    EngineKind.MINDFORMERS: "ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0",
}


# Images built from runtime_images/, which set a non-root USER.
OWN_IMAGE_PREFIX = "ghcr.io/infergate/"


def runs_as_non_root(image: str) -> bool:
    """Whether the image is one of infergate's own (they run as a non-root user)."""
    return image.startswith(OWN_IMAGE_PREFIX)


def resolved_image(engine: Engine) -> str:
    """The image the engine runs: the one given, or the engine kind's default."""
    return engine.image if engine.image is not None else DEFAULT_IMAGES[engine.kind]


def pull_secret_refs(names: Sequence[str]) -> list[dict[str, str]]:
    """`imagePullSecrets` entries for Secrets of the pod's namespace, by name."""
    return [{"name": name} for name in names]
