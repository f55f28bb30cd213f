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
"""An engine pod's terminationGracePeriodSeconds: its preStop hold, then the kubelet's
SIGTERM, then what is left to finish the requests in flight before SIGKILL."""
UNROUTE_SECONDS = 5
"""A serving pod's preStop sleep: once deleted it is no longer ready in its EndpointSlices,
but whoever routes to it learns that only when it next reads them (kube-proxy and gateway
controllers through their watches, the mirror every 2 s, `mirror/upstream.py`). A server
that has had SIGTERM refuses new requests (vLLM draining answers them 500), so the
SIGTERM waits this long; the pod keeps serving meanwhile. Kubernetes documents the same
hold for graceful endpoint removal (the `sleep` preStop handler, KEP-3960)."""


def pre_stop_hold() -> dict[str, Any]:
    """A serving container's `lifecycle`: SIGTERM waits `UNROUTE_SECONDS`."""
    return {"preStop": {"sleep": {"seconds": UNROUTE_SECONDS}}}


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
