"""Where each engine's venv is (built by `make engine-venvs`, see mk/engines.mk).

The Makefile exports INFERGATE_VLLM_VENV and INFERGATE_MINDFORMERS_VENV; without them
the defaults below match the Makefile's cache paths. The venvs are shared by every
checkout on the machine and hold no trace of one: a process started from a venv gets
this checkout's source through PYTHONPATH (`engine_environment`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import infergate
from infergate.fixture.generate import default_cache_root

SOURCE_ROOT = Path(infergate.__file__).resolve().parent.parent
"""The directory holding this checkout's `infergate` package (operator/)."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

ENGINES: tuple[str, ...] = ("vllm", "mindformers", "transformers")

_DEFAULT_VENVS = {
    "vllm": "vllm-0.32.0-torch2.13.0-r1",
    "mindformers": "mindformers-1.9.0-ms2.9.0-r2",
}
_ENV_VARS = {"vllm": "INFERGATE_VLLM_VENV", "mindformers": "INFERGATE_MINDFORMERS_VENV"}


class EngineVenvError(RuntimeError):
    """An engine venv is missing; the message says how to build it."""


def engine_venv(engine: str) -> Path:
    """The venv that runs `engine` (transformers lives in the vLLM venv)."""
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r}; allowed: {', '.join(ENGINES)}")
    key = "vllm" if engine == "transformers" else engine
    configured = os.environ.get(_ENV_VARS[key])
    return Path(configured) if configured else default_cache_root() / "venvs" / _DEFAULT_VENVS[key]


def engine_python(engine: str) -> Path:
    """The Python interpreter of `engine`'s venv; raises when the venv is not installed."""
    python = engine_venv(engine) / "bin" / "python"
    if not python.exists():
        raise EngineVenvError(
            f"engine {engine!r}: no venv at {python.parent.parent}; run `make engine-venvs`"
        )
    return python


def engine_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) for a process run from an engine venv:
    this checkout's source first on PYTHONPATH, and the model hubs offline."""
    env = dict(os.environ if base is None else base)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{SOURCE_ROOT}{os.pathsep}{path}" if path else str(SOURCE_ROOT)
    env.update(OFFLINE)
    return env
