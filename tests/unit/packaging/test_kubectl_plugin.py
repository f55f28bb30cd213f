"""`kubectl infergate` as kubectl runs it: help, kubectl's connection flags, and how it
shows a check's progress and verdict. API calls are in tests/integration."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

from infergate import kubectl_plugin
from infergate.commands import control
from infergate.kubectl_plugin import check_lines, main

COMMANDS = ("status", "promote", "abort", "rollback", "report")


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: kubectl infergate")
    for command in COMMANDS:
        assert f"    {command}" in text
    assert "KUBECONFIG" in text


def test_runs_as_a_module_the_way_the_executable_does() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infergate.kubectl_plugin", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: kubectl infergate" in result.stdout


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """The parsed arguments a command handler receives (no API call is made)."""
    calls: list[argparse.Namespace] = []

    def record(args: argparse.Namespace) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(kubectl_plugin, "run_status", record)
    monkeypatch.setattr(kubectl_plugin, "run_report", record)
    monkeypatch.setattr(control, "run_promote", record)
    return calls


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "llm", "--context", "prod", "--kubeconfig", "/k", "status", "qwen"],
        ["status", "qwen", "-n", "llm", "--context", "prod", "--kubeconfig", "/k"],
        ["--namespace", "llm", "status", "--context", "prod", "qwen", "--kubeconfig=/k"],
    ],
)
def test_connection_flags_go_before_or_after_the_command(
    argv: list[str], seen: list[argparse.Namespace]
) -> None:
    assert main(argv) == 0
    (args,) = seen
    assert (args.name, args.namespace, args.context, args.kubeconfig) == (
        "qwen",
        "llm",
        "prod",
        "/k",
    )


def test_the_commands_flag_wins_over_the_one_before_it(seen: list[argparse.Namespace]) -> None:
    assert main(["-n", "outer", "status", "qwen", "-n", "inner"]) == 0
    assert seen[0].namespace == "inner"


def test_unset_flags_stay_unset_for_the_kubeconfig_to_decide(
    seen: list[argparse.Namespace],
) -> None:
    assert main(["status", "qwen"]) == 0
    assert (seen[0].namespace, seen[0].context, seen[0].kubeconfig) == (None, None, None)


def test_promote_is_the_operator_clis_promote(seen: list[argparse.Namespace]) -> None:
    assert main(["promote", "qwen", "--wait"]) == 0
    assert seen[0].wait is True


@pytest.mark.parametrize("argv", [["report"], ["report", "qwen", "--check", "qwen-3f2a"]])
def test_report_wants_a_deployment_or_a_check(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2


def _check(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "qwen-3f2a9c1d0e"}, "status": status}


def test_a_running_check_shows_its_progress() -> None:
    lines = check_lines(
        _check(
            {
                "phase": "Running",
                "progress": {"done": 12, "total": 40},
                "profile": "bf16",
                "baselineRevision": "81422cb403",
                "candidateRevision": "3f2a9c1d0e",
            }
        )
    )
    expected = (
        "  check:    qwen-3f2a9c1d0e  Running  12/40 prompts  profile bf16  "
        "baseline 81422cb403  candidate 3f2a9c1d0e"
    )
    assert lines == [expected]


def test_a_check_measuring_its_baseline_noise_says_so() -> None:
    progress = {"done": 3, "total": 40, "stage": "BaselineNoise"}
    lines = check_lines(_check({"phase": "Running", "progress": progress}))
    assert lines == ["  check:    qwen-3f2a9c1d0e  Running  3/40 prompts (baseline noise)"]


def test_a_failed_check_shows_each_reason_with_value_limit_and_prompts() -> None:
    lines = check_lines(
        _check(
            {
                "phase": "Failed",
                "verdict": {
                    "passed": False,
                    "outcome": "Failed",
                    "summary": "1 limit passed",
                    "reasons": [
                        {
                            "metric": "minTokenMatchRate",
                            "value": 0.8125,
                            "threshold": 0.95,
                            "comparison": ">=",
                            "prompts": ["p1", "p2", "p3", "p4", "p5", "p6", "p7"],
                        },
                        {"metric": "hygiene.nan", "value": 3.0},
                        {"metric": "maxHiddenRelL2P99", "value": None, "threshold": 0.01},
                    ],
                    "warnings": ["meanKl 2e-4 past its warn level"],
                },
                "metrics": {"tokenMatchRate": 0.8125, "meanKl": 0.0002},
                "reportRef": {"name": "qwen-3f2a9c1d0e-report", "key": "report.html"},
            }
        )
    )
    assert lines[1] == "  verdict:  Failed  1 limit passed"
    assert lines[2] == (
        "    minTokenMatchRate = 0.8125, needs >= 0.95; prompts: p1, p2, p3, p4, p5 (+2 more)"
    )
    assert lines[3] == "    hygiene.nan = 3"
    assert lines[4] == "    maxHiddenRelL2P99: not measured"
    assert lines[5] == "    warning: meanKl 2e-4 past its warn level"
    assert lines[6] == "  metrics:  meanKl=0.0002, tokenMatchRate=0.8125"
    assert lines[7] == "  report:   kubectl infergate report --check qwen-3f2a9c1d0e"


def test_a_new_check_is_pending() -> None:
    assert check_lines(_check({})) == ["  check:    qwen-3f2a9c1d0e  Pending"]
