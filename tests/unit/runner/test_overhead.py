"""The runner's overhead in the check's status and report: figures only when the engines'
own metrics count exactly the requests the runner sent, else the reason (fail closed)."""

from __future__ import annotations

import json

import pytest

from infergate.api.check_status import ParityCheckStatus
from infergate.runner.overhead import RequestLog, check_engines, measure
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, run_check
from infergate.runner.sides import SideTarget

from .fakes import SECONDS_PER_REQUEST, FakeApi
from .test_run import BASE_URL, CAND_URL, FAST, PROBE_URL, PROMPTS, cluster, engines, status

# Per prompt: the vLLM baseline serves a completion and a scoring, its pooling probe the
# hidden states; the adapter candidate serves all three itself.
REQUESTS = PROMPTS * (2 + 1 + 3)


def test_a_check_reports_its_overhead_in_status_and_report() -> None:
    api = cluster()
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    overhead = s["overhead"]
    assert "error" not in overhead
    assert overhead["requests"] == REQUESTS
    assert overhead["engineSeconds"] == pytest.approx(REQUESTS * SECONDS_PER_REQUEST, abs=1e-3)
    # The status rounds wallSeconds to 1 ms and the ratio to 1e-4: with the fakes' short
    # wall times that, not a relative margin, is how far the two may differ.
    assert overhead["ratio"] == pytest.approx(
        overhead["wallSeconds"] / overhead["engineSeconds"],
        abs=0.0005 / overhead["engineSeconds"] + 0.00005,
    )
    assert overhead["concurrency"] == FAST.concurrency
    assert overhead["ratioBound"] == pytest.approx(overhead["ratio"] * FAST.concurrency, rel=1e-3)
    ParityCheckStatus.model_validate(s)  # the CRD's schema carries it
    documents = read_report(api.config_maps["check-report"]["data"], {})
    assert json.loads(documents["result.json"])["overhead"] == overhead
    assert "Runner overhead" in documents["report.html"]
    assert f"for {REQUESTS} requests" in documents["report.html"]


def test_another_client_on_an_engine_gives_the_reason_not_a_figure() -> None:
    api = cluster()
    connector = engines()

    def live_traffic(fake: FakeApi) -> None:
        if fake.status_writes[-1].get("progress", {}).get("done") == 1:
            connector.engines[BASE_URL].serve("/v1/completions")  # not the runner's

    api.on_status_write = live_traffic
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"  # the verdict does not depend on it
    assert set(s["overhead"]) == {"error"}
    assert "baseline" in s["overhead"]["error"]
    assert "not the check's alone" in s["overhead"]["error"]
    html = read_report(api.config_maps["check-report"]["data"], {})["report.html"]
    assert "not attributed" in html


@pytest.mark.parametrize("states_seconds", [True, False])
def test_an_adapter_stating_its_seconds_is_timed_by_them_beside_another_client(
    states_seconds: bool,
) -> None:
    """The adapter candidate also serves someone else during the check: its metrics then
    count more than the runner sent, but the seconds its answers state are the runner's."""
    api = cluster()
    connector = engines()
    candidate = connector.engines[CAND_URL]
    candidate.states_seconds = states_seconds

    def live_traffic(fake: FakeApi) -> None:
        if fake.status_writes[-1].get("progress", {}).get("done") == 1:
            candidate.serve("/v1/completions")  # not the runner's

    api.on_status_write = live_traffic
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    overhead = status(api)["overhead"]
    if not states_seconds:
        assert "candidate" in overhead["error"]
        return
    assert "error" not in overhead, overhead
    assert overhead["requests"] == REQUESTS  # the runner's alone, not the live request
    assert overhead["engineSeconds"] == pytest.approx(REQUESTS * SECONDS_PER_REQUEST, abs=1e-3)


def test_an_engine_without_metrics_gives_the_reason() -> None:
    api = cluster()
    connector = engines()
    connector.engines[PROBE_URL].metrics_served = False
    assert run_check(api, "check", FAST, connector=connector.connector()) == EXIT_DONE
    error = status(api)["overhead"]["error"]
    assert "baseline probe" in error
    assert "/metrics" in error


def _target(side: str, url: str, probe: str | None) -> SideTarget:
    return SideTarget(
        side=side,  # type: ignore[arg-type]
        url=url,
        model="fixture",
        engine="toy",
        engine_version="1",
        dtype="float16",
        description=side,
        probe_url=probe,
    )


def test_an_engine_behind_several_sides_is_counted_once() -> None:
    found = check_engines(
        [_target("baseline", BASE_URL, PROBE_URL), _target("candidate", CAND_URL, CAND_URL)]
    )
    assert [(e.label, e.url) for e in found] == [
        ("baseline", BASE_URL),
        ("baseline probe", PROBE_URL),
        ("candidate", CAND_URL),
    ]
    same = check_engines(
        [_target("baseline", BASE_URL, None), _target("candidate", BASE_URL, None)]
    )
    assert [(e.label, e.url) for e in same] == [("baseline and candidate", BASE_URL)]


def test_requests_the_engine_does_not_count_are_not_compared() -> None:
    """vLLM's latency histogram leaves out /tokenize: the runner's count does too."""
    log = RequestLog()
    record = log.recorder(BASE_URL)
    for path in ("/v1/completions", "/tokenize", "/pooling"):
        record(path)
    before = (
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 5\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="m"} 1.0\n'
    )
    after = before.replace("} 5", "} 7").replace("} 1.0", "} 3.0")
    engine = check_engines([_target("baseline", BASE_URL, None)])
    found = measure(engine, {BASE_URL: before}, {BASE_URL: after}, log, wall_seconds=2.2,
                    concurrency=1)  # fmt: skip
    assert (found.requests, found.engine_seconds, found.ratio) == (2, 2.0, pytest.approx(1.1))
