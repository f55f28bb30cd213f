"""The layering `make lint` enforces (import-linter contracts in pyproject.toml): kept by
the code as it is, and broken by a deliberate violation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(source_root: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), str(workdir / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={"PYTHONPATH": str(source_root), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )


@pytest.fixture
def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "operator" / "infergate",
        tmp_path / "operator" / "infergate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_code_keeps_every_contract(copy_of_the_package: Path) -> None:
    result = _lint(copy_of_the_package / "operator", copy_of_the_package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert _verdict(result.stdout, "The operator process pulls in no numpy") == "KEPT"


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("plan/phases.py", "import kubernetes", "Pure layers"),
        ("render/labels.py", "import infergate.kube.client", "Pure layers"),
        ("kube/events.py", "import infergate.runner.drive", "kube/ only translates"),
        ("plan/paritycheck.py", "import numpy", "The operator process pulls in no numpy"),
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
    result = _lint(copy_of_the_package / "operator", copy_of_the_package)
    assert result.returncode != 0
    assert _verdict(result.stdout, contract) == "BROKEN", result.stdout


def _verdict(report: str, contract: str) -> str:
    """KEPT or BROKEN, as the report's contract list says of the contract named `contract`."""
    text = " ".join(report.split())
    listed = text[text.index("Contracts ---------") :]
    after = listed[listed.index(contract) :]
    return min(("KEPT", "BROKEN"), key=lambda word: after.find(word) % (len(after) + 1))
