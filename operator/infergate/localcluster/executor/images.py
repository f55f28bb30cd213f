"""The executor's table from image to local environment (executor.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infergate.localcluster.executor.podspec import ImageEnvironment
from infergate.localcluster.layout import cache_dir, repo_root

# Environment every engine process gets here: never reach a model hub.
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def default_table() -> list[dict[str, Any]]:
    """The images infergate renders, mapped to this machine's venvs.

    The engine venv paths are the ones `make engines` installs; the table is
    written once to `.cluster/executor.yaml` and read at every pod start, so
    it can be edited while the cluster runs.
    """
    venvs = cache_dir() / "venvs"
    dev = repo_root() / ".venv"
    return [
        {
            "pattern": "vllm/vllm-openai*",
            "venv": str(_newest(venvs, "vllm-")),
            "entrypoint": ["vllm", "serve"],
            "env": {**_OFFLINE, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"},
        },
        {
            "pattern": "*infergate*mindformers*",
            "venv": str(_newest(venvs, "mindformers-")),
            "entrypoint": ["infergate"],
            "env": dict(_OFFLINE),
        },
        {
            "pattern": "*infergate*",
            "venv": str(dev),
            "entrypoint": ["infergate"],
            "env": dict(_OFFLINE),
        },
        # Plain images (busybox, python, ...) run from the host's own tools.
        {"pattern": "*", "venv": None, "entrypoint": [], "env": {}},
    ]


def _newest(root: Path, prefix: str) -> Path:
    found = sorted(root.glob(prefix + "*")) if root.exists() else []
    return found[-1] if found else root / f"{prefix}missing"


def load(path: Path) -> list[ImageEnvironment]:
    entries = yaml.safe_load(path.read_text()) if path.exists() else None
    if not entries:
        entries = default_table()
    table = []
    for entry in entries:
        venv = entry.get("venv")
        table.append(
            ImageEnvironment(
                pattern=entry["pattern"],
                venv=Path(venv).expanduser() if venv else None,
                entrypoint=tuple(entry.get("entrypoint") or ()),
                extra_env=tuple(sorted((entry.get("env") or {}).items())),
            )
        )
    return table


def write_default(path: Path) -> None:
    if not path.exists():
        path.write_text(
            "# Image -> local environment for the local executor (first match wins).\n"
            + yaml.safe_dump(default_table(), sort_keys=False)
        )
