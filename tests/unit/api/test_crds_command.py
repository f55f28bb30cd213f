"""`infergate crds --out` and `--check`, and the checked-in crds/ being in sync."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergate.cli import main
from tests.unit.api.manifests import CRDS_DIR


def test_checked_in_crds_match_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds", "--check", str(CRDS_DIR)]) == 0
    assert "2 CRDs" in capsys.readouterr().out


def test_out_then_check_round_trips(tmp_path: Path) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "infergate.io_inferencedeployments.yaml",
        "infergate.io_paritychecks.yaml",
    ]
    assert main(["crds", "--check", str(tmp_path)]) == 0


def test_check_reports_a_stale_file_with_a_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["crds", "--out", str(tmp_path)])
    path = tmp_path / "infergate.io_paritychecks.yaml"
    path.write_text(path.read_text().replace("maxItems: 256", "maxItems: 999", 1))
    capsys.readouterr()
    assert main(["crds", "--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "infergate.io_paritychecks.yaml: 1 lines added, 1 removed" in err
    assert "-" in err
    assert "maxItems: 999" in err
    assert "make crds" in err


def test_check_reports_missing_and_extra_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["crds", "--out", str(tmp_path)])
    (tmp_path / "infergate.io_inferencedeployments.yaml").unlink()
    (tmp_path / "infergate.io_oldthings.yaml").write_text("kind: CustomResourceDefinition\n")
    capsys.readouterr()
    assert main(["crds", "--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "infergate.io_inferencedeployments.yaml: missing" in err
    assert "infergate.io_oldthings.yaml: not generated from the models" in err


def test_out_and_check_are_exclusive_and_one_is_required() -> None:
    with pytest.raises(SystemExit):
        main(["crds"])
    with pytest.raises(SystemExit):
        main(["crds", "--out", "a", "--check", "b"])
