"""The layering `make lint` enforces (import-linter contracts in pyproject.toml): kept by
the code as it is, and broken by a deliberate violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(workdir: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the copy in `workdir`: the product and the development package."""
    source_roots = os.pathsep.join(str(workdir / folder) for folder in ("operator", "dev"))
    return subprocess.run(
        [str(LINT_IMPORTS), str(workdir / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={"PYTHONPATH": source_roots, "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )


@pytest.fixture
def copy_of_the_package(tmp_path: Path) -> Path:
    for package in ("operator/infergate", "dev/infergate_dev"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_code_keeps_every_contract(copy_of_the_package: Path) -> None:
    result = _lint(copy_of_the_package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert _verdict(result.stdout, "The operator process pulls in no numpy") == "KEPT"


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("plan/phases.py", "import kubernetes", "Pure layers"),
        ("render/labels.py", "import infergate.kube.client", "Pure layers"),
        ("kube/events.py", "import infergate.runner.drive", "kube/ only translates"),
        ("plan/check/lifecycle.py", "import numpy", "The operator process pulls in no numpy"),
        ("plan/check/lifecycle.py", "import infergate.plan.deployment.rollout", "Plan rooms"),
        ("plan/check/owned.py", "import infergate.plan.drift.state", "Plan rooms"),
        ("plan/drift/watch.py", "import infergate.plan.deployment.state", "Plan rooms"),
        ("plan/phases.py", "import infergate.plan.check.status", "Plan rooms"),
        ("commands/crds.py", "import infergate_dev.helmchart", "The product never imports"),
        ("report/page.py", "import httpx", "Pure layers"),
        ("parity/verdict.py", "import infergate.report.page", "The numeric core renders nothing"),
        ("parity/stats.py", "import jinja2", "The numeric core renders nothing"),
    ],
)
def test_a_deliberate_violation_breaks_a_contract(
    copy_of_the_package: Path, module: str, line: str, contract: str
) -> None:
    path = copy_of_the_package / "operator" / "infergate" / module
    path.write_text(f"{line}  # noqa\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    result = _lint(copy_of_the_package)
    assert result.returncode != 0
    assert _verdict(result.stdout, contract) == "BROKEN", result.stdout


def _verdict(report: str, contract: str) -> str:
    """KEPT or BROKEN, as the report's contract list says of the contract named `contract`."""
    text = " ".join(report.split())
    listed = text[text.index("Contracts ---------") :]
    after = listed[listed.index(contract) :]
    return min(("KEPT", "BROKEN"), key=lambda word: after.find(word) % (len(after) + 1))


ROOM_SIZES = REPO / "hack" / "room-sizes.py"


def _room_sizes(source_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOM_SIZES), str(source_root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_module_grown_past_its_rooms_limit_fails_lint(copy_of_the_package: Path) -> None:
    path = copy_of_the_package / "operator" / "infergate" / "plan" / "phases.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n" * 451, encoding="utf-8")
    result = _room_sizes(copy_of_the_package / "operator")
    assert result.returncode == 1
    assert "plan/phases.py" in result.stdout
    assert "over the 450-line limit" in result.stdout


def test_a_module_outside_the_rooms_may_be_longer(copy_of_the_package: Path) -> None:
    path = copy_of_the_package / "operator" / "infergate" / "api" / "common.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n" * 451, encoding="utf-8")
    result = _room_sizes(copy_of_the_package / "operator")
    assert "api/common.py" not in result.stdout
