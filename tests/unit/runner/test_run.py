"""The runner end to end against an in-memory API and toy engines: verdicts and fail-closed rules.

Fail closed: a side that cannot be reached, dies mid-suite, times out or crashes the
runner never yields Passed. Transient failures exit for the Job to retry (status keeps
no verdict, a RunnerError condition says why); permanent ones end the check in Error.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from infergate.engines.client import EngineClientError
from infergate.runner.report_store import read_report
from infergate.runner.run import (
    EXIT_DONE,
    EXIT_RETRY,
    SETTLED_PROMPTS,
    RunOptions,
    main_entry,
    run_check,
)
from infergate.suite import config_map_suite

from .fakes import FakeApi, ToyConnector, ToyEngine, deployment_owner

BASE_IP, CAND_IP, PROBE_IP = "127.64.0.10", "127.64.0.11", "127.64.0.12"
BASE_URL, CAND_URL, PROBE_URL = (f"http://{ip}:8000" for ip in (BASE_IP, CAND_IP, PROBE_IP))
FAST = RunOptions(concurrency=2, wait_for_sides=0.2, progress_interval=0.0)
PROMPTS = 32
"""The profile's minimum evidence in prompts (a toy suite of short prompts)."""


def prompts(n: int) -> list[dict[str, Any]]:
    return [{"id": f"p{i}", "tokenIds": [i + 1, i + 2, i + 3]} for i in range(n)]


def spec(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
        "suite": {"inline": prompts(PROMPTS)},
        "sampling": {"maxTokens": 16, "topLogprobs": 5},
        "profile": "dtype-change",
        # Short toy prompts: the long-context checks are not required, and fewer
        # scored steps than a real suite's give the bounds enough to decide.
        "thresholds": {"minLongPrompts": 0, "minScoredSteps": 256},
    }
    fields.update(overrides)
    return fields


def cluster(**spec_overrides: Any) -> FakeApi:
    api = FakeApi()
    api.deployments["qwen"] = {
        "metadata": {"name": "qwen", "uid": "uid-qwen"},
        "status": {
            "stableRevision": "aaaaaaaaaa",
            "revisions": [{"hash": "aaaaaaaaaa"}, {"hash": "bbbbbbbbbb"}],
        },
    }
    api.add_revision("qwen", "aaaaaaaaaa", engine="vllm", dtype="bfloat16", ip=BASE_IP)
    api.add_revision("qwen", "bbbbbbbbbb", engine="mindformers", dtype="float16", ip=CAND_IP)
    api.add_probe("check", "baseline", PROBE_IP)
    api.add_check("check", spec(**spec_overrides))
    return api


def engines(candidate: ToyEngine | None = None) -> ToyConnector:
    return ToyConnector(
        {
            BASE_URL: ToyEngine(adapter=False),  # vLLM: no hidden states of its own
            PROBE_URL: ToyEngine(adapter=False),  # its pooling probe
            CAND_URL: candidate or ToyEngine(),
        }
    )


def status(api: FakeApi) -> dict[str, Any]:
    return api.checks["check"].get("status") or {}


def conditions(api: FakeApi) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status(api).get("conditions", [])}


def test_matching_sides_pass_with_report_progress_and_resolved_sides() -> None:
    api = cluster()
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["verdict"]["passed"] is True
    assert s["progress"] == {"done": PROMPTS, "total": PROMPTS}
    assert s["metrics"]["tokenMatchRate"] == 1.0
    assert s["profile"] == "dtype-change"
    assert s["reportRef"]["name"] == "check-report"
    report = api.config_maps["check-report"]
    assert report["metadata"]["ownerReferences"][0]["uid"] == "uid-check"
    documents = read_report(report["data"], report["binaryData"])
    assert documents["report.html"].startswith("<!DOCTYPE html>")
    result = json.loads(documents["result.json"])
    assert result["sides"]["baseline"]["probeUrl"] == PROBE_URL  # vLLM's pooling probe
    assert result["sides"]["candidate"]["probeKind"] == "adapter"  # MindFormers serves its own
    assert result["sides"]["baseline"]["url"] == BASE_URL
    # What the canary changes is in the report, in reading order.
    assert result["changes"] == [
        "engine.kind: vllm -> mindformers",
        "engine.dtype: bfloat16 -> float16",
        "accelerator.kind: nvidia-gpu -> ascend-npu",
    ]
    assert "engine.dtype: bfloat16 -&gt; float16" in documents["report.html"]
    # Progress was shown while running, before the verdict.
    assert any(w.get("phase") == "Running" for w in api.status_writes)
    assert [w["progress"]["done"] for w in api.status_writes if "progress" in w][:3] == [0, 1, 2]


