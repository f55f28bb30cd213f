"""What an engine module tells the pod builder: command, arguments, env and pinned config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.api.engine_env import EnvVar
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.render.model_weights import ModelWeights

HTTP_PORT = 8000
HEALTH_PATH = "/health"
ENGINE_GRACE_SECONDS = 60
"""An engine pod's terminationGracePeriodSeconds: the kubelet's SIGTERM comes first, then
this long to finish the requests in flight before SIGKILL."""
CONFIG_DIR = "/etc/infergate/engine"
CONFIG_KEY = "engine.json"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_KEY}"
# Expanded by the kubelet from the env var of the same name (downward API):
# servers bind the pod's own IP, so pods sharing a host never collide.
POD_IP_REF = "$(POD_IP)"


@dataclass(frozen=True)
class RevisionInput:
    """Everything an engine module needs to render one revision."""

    name: str
    revision: str
    spec: InferenceDeploymentSpec
    image: str
    model: ModelWeights


@dataclass(frozen=True)
class EngineLaunch:
    """An engine's container command and the pinned configuration written to its ConfigMap."""

    command: list[str]
    args: list[str]
    env: list[dict[str, Any]]
    engine_config: dict[str, Any]


def env_value(name: str, value: str) -> dict[str, Any]:
    """A plain `name: value` env var."""
    return {"name": name, "value": value}


def pinned_env(env: Sequence[Mapping[str, Any]], user: Sequence[EnvVar]) -> dict[str, Any]:
    """The engine's environment as the pinned config records it: plain values as they are,
    a Secret-backed variable as its reference (the value never leaves the Secret)."""
    recorded: dict[str, Any] = {item["name"]: item.get("value") for item in env}
    recorded |= {var.name: var.revision_value() for var in user}
    return recorded
