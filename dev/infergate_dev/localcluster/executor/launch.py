"""Start one container process inside its own mount namespace.

Run as `unshare --mount --propagation private -- python -m
infergate_dev.localcluster.executor.launch SPEC.json`: bind-mounts the pod's
volumes where its spec mounts them (visible to this process tree only), then
replaces itself with the container's command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _mount(source: str, target: str, read_only: bool) -> None:
    subprocess.run(["mount", "--bind", source, target], check=True)
    if read_only:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    for mount in spec["mounts"]:
        _mount(mount["source"], mount["target"], mount["readOnly"])
    os.chdir(spec.get("cwd") or "/")
    argv: list[str] = spec["argv"]
    env: dict[str, str] = spec["env"]
    try:
        # A container command is an argv, run as the kubelet runs it: no shell.
        os.execvpe(argv[0], argv, env)  # noqa: S606
    except OSError as exc:
        # Exit codes as container runtimes give them: 127 not found, 126 not runnable.
        print(f"exec {argv[0]!r} failed: {exc}", file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1])