def test_numerically_different_candidate_fails_with_reasons() -> None:
    api = cluster()
    connector = engines(ToyEngine(offset=3, shift=-1.0))
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    metrics = {r["metric"] for r in s["verdict"]["reasons"]}
    assert {"maxIllegitimateDivergenceRate", "maxMeanKl", "minHiddenCosineP1"} <= metrics
    assert s["progress"] == {"done": PROMPTS, "total": PROMPTS}, "numbers need every prompt"


def test_unreachable_candidate_is_retried_and_never_passes() -> None:
    api = cluster()
    api.add_service("qwen-bbbbbbbbbb", CAND_IP, owner=deployment_owner("qwen"), ready=False)
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_RETRY
    s = status(api)
    assert s.get("phase") != "Passed"
    assert "verdict" not in s
    runner = conditions(api)["RunnerError"]
    assert runner["status"] == "True"
    assert runner["reason"] == "SideUnreachable"
    assert "qwen-bbbbbbbbbb has no ready endpoint" in runner["message"]


def test_unhealthy_probe_is_retried() -> None:
    api = cluster()
    connector = engines()
    connector.unhealthy.add(PROBE_URL)
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_RETRY
    assert PROBE_URL in conditions(api)["RunnerError"]["message"]


@pytest.mark.parametrize(
    ("fault", "shown"),
    [
        (lambda: httpx.ConnectError("[Errno 111] Connection refused"), "ConnectError"),
        (lambda: httpx.ReadTimeout("timed out"), "ReadTimeout"),
        (lambda: httpx.RemoteProtocolError("peer closed connection"), "RemoteProtocolError"),
        (lambda: EngineClientError("POST /v1/completions: HTTP 503: overloaded"), "HTTP 503"),
    ],
)
def test_candidate_dying_mid_suite_is_retried_without_verdict(fault: Any, shown: str) -> None:
    api = cluster()
    connector = engines(ToyEngine(fail_after=3, fault=fault))
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_RETRY
    s = status(api)
    assert s["phase"] == "Running"
    assert "verdict" not in s
    assert s["progress"]["done"] < PROMPTS
    message = conditions(api)["RunnerError"]["message"]
    assert shown in message
    assert message.startswith("candidate (http://127.64.0.11:8000)")


def test_an_answer_that_will_not_change_ends_in_error_at_once() -> None:
    api = cluster()
    fault = lambda: EngineClientError("POST /v1/completions: HTTP 400: prompt too long")  # noqa: E731
    connector = engines(ToyEngine(fail_after=1, fault=fault))
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Error"
    assert s["verdict"]["passed"] is False
    assert "HTTP 400: prompt too long" in s["verdict"]["reasons"][0]["message"]
    assert conditions(api)["Error"]["status"] == "True"


def test_a_crash_is_a_retry_with_the_traceback_reason() -> None:
    api = cluster()
    connector = engines(ToyEngine(fail_after=2, fault=lambda: ZeroDivisionError("boom")))
    assert main_entry(api, "check", FAST, connector.connector()) == EXIT_RETRY
    runner = conditions(api)["RunnerError"]
    assert runner["reason"] == "RunnerCrashed"
    assert "ZeroDivisionError" in runner["message"]
    assert status(api).get("phase") != "Passed"


def test_a_check_that_already_ended_is_left_alone() -> None:
    api = cluster()
    api.checks["check"]["status"] = {"phase": "Failed", "verdict": {"passed": False}}
    connector = engines()
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    assert status(api) == {"phase": "Failed", "verdict": {"passed": False}}
    assert connector.engines[BASE_URL].completions == 0


def test_a_verdict_is_not_written_over_an_error_the_controller_wrote_meanwhile() -> None:
    api = cluster()

    def deadline_passes(fake: FakeApi) -> None:
        if fake.checks["check"]["status"].get("progress", {}).get("done") == 4:
            fake.checks["check"]["status"]["phase"] = "Error"

    api.on_status_write = deadline_passes
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert status(api)["phase"] == "Error"
    assert "verdict" not in status(api)


def test_an_endpoint_without_hidden_states_is_an_error_saying_how_to_proceed() -> None:
    api = cluster(candidate={"endpoint": {"url": "http://127.0.0.1:9", "model": "fixture"}})
    connector = engines()
    connector.engines["http://127.0.0.1:9"] = ToyEngine(adapter=False)
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Error"
    assert "hiddenStates.enabled: false" in s["verdict"]["reasons"][0]["message"]


