"""A real S3-compatible server on 127.0.0.1 for tests: Versity S3 Gateway over a temp dir.

The binary is built from its Go module by hack/build-s3.sh (cached by version under
$INFERGATE_CACHE/bin); `$INFERGATE_S3_SERVER` names it (mk/golden.mk sets it). Each
server gets a free port, its own data and metadata folders and random root keys passed
in its environment (never on the command line), and is stopped, by its own pid, after.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

import pytest

from tests.harness import REPO, ServerProcess

VERSITYGW_VERSION = "v1.8.0"
START_TIMEOUT_S = 30.0


def server_binary() -> Path:
    named = os.environ.get("INFERGATE_S3_SERVER")
    if named:
        return Path(named)
    cache = Path(os.environ.get("INFERGATE_CACHE", Path.home() / ".cache" / "infergate"))
    return cache / "bin" / f"versitygw-{VERSITYGW_VERSION}" / "versitygw"


def build_server(timeout: float = 1800.0) -> Path:
    """Build (or find cached) the server binary; needs Go and the module proxy."""
    binary = server_binary()
    if not binary.exists():
        subprocess.run(
            [str(REPO / "hack" / "build-s3.sh")],
            check=True,
            timeout=timeout,
            env={**os.environ, "VERSITYGW_VERSION": VERSITYGW_VERSION},
        )
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class S3Server(ServerProcess):
    """One running gateway; a context manager that stops it."""

    binary: Path
    root: Path
    access_key: str = ""
    secret_key: str = ""
    port: int = 0
    _process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def credentials_env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def start(self) -> Self:
        data, meta = self.root / "data", self.root / "meta"
        data.mkdir(parents=True, exist_ok=True)
        meta.mkdir(parents=True, exist_ok=True)
        self.access_key = "golden" + secrets.token_hex(4)
        self.secret_key = secrets.token_hex(16)
        self.port = _free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root),
            "ROOT_ACCESS_KEY_ID": self.access_key,
            "ROOT_SECRET_ACCESS_KEY": self.secret_key,
        }
        self._log = (self.root / "server.log").open("wb")
        self._process = subprocess.Popen(
            [
                str(self.binary),
                "--port",
                f"127.0.0.1:{self.port}",
                "--quiet",
                "posix",
                "--sidecar",
                str(meta),
                str(data),
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"S3 server exited {self._process.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"S3 server did not listen within {START_TIMEOUT_S}s: {self.log()}")

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@contextmanager
def running_server(root: Path) -> Iterator[S3Server]:
    """A started server for a test module: built first if Go is here, else the module is
    skipped (failed under INFERGATE_REQUIRE_S3=1)."""
    if not server_binary().exists():
        if shutil.which("go") is None:
            reason = "no S3 server binary and no Go to build it (make s3-server)"
            if os.environ.get("INFERGATE_REQUIRE_S3") == "1":
                pytest.fail(reason)
            pytest.skip(reason)
        build_server()
    with S3Server(server_binary(), root) as server:
        yield server
