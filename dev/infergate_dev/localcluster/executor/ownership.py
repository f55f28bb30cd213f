"""Which processes belong to a container, a pod or a whole cluster of the executor.

A container's process group is not all of it. Ray's workers (ray::IDLE, and the actors
they become, vLLM's RayWorkerWrapper among them) run in process groups of their own;
`ray start` leaves its node's daemons (gcs_server, raylet, the dashboard and its agents)
running after it exits; a leader whose engine ended on its own had nothing of its Ray
killed; and once a pod's directory is gone, `localcluster down` found nothing of it. A
kubelet has the container's cgroup for this; here two marks stand in for it:

- the environment: every container process is started with MARK, the container's path
  under its pod's working directory (`<cluster>/pods/<uid>/<container>`), which every
  process it starts inherits, in whatever group or session;
- the mount namespace: a container with volumes runs in a mount namespace of its own
  (launch.py), which its launcher declares in MOUNT_NS. Every process started in it stays
  in it, even one that overwrites its environment, as Ray's agents do when they set their
  process title (`ray::DashboardAgent`: /proc/<pid>/environ reads as zeros).

A process is the scope's when its mark lies within the scope, or when it shares the mount
namespace that such a process both declares and is in: never the namespace this machine's
processes share (a container without volumes declares none, and the caller's own is
refused), and never one of another cluster. The mark names the cluster's directory and
the pod's uid, so it never matches a process of another checkout's cluster on the same
machine, which neither an address (pod IPs repeat across checkouts and over time) nor
Ray's temp dir (/tmp/ray in every group pod's private /tmp) would ensure.

Pure: `owned_pids` decides from a process table; `kill_owned` reads the table from /proc
and signals, nothing more.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MARK = "INFERGATE_EXECUTOR_CONTAINER"
"""The environment variable every container process carries: its container's path."""
MOUNT_NS = "INFERGATE_EXECUTOR_MOUNT_NS"
"""The mount namespace a container's launcher made for it (`mnt:[inode]`), if it made one."""

_ROUNDS = 5
"""Scans of the process table per kill: a process forking while the table is read leaves
a child the scan missed, which inherits the marks and is found by the next one."""
_ROUND_PAUSE = 0.05


@dataclass(frozen=True)
class Seen:
    """A process as /proc shows it."""

    environ: bytes
    """/proc/<pid>/environ: NUL-separated KEY=VALUE; empty or zeros when unreadable."""
    mount_ns: str | None
    """The link /proc/<pid>/ns/mnt, `mnt:[inode]`; None when unreadable."""


def container_mark(pod_dir: Path, container: str) -> str:
    """The mark of a container of the pod whose working directory is `pod_dir`."""
    return str(pod_dir.resolve() / container)


def env_value(environ: bytes, name: str) -> str | None:
    """The value of `name` in the contents of /proc/<pid>/environ, if set."""
    prefix = name.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def _within(mark: str | None, scope: PurePosixPath) -> bool:
    if mark is None:
        return False
    path = PurePosixPath(mark)
    # Only marks as the executor writes them: absolute, no `..` that would leave the scope.
    if not path.is_absolute() or ".." in path.parts:
        return False
    return path == scope or path.is_relative_to(scope)


def owned_pids(
    table: Mapping[int, Seen],
    scope: Path,
    *,
    own_ns: str | None,
    held: frozenset[str] = frozenset(),
) -> list[int]:
    """The pids of `scope`: those whose mark is `scope` or lies under it (a container's
    mark for that container, a pod's working directory for every container of the pod,
    the cluster's pods directory for every pod of the cluster), and those in the mount
    namespace of a container so marked, or in one of `held` (the namespaces of the scope's
    containers the executor holds open); never in `own_ns` (the caller's, which the
    executor and containers without volumes share with the rest of the machine). `scope`
    is absolute and resolved."""
    root = PurePosixPath(scope)
    marked = {pid for pid, seen in table.items() if _within(env_value(seen.environ, MARK), root)}
    namespaces = {
        ns
        for pid in marked
        if (ns := table[pid].mount_ns) is not None and env_value(table[pid].environ, MOUNT_NS) == ns
    } | held
    if own_ns is not None:
        namespaces.discard(own_ns)
    return sorted(
        pid
        for pid, seen in table.items()
        if pid in marked or (seen.mount_ns is not None and seen.mount_ns in namespaces)
    )


@dataclass(frozen=True)
class HeldNamespace:
    """A container's mount namespace, held open: its inode, and so its name, is not
    given to another namespace while held, though every process in it may have ended."""

    fd: int
    name: str
    """`mnt:[inode]`, as /proc/<pid>/ns/mnt links read."""

    def release(self) -> None:
        os.close(self.fd)


def hold_namespace(pid: int) -> HeldNamespace | None:
    """The mount namespace `pid` (the caller's unreaped child, a container's main process)
    declares as its container's and is in, held open; None while its launcher has not yet
    started the container's command, or where the container has no namespace of its own."""
    try:
        declared = env_value(Path(f"/proc/{pid}/environ").read_bytes(), MOUNT_NS)
        if declared is None:
            return None
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    except OSError:
        return None
    name = f"mnt:[{os.fstat(fd).st_ino}]"
    if name != declared:
        os.close(fd)
        return None
    return HeldNamespace(fd, name)


def mount_namespace(pid: int | str = "self") -> str | None:
    """The mount namespace `pid` is in, as its /proc link names it (None: unreadable)."""
    try:
        return str(Path(f"/proc/{pid}/ns/mnt").readlink())
    except OSError:
        return None


def _seen(pid: int) -> Seen | None:
    # Both are readable for this user's processes only; a zombie has neither left.
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        environ = b""
    mount_ns = mount_namespace(pid)
    return Seen(environ, mount_ns) if environ or mount_ns else None


def process_table() -> dict[int, Seen]:
    """Every process this user may read, but this one."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            seen = _seen(int(entry.name))
            if seen is not None:
                table[int(entry.name)] = seen
    return table


def _kill_if_owned(
    pid: int,
    table: Mapping[int, Seen],
    scope: Path,
    own_ns: str | None,
    held: frozenset[str],
) -> bool:
    """SIGKILL `pid` if it is still a process of `scope`: held by a pidfd while it is read
    again, so a pid reused since the scan is never signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        seen = _seen(pid)
        again = {**table, pid: seen} if seen is not None else {}
        if pid not in owned_pids(again, scope, own_ns=own_ns, held=held):
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            return True
        return False
    finally:
        os.close(pidfd)


def kill_owned(scope: Path, held: frozenset[str] = frozenset()) -> int:
    """SIGKILL every process of `scope` (see `owned_pids`), as a container runtime kills
    what is left in a container's cgroup; how many were killed."""
    scope = scope.resolve()
    own_ns = mount_namespace()
    killed: set[int] = set()
    for _ in range(_ROUNDS):
        table = process_table()
        pids = owned_pids(table, scope, own_ns=own_ns, held=held)
        if not pids:
            break
        killed.update(pid for pid in pids if _kill_if_owned(pid, table, scope, own_ns, held))
        time.sleep(_ROUND_PAUSE)
    return len(killed)
