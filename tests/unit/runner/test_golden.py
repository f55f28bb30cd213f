"""Golden records from the runner: a Passed check stores both sides in the operator's store.

The store is the operator's setting (RunOptions.golden, from $INFERGATE_GOLDEN_CONFIG);
the check's status says where the records went, or why none were stored.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx

from infergate.api.golden import GoldenSpec
from infergate.golden.blobs import DirectoryStore
from infergate.golden.keys import Role
from infergate.golden.settings import GOLDEN_CONFIG_ENV, GOLDEN_DIR_ENV
from infergate.golden.store import GoldenStore
from infergate.runner.golden import golden_from_env
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, EXIT_RETRY, run_check

from .fakes import ToyConnector, ToyEngine
from .test_run import FAST, cluster, engines, status

GOLDEN = GoldenSpec.model_validate({"store": {"pvc": {"claimName": "golden"}}})


def options(root: Path, golden: GoldenSpec = GOLDEN) -> Any:
    return dataclasses.replace(FAST, golden=golden, environ={GOLDEN_DIR_ENV: str(root)})


def test_a_passed_check_stores_both_sides_and_says_where(tmp_path: Path) -> None:
    api = cluster()
    assert run_check(api, "check", options(tmp_path), connector=engines().connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    golden = s["golden"]
    assert golden["stored"] is True
    assert golden["store"] == f"directory {tmp_path}"
    assert len(golden["entries"]) == 2
    assert golden["sizeBytes"] > 0
    store = GoldenStore(DirectoryStore(tmp_path))
    items = store.list_entries("llm", "qwen")
    assert sorted(str(i.location) for i in items) == sorted(golden["entries"])
    entries = {i.entry.role: i.entry for i in items if i.entry is not None}
    assert entries[Role.BASELINE].revision == "aaaaaaaaaa"
    assert entries[Role.CANDIDATE].revision == "bbbbbbbbbb"
    assert entries[Role.BASELINE].check == "check"
    assert entries[Role.BASELINE].fingerprint.startswith("sha256:")
    assert entries[Role.BASELINE].fingerprint != entries[Role.CANDIDATE].fingerprint
    assert sum(e.size_bytes for e in entries.values()) == golden["sizeBytes"]
    # Found again by what a later check knows: the revision and the suite's digest.
    found = store.find(
        "llm", "qwen", revision="aaaaaaaaaa", suite_digest=golden["suiteDigest"], role=Role.BASELINE
    )
    with store.open(found) as record:
        assert len(record.prompt_ids) == 32
        assert record.get("p0").output_token_ids.size > 0
        # The default policy keeps hidden-state summaries, not the full states.
        assert record.hidden_summary("p0") is not None
    report = read_report(api.config_maps["check-report"]["data"], {})
    assert json.loads(report["result.json"])["golden"]["entries"] == golden["entries"]


def test_a_failed_check_stores_nothing_and_says_so(tmp_path: Path) -> None:
    api = cluster()
    connector = engines(ToyEngine(offset=3, shift=-1.0))
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    assert s["golden"]["stored"] is False
    assert "only a Passed check" in s["golden"]["message"]
    assert GoldenStore(DirectoryStore(tmp_path)).list_entries() == []
    # Nothing staged is left behind.
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_retried_run_leaves_no_staging_behind(tmp_path: Path) -> None:
    api = cluster()
    fault = lambda: httpx.ConnectError("[Errno 111] Connection refused")  # noqa: E731
    connector = engines(ToyEngine(fail_after=5, fault=fault))
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_RETRY
    assert "golden" not in status(api)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_endpoint_sides_are_not_recorded_and_the_status_says_why(tmp_path: Path) -> None:
    api = cluster(
        baseline={"endpoint": {"url": "http://127.0.0.1:9001", "model": "fixture"}},
        candidate={"endpoint": {"url": "http://127.0.0.1:9002", "model": "fixture"}},
        hiddenStates={"enabled": False},
        disabledChecks=["minHiddenCosineP1", "maxHiddenRelL2P99"],
    )
    connector = ToyConnector(
        {"http://127.0.0.1:9001": ToyEngine(), "http://127.0.0.1:9002": ToyEngine()}
    )
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is False
    assert "two revisions of one InferenceDeployment" in s["golden"]["message"]


def test_a_budget_that_cannot_hold_the_record_stores_nothing_and_still_passes(
    tmp_path: Path,
) -> None:
    long_prompts = [{"id": f"p{i}", "tokenIds": list(range(1, 2000))} for i in range(40)]
    api = cluster(suite={"inline": long_prompts})
    tight = GoldenSpec.model_validate(
        {"store": {"pvc": {"claimName": "golden"}}, "hiddenStates": "none", "maxBytes": "1Mi"}
    )
    run_check(api, "check", options(tmp_path, tight), connector=engines().connector())
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is False
    assert "maxBytes" in s["golden"]["message"]
    assert GoldenStore(DirectoryStore(tmp_path)).list_entries() == []


def test_without_operator_settings_no_golden_status_is_written(tmp_path: Path) -> None:
    api = cluster()
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert "golden" not in status(api)


def test_the_operator_settings_come_from_the_runner_environment() -> None:
    assert golden_from_env({}) is None
    text = json.dumps(GOLDEN.to_kube())
    assert golden_from_env({GOLDEN_CONFIG_ENV: text}) == GOLDEN
