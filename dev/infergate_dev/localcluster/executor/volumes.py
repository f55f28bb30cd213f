"""Materialise a pod's volumes as local directories, and plan its mounts."""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from infergate.jsontypes import JSON
from infergate_dev.localcluster.executor.podspec import PodSpecError

# Paths a process must keep from the host: mounting over them would break it.
_HOST_ONLY = ("/dev", "/proc", "/sys")


class VolumeSources(Protocol):
    def configmap(self, namespace: str, name: str) -> JSON | None: ...

    def secret(self, namespace: str, name: str) -> JSON | None: ...

    def service_account_token(
        self, pod: JSON, audience: str | None, expiration_seconds: int
    ) -> str: ...


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool

    def as_json(self) -> JSON:
        return {"source": str(self.source), "target": self.target, "readOnly": self.read_only}


def _write(path: Path, content: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode if mode is not None else 0o644)


def _key_items(
    data: dict[str, bytes], items: list[JSON] | None, default_mode: int | None, where: str
) -> list[tuple[str, bytes, int | None]]:
    if not items:
        return [(key, value, default_mode) for key, value in data.items()]
    selected = []
    for item in items:
        if item["key"] not in data:
            raise PodSpecError(f"{where}: key {item['key']!r} not found")
        selected.append((item["path"], data[item["key"]], item.get("mode", default_mode)))
    return selected


def _configmap_data(cm: JSON) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def _secret_data(secret: JSON) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _downward(pod: JSON, items: list[JSON]) -> list[tuple[str, bytes, int | None]]:
    from infergate_dev.localcluster.executor.podspec import _field_ref

    out = []
    for item in items:
        if "fieldRef" not in item:
            continue  # resourceFieldRef files are not needed by anything we run
        if item["fieldRef"]["fieldPath"] in ("metadata.labels", "metadata.annotations"):
            source = pod["metadata"].get(item["fieldRef"]["fieldPath"].split(".")[1]) or {}
            value = "\n".join(f'{k}="{v}"' for k, v in sorted(source.items()))
        else:
            value = _field_ref(pod, item["fieldRef"]["fieldPath"])
        out.append((item["path"], value.encode(), item.get("mode")))
    return out


def _projected(
    pod: JSON, volume: JSON, sources: VolumeSources
) -> list[tuple[str, bytes, int | None]]:
    namespace = pod["metadata"]["namespace"]
    default_mode = volume.get("defaultMode")
    files: list[tuple[str, bytes, int | None]] = []
    for source in volume.get("sources") or []:
        if "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            token = sources.service_account_token(
                pod, spec.get("audience"), int(spec.get("expirationSeconds", 3607))
            )
            files.append((spec["path"], token.encode(), 0o600))
        elif "configMap" in source:
            ref = source["configMap"]
            cm = sources.configmap(namespace, ref["name"])
            if cm is None:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"projected ConfigMap {ref['name']!r} not found")
            files += _key_items(
                _configmap_data(cm), ref.get("items"), default_mode, f"ConfigMap {ref['name']}"
            )
        elif "secret" in source:
            ref = source["secret"]
            secret = sources.secret(namespace, ref["name"])
            if secret is None:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"projected Secret {ref['name']!r} not found")
            files += _key_items(
                _secret_data(secret), ref.get("items"), default_mode, f"Secret {ref['name']}"
            )
        elif "downwardAPI" in source:
            files += _downward(pod, source["downwardAPI"].get("items") or [])
    return files


def materialise(
    pod: JSON, pod_dir: Path, sources: VolumeSources, pvc_root: Path
) -> dict[str, Path | None]:
    """Write each volume under `pod_dir/volumes/`; None for volumes left to the host."""
    namespace = pod["metadata"]["namespace"]
    root = pod_dir / "volumes"
    paths: dict[str, Path | None] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        files: list[tuple[str, bytes, int | None]] = []
        if "configMap" in volume:
            ref = volume["configMap"]
            cm = sources.configmap(namespace, ref["name"])
            if cm is None and not ref.get("optional"):
                raise PodSpecError(f"volume {name!r}: ConfigMap {ref['name']!r} not found")
            if cm is not None:
                files = _key_items(
                    _configmap_data(cm), ref.get("items"), ref.get("defaultMode"), f"volume {name}"
                )
        elif "secret" in volume:
            ref = volume["secret"]
            secret = sources.secret(namespace, ref["secretName"])
            if secret is None and not ref.get("optional"):
                raise PodSpecError(f"volume {name!r}: Secret {ref['secretName']!r} not found")
            if secret is not None:
                files = _key_items(
                    _secret_data(secret), ref.get("items"), ref.get("defaultMode"), f"volume {name}"
                )
        elif "projected" in volume:
            files = _projected(pod, volume["projected"], sources)
        elif "downwardAPI" in volume:
            files = _downward(pod, volume["downwardAPI"].get("items") or [])
        elif "emptyDir" in volume:
            pass
        elif "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            # A host path this machine lacks (an accelerator driver, say) is
            # left out rather than created on the host.
            paths[name] = host if host.exists() else None
            target.rmdir()
            continue
        elif "persistentVolumeClaim" in volume:
            claim = pvc_root / namespace / volume["persistentVolumeClaim"]["claimName"]
            if not claim.exists():
                claim = pvc_root / volume["persistentVolumeClaim"]["claimName"]
            claim.mkdir(parents=True, exist_ok=True)
            paths[name] = claim
            target.rmdir()
            continue
        else:
            kinds = sorted(set(volume) - {"name"})
            raise PodSpecError(f"volume {name!r}: kind {kinds} not supported by the local executor")
        for relative, content, mode in files:
            _write(target / relative, content, mode)
        paths[name] = target
    return paths


def container_mounts(container: JSON, volume_paths: dict[str, Path | None]) -> list[Mount]:
    mounts = []
    for mount in container.get("volumeMounts") or []:
        target = mount["mountPath"]
        if any(target == p or target.startswith(p + "/") for p in _HOST_ONLY):
            continue
        if mount["name"] not in volume_paths:
            raise PodSpecError(f"volumeMount {mount['name']!r} names no volume of the pod")
        source = volume_paths[mount["name"]]
        if source is None:
            continue
        if mount.get("subPath"):
            source = source / mount["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append(Mount(source, target, bool(mount.get("readOnly"))))
    return mounts


def remove_pod_dir(pod_dir: Path) -> None:
    if pod_dir.exists():
        shutil.rmtree(pod_dir, ignore_errors=True)


def ensure_mount_point(mount: Mount) -> None:
    """The mount point must exist on the shared filesystem (it stays empty there)."""
    target = Path(mount.target)
    if mount.source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    elif not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
