"""The alerting rules: valid for Prometheus (`promtool check rules`), right on synthetic
series (`promtool test rules`), shipped twice with the same groups, and covering what a
platform team asks to be told about."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.tools import REPO, tool

RULES = REPO / "manifests" / "monitoring" / "infergate-alerts.rules.yaml"
PROMETHEUS_RULE = REPO / "manifests" / "monitoring" / "prometheusrule" / "prometheusrule.yaml"
UNIT_TESTS = Path(__file__).with_name("alert_rules_test.yaml")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("promtool")), *args], capture_output=True, text=True, check=False, cwd=REPO
    )


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def test_promtool_accepts_the_rules_file() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_the_prometheus_rule_holds_the_same_groups_and_promtool_accepts_them(
    tmp_path: Path,
) -> None:
    rule = _load(PROMETHEUS_RULE)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == _load(RULES)
    extracted = tmp_path / "from-prometheusrule.yaml"
    extracted.write_text(yaml.safe_dump(rule["spec"]))
    result = _promtool("check", "rules", str(extracted))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_fire_and_stay_silent_as_their_unit_tests_say() -> None:
    result = _promtool("test", "rules", str(UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test_a_severity_and_a_description() -> None:
    rules = [r for g in _load(RULES)["groups"] for r in g["rules"] if "alert" in r]
    names = {r["alert"] for r in rules}
    assert {
        "InfergateParityCheckFailed",
        "InfergateParityCheckInconclusive",
        "InfergateStableRevisionDrifted",
        "InfergateStableRevisionNumericsDrifted",
        "InfergateDriftWatchBlind",
        "InfergateRolloutPastDeadline",
        "InfergateRolloutStuck",
        "InfergateOperatorDown",
    } <= names
    tested = {
        case["alertname"]
        for test in _load(UNIT_TESTS)["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert names <= tested, f"alerts no unit test sees firing: {sorted(names - tested)}"
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


RUNBOOKS = "https://github.com/infergate/infergate/blob/main/"


def test_every_alert_links_its_runbook_page_and_the_page_answers_three_questions() -> None:
    rules = [r for g in _load(RULES)["groups"] for r in g["rules"] if "alert" in r]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOKS}docs/runbooks/{rule['alert']}.md", rule["alert"]
        page = REPO / url.removeprefix(RUNBOOKS)
        assert page.is_file(), f"{rule['alert']}: no runbook at {page.relative_to(REPO)}"
        text = page.read_text(encoding="utf-8")
        assert text.startswith(f"# {rule['alert']} ({rule['labels']['severity']})")
        for heading in ("## What it means", "## How to check", "## What to do"):
            assert heading in text, f"{page.name} lacks {heading!r}"
    pages = {p.stem for p in (REPO / "docs" / "runbooks").glob("Infergate*.md")}
    assert pages == {r["alert"] for r in rules}, "a runbook page without its alert"


def test_the_operator_is_found_by_its_build_info_not_by_a_job_name() -> None:
    down = next(
        r
        for g in _load(RULES)["groups"]
        for r in g["rules"]
        if r.get("alert") == "InfergateOperatorDown"
    )
    assert "infergate_build_info" in down["expr"]
    assert "job" not in down["expr"]