def test_explicit_endpoints_without_hidden_states_compare_tokens_and_logprobs() -> None:
    api = cluster(
        baseline={"endpoint": {"url": "http://127.0.0.1:9001", "model": "fixture"}},
        candidate={"endpoint": {"url": "http://127.0.0.1:9002", "model": "fixture"}},
        hiddenStates={"enabled": False},
        thresholds={"minHiddenCosineP1": 0.99, "minLongPrompts": 0, "minScoredSteps": 256},
        disabledChecks=["minHiddenCosineP1", "maxHiddenRelL2P99"],
    )
    connector = ToyConnector(
        {"http://127.0.0.1:9001": ToyEngine(), "http://127.0.0.1:9002": ToyEngine()}
    )
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed", s["verdict"]
    assert "hiddenCosineP1" not in s["metrics"]


def test_missing_suite_configmap_is_an_error_naming_it() -> None:
    api = cluster(suite={"configMapRef": {"name": "prompts", "key": "suite.jsonl"}})
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert "ConfigMap prompts does not exist" in status(api)["verdict"]["reasons"][0]["message"]


def test_suite_from_a_configmap_runs_its_prompts() -> None:
    api = cluster(suite={"configMapRef": {"name": "prompts", "key": "suite.jsonl"}})
    lines = "\n".join(json.dumps({"id": f"c{i}", "text": f"hello {i}"}) for i in range(PROMPTS))
    api.config_maps["prompts"] = {"metadata": {"name": "prompts"}, "data": {"suite.jsonl": lines}}
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert status(api)["progress"] == {"done": PROMPTS, "total": PROMPTS}
    assert status(api)["phase"] == "Passed"


def _suite_lines(n: int, word: str = "hello") -> str:
    return "\n".join(json.dumps({"id": f"c{i}", "text": f"{word} {i}"}) for i in range(n))


def test_a_suite_configmap_edited_after_the_check_was_made_ends_it_in_error() -> None:
    """The check pins the content it was made for (spec.suite.digest): harmless prompts
    swapped in afterwards are refused, and the message names the ConfigMap and both
    digests."""
    made_for = config_map_suite(
        {"data": {"suite.jsonl": _suite_lines(PROMPTS)}}, "prompts", "suite.jsonl"
    ).content_digest()
    ref = {"name": "prompts", "key": "suite.jsonl"}
    api = cluster(suite={"configMapRef": ref, "digest": made_for})
    api.config_maps["prompts"] = {
        "metadata": {"name": "prompts"},
        "data": {"suite.jsonl": _suite_lines(PROMPTS, "harmless")},
    }
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    ended = status(api)
    assert ended["phase"] == "Error"
    reason = next(c for c in ended["conditions"] if c["type"] == "Error")["reason"]
    assert reason == "SuiteChanged"
    message = ended["verdict"]["reasons"][0]["message"]
    assert "ConfigMap prompts" in message
    assert made_for in message
    swapped = config_map_suite(api.config_maps["prompts"], "prompts", "suite.jsonl")
    assert swapped.content_digest() in message


def test_a_pinned_suite_runs_and_its_verdict_names_the_content_it_judged() -> None:
    lines = _suite_lines(PROMPTS)
    # Comments and blank lines are not prompts: the digest is of the suite as parsed.
    stored = f"# the suite\n\n{lines}\n"
    digest = config_map_suite({"data": {"k": lines}}, "prompts", "k").content_digest()
    api = cluster(suite={"configMapRef": {"name": "prompts", "key": "k"}, "digest": digest})
    api.config_maps["prompts"] = {"metadata": {"name": "prompts"}, "data": {"k": stored}}
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert status(api)["phase"] == "Passed"
    assert status(api)["verdict"]["suiteDigest"] == digest


def test_an_unpinned_suite_records_the_content_it_judged() -> None:
    """A check made by hand names no digest: the verdict records the one it judged."""
    api = cluster(suite={"configMapRef": {"name": "prompts", "key": "k"}})
    lines = _suite_lines(PROMPTS)
    api.config_maps["prompts"] = {"metadata": {"name": "prompts"}, "data": {"k": lines}}
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    judged = config_map_suite(api.config_maps["prompts"], "prompts", "k").content_digest()
    assert status(api)["verdict"]["suiteDigest"] == judged


