"""Paths of the platform tools `make setup` caches (hack/platform-tools.sh): helm,
prometheus, promtool; and Debian's chromium. A test fails, naming the make target,
when one is missing: `make test` installs them, so a missing tool is a setup defect."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tool(name: str) -> Path:
    """helm, prometheus or promtool from the version cache."""
    found = subprocess.run(
        [str(REPO / "hack" / "platform-tools.sh"), "path", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = Path(found)
    if not path.exists():
        pytest.fail(f"no {name} at {path}: run `make platform-tools` (make setup does)")
    return path


def chromium() -> Path:
    """Debian's chromium (`make platform-tools` installs it)."""
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("no chromium on PATH: run `make platform-tools` (make setup does)")
    return Path(found)
