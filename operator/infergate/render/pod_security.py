"""What an engine pod runs as, and which Pod Security level admits it.

Every engine pod drops every capability, forbids privilege escalation and uses the
runtime's default seccomp profile. Beyond that, per engine:

- **vLLM** runs as a fixed non-root user (`ENGINE_UID`:`ENGINE_GID`, the user of
  infergate's own vLLM image; the upstream `vllm/vllm-openai` image has no user of its own
  and runs as root unless told otherwise). Whatever vLLM and the libraries under it
  write goes to an emptyDir mounted at `ENGINE_HOME`, named by the variables in
  `CACHE_ENV`: HOME (Triton's ~/.triton), XDG_* (Hugging Face, vLLM's caches and config
  under ~/.cache and ~/.config), and the torch.compile cache, whose default
  /tmp/torchinductor_<user> asks for a user name the upstream image does not have.
  Such a pod meets the `restricted` Pod Security level.
- **MindFormers** runs as the image's own non-root user: infergate's MindFormers image
  sets `USER` to the Ascend driver's HwHiAiUser (1000:1000 unless the image was built
  with `ASCEND_UID`/`ASCEND_GID` to match nodes whose driver uses another), which owns
  the device nodes; a uid pinned here would break such nodes. The pod mounts the node's
  Ascend driver, dcmi and npu-smi read-only through hostPath (`render.accelerators`):
  the one exception, and `baseline` forbids every hostPath, so only a `privileged`
  namespace admits it.
- A `file://` model (any engine) mounts its node directory through hostPath: the same
  exception, for the same reason; `pvc://`, `hf://` and `s3://` models need none.

`pod_security_level` states the level a rendered pod needs; docs/pod-security.md lists
it per pod and tests/integration/test_pod_security.py checks it on the API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from infergate.api.enums import EngineKind
from infergate.render.images import runs_as_non_root

ENGINE_UID = 1000
ENGINE_GID = 1000
HOME_VOLUME = "engine-home"
ENGINE_HOME = "/home/infergate"
"""The writable home of a vLLM engine container: an emptyDir, so a cache never outlives
the pod (and never fills the node's image filesystem)."""

CACHE_ENV: tuple[tuple[str, str], ...] = (
    ("HOME", ENGINE_HOME),
    ("XDG_CACHE_HOME", f"{ENGINE_HOME}/.cache"),
    ("XDG_CONFIG_HOME", f"{ENGINE_HOME}/.config"),
    ("TORCHINDUCTOR_CACHE_DIR", f"{ENGINE_HOME}/.cache/torchinductor"),
)
"""Where vLLM, Hugging Face, torch.compile and Triton write (vllm/envs.py:
VLLM_CACHE_ROOT = $XDG_CACHE_HOME/vllm, VLLM_CONFIG_ROOT = $XDG_CONFIG_HOME/vllm;
huggingface_hub: HF_HOME = $XDG_CACHE_HOME/huggingface; Triton: ~/.triton; torch:
TORCHINDUCTOR_CACHE_DIR, else /tmp/torchinductor_<user name>)."""


class PodSecurityLevel(StrEnum):
    """The Kubernetes Pod Security Standards, from most to least strict."""

    RESTRICTED = "restricted"
    BASELINE = "baseline"
    PRIVILEGED = "privileged"


def runs_as_fixed_user(engine: EngineKind) -> bool:
    """Whether the engine's pods run as `ENGINE_UID` with their caches on an emptyDir."""
    return engine is EngineKind.VLLM


def container_security() -> dict[str, Any]:
    """Every engine container: no privilege escalation, no capability (devices come from
    the accelerator's device plugin, the Ascend driver through read-only mounts)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_security(engine: EngineKind, image: str) -> dict[str, Any]:
    """The pod's securityContext: seccomp RuntimeDefault everywhere; vLLM as `ENGINE_UID`;
    MindFormers as its image's own non-root user where the image is one of infergate's
    (another image may expect root, and its user is not known here)."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if runs_as_fixed_user(engine):
        context |= {
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "runAsGroup": ENGINE_GID,
            # Volumes that honour fsGroup (the emptyDir, a writable claim) belong to the
            # engine's group; only at the root when it differs, never a recursive chown of
            # a model volume on every start.
            "fsGroup": ENGINE_GID,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
    elif runs_as_non_root(image):
        context["runAsNonRoot"] = True
    return context


def home_volume(engine: EngineKind) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The writable home's volume and mount (none for an engine that keeps its image's)."""
    if not runs_as_fixed_user(engine):
        return [], []
    return (
        [{"name": HOME_VOLUME, "emptyDir": {}}],
        [{"name": HOME_VOLUME, "mountPath": ENGINE_HOME}],
    )


def cache_env(engine: EngineKind, taken: set[str]) -> list[dict[str, Any]]:
    """The cache variables of `CACHE_ENV`, less the ones already `taken` (the model's
    HF_HOME, or one the spec's engine.env sets)."""
    if not runs_as_fixed_user(engine):
        return []
    return [{"name": name, "value": value} for name, value in CACHE_ENV if name not in taken]


def pod_security_level(pod_spec: Mapping[str, Any]) -> PodSecurityLevel:
    """The strictest Pod Security level whose checks the rendered pod passes, for the
    checks a rendered pod can fail: hostPath volumes (baseline), and user, escalation,
    capabilities and seccomp (restricted). Not a full policy engine: the API server's
    own admission is the judge (tests/integration/test_pod_security.py)."""
    if any("hostPath" in volume for volume in pod_spec.get("volumes") or []):
        return PodSecurityLevel.PRIVILEGED
    pod = pod_spec.get("securityContext") or {}
    containers = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    for container in containers:
        own = container.get("securityContext") or {}
        non_root = own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True
        seccomp = (own.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        dropped = (own.get("capabilities") or {}).get("drop") or []
        if (
            not non_root
            or own.get("runAsUser", pod.get("runAsUser")) == 0
            or own.get("allowPrivilegeEscalation") is not False
            or "ALL" not in dropped
            or seccomp not in ("RuntimeDefault", "Localhost")
        ):
            return PodSecurityLevel.BASELINE
    return PodSecurityLevel.RESTRICTED
