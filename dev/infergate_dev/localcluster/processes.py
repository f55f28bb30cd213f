"""Background processes of the local cluster: start, find, stop exactly ours.

Every process `up` starts is recorded in `run/<name>.json` with its pid and
command line; `down` stops a pid only while `/proc/<pid>/cmdline` still shows
that command, so a recycled pid is never killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    pid: int
    argv: tuple[str, ...]


def _record(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.json"


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return tuple(p.decode(errors="replace") for p in parts)


def _is_ours(proc: ManagedProcess) -> bool:
    cmd = _cmdline(proc.pid)
    if cmd is None:
        return False
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and cmd == proc.argv


def load(run_dir: Path, name: str) -> ManagedProcess | None:
    path = _record(run_dir, name)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return ManagedProcess(name=name, pid=int(data["pid"]), argv=tuple(data["argv"]))


def running(run_dir: Path, name: str) -> ManagedProcess | None:
    """The recorded process if it is still alive and still ours."""
    proc = load(run_dir, name)
    return proc if proc is not None and _is_ours(proc) else None


def start(
    run_dir: Path,
    log_dir: Path,
    name: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start `argv` detached (own session), logging to `log_dir/<name>.log`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"{name}.log").open("ab") as log:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    proc = ManagedProcess(name=name, pid=popen.pid, argv=tuple(argv))
    _record(run_dir, name).write_text(json.dumps({"pid": proc.pid, "argv": list(proc.argv)}))
    return proc


def stop(run_dir: Path, name: str, *, grace: float = 10.0) -> bool:
    """Stop the recorded process group of `name`; True if something was stopped."""
    proc = load(run_dir, name)
    _record(run_dir, name).unlink(missing_ok=True)
    if proc is None or not _is_ours(proc):
        return False
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _is_ours(proc):
            return True
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)
