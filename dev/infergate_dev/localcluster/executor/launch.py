"""Start one container process inside its own mount namespace.

Run as `unshare --mount --propagation private -- python -m
infergate_dev.localcluster.executor.launch SPEC.json`: bind-mounts the pod's
volumes where its spec mounts them (visible to this process tree only), then
replaces itself with the container's command.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
from pathlib import Path

from infergate_dev.localcluster.executor.ownership import MOUNT_NS, mount_namespace

# mount(2) flags (linux/mount.h).
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _sys_mount(source: str | None, target: str, flags: int) -> None:
    code = _LIBC.mount(
        source.encode() if source is not None else None, target.encode(), None, flags, None
    )
    if code != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source or '(remount)'} on {target}: {os.strerror(errno)}")


def _mount(source_fd: int, target: str, read_only: bool) -> None:
    """Bind the file or directory open at `source_fd` on `target` (mount(2) itself: the
    source is reached through the descriptor, whatever was mounted over its path since)."""
    _sys_mount(f"/proc/self/fd/{source_fd}", target, _MS_BIND)
    if read_only:
        _sys_mount(None, target, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    # Every source is opened before the first mount: a group pod's private /tmp, mounted
    # first, would otherwise hide the sources that lie under /tmp (the hosts file and the
    # pod's volumes of a checkout or cache kept there).
    held = [(os.open(m["source"], os.O_PATH), m) for m in spec["mounts"]]
    for fd, mount in held:
        _mount(fd, mount["target"], mount["readOnly"])
        os.close(fd)
    os.chdir(spec.get("cwd") or "/")
    argv: list[str] = spec["argv"]
    env: dict[str, str] = spec["env"]
    own_ns = mount_namespace()
    if own_ns is not None and own_ns != mount_namespace(os.getppid()):
        # Started under `unshare --mount`: this namespace is the container's alone, and
        # marks its processes even where they overwrite their environment (ownership).
        env = {**env, MOUNT_NS: own_ns}
    try:
        # A container command is an argv, run as the kubelet runs it: no shell.
        os.execvpe(argv[0], argv, env)  # noqa: S606
    except OSError as exc:
        # Exit codes as container runtimes give them: 127 not found, 126 not runnable.
        print(f"exec {argv[0]!r} failed: {exc}", file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1])