def test_stable_revision_is_used_when_the_side_names_none() -> None:
    api = cluster(baseline={"inferenceDeploymentRef": {"name": "qwen"}})
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    result = json.loads(read_report(api.config_maps["check-report"]["data"], {})["result.json"])
    assert result["sides"]["baseline"]["revision"] == "aaaaaaaaaa"


def _passed_report(api: FakeApi, profile: str) -> str:
    """Run an identical-sides check named `old` and return its report ConfigMap."""
    api.add_check("old", spec(profile=profile))
    api.add_probe("old", "baseline", PROBE_IP)
    assert run_check(api, "old", FAST, connector=engines().connector()) == EXIT_DONE
    assert api.checks["old"]["status"]["phase"] == "Passed"
    return str(api.checks["old"]["status"]["reportRef"]["name"])


def test_a_worsening_against_the_last_passing_check_of_the_same_kind_fails() -> None:
    api = cluster()
    previous = _passed_report(api, "dtype-change")
    options = RunOptions(
        concurrency=2, wait_for_sides=0.2, progress_interval=0.0, previous_report=previous
    )
    slightly_off = engines(ToyEngine(shift=-1e-3))
    assert run_check(api, "check", options, connector=slightly_off.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    metrics = {r["metric"] for r in s["verdict"]["reasons"]}
    # Within every absolute limit: only the regression against the last pass fails it.
    assert metrics
    assert all(m.startswith("regression.") for m in metrics)
    assert any("rose from 0" in r["message"] for r in s["verdict"]["reasons"])


def test_a_passing_check_of_another_kind_is_no_baseline_for_regression() -> None:
    api = cluster()
    previous = _passed_report(api, "dtype-change")
    report = api.config_maps[previous]["data"]
    document = json.loads(report["result.json"])
    report["result.json"] = json.dumps({**document, "profile": "gpu-to-ascend-bf16"})
    options = RunOptions(
        concurrency=2, wait_for_sides=0.2, progress_interval=0.0, previous_report=previous
    )
    slightly_off = engines(ToyEngine(shift=-1e-3))
    assert run_check(api, "check", options, connector=slightly_off.connector()) == EXIT_DONE
    assert status(api)["phase"] == "Passed"


def test_a_verdict_written_between_read_and_start_is_not_overwritten() -> None:
    api = cluster()
    read = api.get_check

    def read_then_deadline(name: str) -> dict[str, Any]:
        seen = read(name)
        if "status" not in api.checks[name]:
            api.checks[name]["status"] = {"phase": "Error"}  # the controller's deadline, meanwhile
            api.checks[name]["metadata"]["resourceVersion"] = "999"
        return seen

    api.get_check = read_then_deadline  # type: ignore[method-assign]
    connector = engines()
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    assert status(api) == {"phase": "Error"}
    assert connector.engines[BASE_URL].completions == 0


def test_a_side_that_loaded_other_weights_fails_as_hygiene_naming_the_key() -> None:
    """The vLLM baseline's fingerprints come from the fingerprint server in its probe; the
    candidate adapter reports its own: a weights digest that differs fails before any number."""
    api = cluster()
    other = ToyEngine()
    other.fingerprints = {**other.fingerprints, "weights.digest": "w-2"}
    assert run_check(api, "check", FAST, connector=engines(other).connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    [hygiene] = [
        r for r in s["verdict"]["reasons"] if r["metric"].startswith("hygiene.Fingerprint")
    ]
    assert "weights.digest" in hygiene["message"]
    assert "w-1" in hygiene["message"]
    assert "w-2" in hygiene["message"]
    # No prompt could make it pass: the runner measured only a few, for the report, and
    # says so; the sides were asked for no more than that.
    assert s["progress"] == {"done": SETTLED_PROMPTS, "total": SETTLED_PROMPTS}
    assert other.completions == SETTLED_PROMPTS
    report = api.config_maps["check-report"]
    result = json.loads(read_report(report["data"], report["binaryData"])["result.json"])
    assert any(
        f"{SETTLED_PROMPTS} of {PROMPTS} prompts measured" in note
        for note in result["result"]["notes"]
    )


def test_a_tokenizer_that_starts_adding_bos_fails_even_when_files_look_alike() -> None:
    """The ids each engine's own tokenizer gives the probe text are compared, so special
    tokens added by one side only show even if every digest matched."""
    api = cluster()
    bos = ToyEngine(probe_ids=[0, 1, 17, 42])
    assert run_check(api, "check", FAST, connector=engines(bos).connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    assert any("tokenizer.probe_ids" in (r.get("message") or "") for r in s["verdict"]["reasons"])
