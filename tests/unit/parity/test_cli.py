"""`infergate parity compare` on records written to disk: exit codes, JSON and HTML outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infergate.cli import main
from infergate.parity.record import PromptRecord
from infergate.recordio import RecordWriter

from .builders import RUN, SIDE_FINGERPRINTS, candidate_of, meta, replace, scored_suite


def _write(path: Path, prompts: list[PromptRecord], **meta_overrides: object) -> str:
    with RecordWriter(
        path, meta(fingerprints={**SIDE_FINGERPRINTS, **RUN}, **meta_overrides)
    ) as writer:
        for p in prompts:
            writer.add(p)
    return str(path)


def _drifted(prompts: list[PromptRecord]) -> list[PromptRecord]:
    out = []
    for p in prompts:
        assert p.hidden_states is not None
        out.append(replace(candidate_of(p), hidden_states=p.hidden_states * np.float32(1.2)))
    return out


@pytest.fixture(scope="module")
def prompts() -> list[PromptRecord]:
    return scored_suite()


@pytest.fixture
def records(tmp_path: Path, prompts: list[PromptRecord]) -> dict[str, str]:
    return {
        "baseline": _write(tmp_path / "baseline", prompts),
        "same": _write(tmp_path / "same", [candidate_of(p) for p in prompts]),
        "drifted": _write(tmp_path / "drifted", _drifted(prompts)),
        "short": _write(tmp_path / "short", prompts[:3]),
        "few": _write(tmp_path / "few", prompts[:3]),
    }


def test_exit_0_when_the_candidate_matches(records: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code = main(["parity", "compare", records["baseline"], records["same"], "--json", str(out)])
    assert code == 0
    document = json.loads(out.read_text())
    assert document["status"] == "Passed"
    assert document["profile"] == "bf16-kernel"
    assert document["result"]["metrics"]["tokens"]["matchRate"]["value"] == 1.0


def test_exit_1_when_the_candidate_drifts(
    records: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    code = main(["parity", "compare", records["baseline"], records["drifted"], "--json", str(out)])
    assert code == 1
    document = json.loads(out.read_text())
    assert document["status"] == "Failed"
    assert any("maxHiddenNormLogRatio" in r for r in document["verdict"]["reasons"])
    assert "parity Failed" in capsys.readouterr().out


def test_exit_3_when_the_evidence_is_not_enough(records: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code = main(["parity", "compare", records["short"], records["few"], "--json", str(out)])
    assert code == 3
    document = json.loads(out.read_text())
    assert document["status"] == "Inconclusive"
    assert "3 of 32 prompts needed" in document["verdict"]["reasons"][0]


def test_exit_2_when_prompts_are_missing(records: dict[str, str]) -> None:
    assert main(["parity", "compare", records["baseline"], records["short"]]) == 2


def test_records_without_hidden_states_pass_when_told_so(tmp_path: Path) -> None:
    prompts = [replace(p, hidden_states=None) for p in scored_suite()]
    baseline = _write(tmp_path / "b", prompts)
    candidate = _write(tmp_path / "c", [candidate_of(p) for p in prompts])
    assert main(["parity", "compare", baseline, candidate]) == 2
    assert main(["parity", "compare", baseline, candidate, "--no-hidden-states"]) == 0


def test_exit_2_when_a_record_is_incomplete(records: dict[str, str], tmp_path: Path) -> None:
    (Path(records["same"]) / "manifest.json").unlink()
    out = tmp_path / "result.json"
    code = main(["parity", "compare", records["baseline"], records["same"], "--json", str(out)])
    assert code == 2
    document = json.loads(out.read_text())
    assert document["status"] == "Error"
    assert "incomplete record" in document["reasons"][0]


def test_threshold_override_turns_a_failure_into_a_pass(records: dict[str, str]) -> None:
    argv = ["parity", "compare", records["baseline"], records["drifted"]]
    assert main(argv) == 1
    loose = ["--threshold", "maxHiddenRelL2P99=0.5", "--threshold", "maxHiddenNormLogRatio=none"]
    assert main(argv + loose) == 0


def test_bad_threshold_names_key_value_and_allowed_keys(
    records: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["parity", "compare", records["baseline"], records["same"], "--threshold", "maxMeanKl=-1"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "maxMeanKl='-1'" in err
    assert "greater than or equal to 0" in err
    code = main(
        ["parity", "compare", records["baseline"], records["same"], "--threshold", "maxKl=1"]
    )
    assert code == 2
    assert "maxKl" in capsys.readouterr().err


def test_strict_profile_from_the_command_line(records: dict[str, str]) -> None:
    argv = ["parity", "compare", records["baseline"], records["same"], "--profile", "strict"]
    assert main(argv) == 0


def test_report_html_holds_the_verdict_and_metric_rows(
    records: dict[str, str], tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    main(["parity", "compare", records["baseline"], records["drifted"], "--report", str(report)])
    html = report.read_text()
    assert "Failed</span></h1>" in html
    assert "<code>maxHiddenRelL2P99</code>" in html
    assert "<code>maxHiddenNormLogRatio</code>" in html
    assert "<svg" in html


def test_regression_against_a_previous_passing_result(
    records: dict[str, str], tmp_path: Path
) -> None:
    previous = tmp_path / "previous.json"
    assert (
        main(["parity", "compare", records["baseline"], records["same"], "--json", str(previous)])
        == 0
    )
    out = tmp_path / "now.json"
    argv = ["parity", "compare", records["baseline"], records["same"], "--previous", str(previous)]
    assert main([*argv, "--json", str(out)]) == 0
    regressions = json.loads(out.read_text())["verdict"]["regressions"]
    assert {r["metric"] for r in regressions} >= {"same-top-token rate", "mean KL"}
    assert not any(r["regressed"] for r in regressions)


def test_the_summary_and_the_json_say_where_the_limits_come_from(
    records: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    main(["parity", "compare", records["baseline"], records["same"], "--json", str(out)])
    printed = capsys.readouterr().out
    limits = json.loads(out.read_text())["result"]["limits"]
    assert limits["profile"] == "bf16-kernel"
    assert limits["source"] == "static profile"
    assert limits["k"] is None
    assert "  limits: static profile bf16-kernel; k -;" in printed
