"""From a pod spec to what one container process needs (pure)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from infergate.jsontypes import JSON

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


class PodSpecError(ValueError):
    """The pod asks for something the executor cannot give it."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: `$$` escapes, unknown references stay as written."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(substitute, text)


def _field_ref(pod: JSON, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            key = path[len(prefix) + 2 : -2]
            return str((meta.get(source) or {}).get(key, ""))
    raise PodSpecError(f"fieldRef {path!r} is not supported by the local executor")


def _resource_ref(container: JSON, ref: JSON) -> str:
    resources = container.get("resources") or {}
    kind, _, name = ref["resource"].partition(".")
    value = (resources.get(kind) or {}).get(name)
    return str(value) if value is not None else "0"


@dataclass
class Lookup:
    """ConfigMaps and Secrets of the pod's namespace, by name (Secret data is base64)."""

    configmaps: dict[str, JSON] = field(default_factory=dict)
    secrets: dict[str, JSON] = field(default_factory=dict)


def container_env(
    pod: JSON, container: JSON, lookup: Lookup, base: dict[str, str]
) -> dict[str, str]:
    """The environment of one container: base, then envFrom, then env, in order."""
    import base64

    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            cm = lookup.configmaps.get(source["configMapRef"]["name"])
            data = (cm or {}).get("data") or {}
        else:
            secret = lookup.secrets.get(source["secretRef"]["name"])
            raw = (secret or {}).get("data") or {}
            data = {k: base64.b64decode(v).decode() for k, v in raw.items()}
        env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand(var["value"], env)
            continue
        source = var.get("valueFrom") or {}
        if "fieldRef" in source:
            env[name] = _field_ref(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = _resource_ref(container, source["resourceFieldRef"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            value = ((lookup.configmaps.get(ref["name"]) or {}).get("data") or {}).get(ref["key"])
            if value is None and not ref.get("optional"):
                raise PodSpecError(f"env {name}: ConfigMap {ref['name']} key {ref['key']} missing")
            if value is not None:
                env[name] = value
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            raw_value = ((lookup.secrets.get(ref["name"]) or {}).get("data") or {}).get(ref["key"])
            if raw_value is None and not ref.get("optional"):
                raise PodSpecError(f"env {name}: Secret {ref['name']} key {ref['key']} missing")
            if raw_value is not None:
                env[name] = base64.b64decode(raw_value).decode()
        else:
            env[name] = ""
    return env


@dataclass(frozen=True)
class ImageEnvironment:
    """Where an image's programs come from on this machine."""

    pattern: str
    venv: Path | None = None
    entrypoint: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()


def image_environment(image: str, table: list[ImageEnvironment]) -> ImageEnvironment:
    for entry in table:
        if fnmatch.fnmatchcase(image, entry.pattern):
            return entry
    raise PodSpecError(
        f"image {image!r} maps to no local environment; add a pattern to executor.yaml "
        f"(known: {', '.join(e.pattern for e in table)})"
    )


def container_argv(container: JSON, image_env: ImageEnvironment, env: dict[str, str]) -> list[str]:
    """The command line as Kubernetes builds it: command overrides the entrypoint."""
    command = list(container.get("command") or image_env.entrypoint)
    args = list(container.get("args") or [])
    argv = [expand(part, env) for part in command + args]
    if not argv:
        raise PodSpecError(
            f"container {container['name']!r} has no command and image "
            f"{container.get('image')!r} maps to no entrypoint"
        )
    return argv


def image_process_env(image_env: ImageEnvironment, system_path: str) -> dict[str, str]:
    """What an image's local environment puts in its processes' environment: the venv's
    programs first on PATH, VIRTUAL_ENV, and the table's own variables."""
    if image_env.venv is None:
        return {"PATH": system_path, **dict(image_env.extra_env)}
    return {
        "PATH": f"{image_env.venv / 'bin'}:{system_path}",
        **dict(image_env.extra_env),
        "VIRTUAL_ENV": str(image_env.venv),
    }


def resolve_port(container: JSON, port: int | str) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise PodSpecError(f"container {container['name']!r} has no port named {port!r}")


def pre_stop_sleep(container: JSON) -> float:
    """Seconds of the container's `lifecycle.preStop.sleep` hook; 0 without one.

    The only handler the executor runs: `exec` and `httpGet` handlers are not run (the
    caller says so in its log), and the container is stopped without waiting.
    """
    hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
    seconds = hook.get("seconds")
    return float(seconds) if isinstance(seconds, int) and seconds > 0 else 0.0
