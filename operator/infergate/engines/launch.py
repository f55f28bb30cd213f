"""Start engine servers as subprocesses from their venvs and wait until they answer.

Used by the engine tests and the experiment; the local cluster's executor can do the
same. Each server runs `python -m infergate.commands.serve ...` with the engine venv's
Python and this checkout's source first on its path, binds to loopback on a free port,
and never reads a hub (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import httpx

from infergate.engines.venvs import engine_environment, engine_python


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class EngineStartError(RuntimeError):
    """A server exited or did not become healthy in time; the message ends with its log."""


@dataclass
class ServerSpec:
    """One engine server to start."""

    engine: str
    model_dir: Path
    dtype: str
    overrides: Mapping[str, float] = field(default_factory=dict)
    probe: bool = False
    """vLLM only: the pooling runner, serving hidden states on /pooling."""
    served_model_name: str = "fixture"
    max_model_len: int | None = None
    seed: int = 42
    kv_cache_gib: int = 1


class EngineServer:
    """A running engine server; a context manager that stops it on exit."""

    def __init__(self, spec: ServerSpec, log_path: Path, *, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.host = host
        self.port = free_port(host)
        self.log_path = log_path
        self.load_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        spec = self.spec
        argv = [
            str(engine_python(spec.engine)), "-m", "infergate.commands.serve",
            "--engine", spec.engine, "--model", str(spec.model_dir), "--dtype", spec.dtype,
            "--host", self.host, "--port", str(self.port),
            "--served-model-name", spec.served_model_name, "--seed", str(spec.seed),
        ]  # fmt: skip
        for key, value in spec.overrides.items():
            argv += ["--config", f"{key}={value!r}"]
        if spec.max_model_len:
            argv += ["--max-model-len", str(spec.max_model_len)]
        if spec.probe:
            argv.append("--probe")
        return argv

    def environment(self) -> dict[str, str]:
        env = engine_environment()
        env.update(
            VLLM_CPU_KVCACHE_SPACE=str(self.spec.kv_cache_gib),
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        # vLLM binds its OpenMP threads to core 0 by default: two vLLM servers (serving
        # and pooling) would share one core on a small machine. Let the OS place them.
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        return env

    def start(self, timeout: float = 300.0) -> Self:
        """Start the process and block until /health answers 200."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        started = time.monotonic()
        self._process = subprocess.Popen(
            self.argv(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            start_new_session=True,
        )
        with httpx.Client(timeout=5.0) as http:
            while True:
                code = self._process.poll()
                if code is not None:
                    raise EngineStartError(
                        f"{self.spec.engine} server exited with {code}:\n{self.log_tail()}"
                    )
                try:
                    if http.get(f"{self.url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() - started > timeout:
                    self.stop()
                    raise EngineStartError(
                        f"{self.spec.engine} server not healthy after {timeout:.0f}s:\n"
                        f"{self.log_tail()}"
                    )
                time.sleep(0.5)
        self.load_seconds = time.monotonic() - started
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            # The server runs in its own session: stop its whole group (vLLM forks workers).
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
