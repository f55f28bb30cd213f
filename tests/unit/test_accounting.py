"""Runner overhead from two scrapes of the engines' metrics (infergate.accounting)."""

from __future__ import annotations

import pytest

from infergate.accounting import (
    ADAPTER_CLOCK,
    VLLM_CLOCK,
    EngineTime,
    OverheadError,
    clock_of,
    describe_overhead,
    engine_time,
    engine_time_from_answers,
    overhead_fields,
    parse_samples,
    runner_overhead,
)


def _vllm(count: int, seconds: float, *, other_count: int = 0, other_seconds: float = 0) -> str:
    """A vLLM /metrics page: the served model, and another model served by the same engine."""
    return f"""\
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{{engine="0",le="0.3",model_name="qwen"}} {count}
vllm:e2e_request_latency_seconds_bucket{{engine="0",le="+Inf",model_name="qwen"}} {count}
vllm:e2e_request_latency_seconds_count{{engine="0",model_name="qwen"}} {count}.0
vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="qwen"}} {seconds}
vllm:e2e_request_latency_seconds_count{{engine="0",model_name="other"}} {other_count}.0
vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="other"}} {other_seconds}
vllm:num_requests_running{{engine="0",model_name="qwen"}} 0.0
"""


def _adapter(completions: int, hidden: int, health: int, metrics: int, busy: float) -> str:
    labels = 'engine="mindformers",model_name="qwen"'
    return f"""\
# TYPE infergate_adapter_requests_total counter
infergate_adapter_requests_total{{{labels},route="/health",status="200"}} {health}
infergate_adapter_requests_total{{{labels},route="/metrics",status="200"}} {metrics}
infergate_adapter_requests_total{{{labels},route="/v1/completions",status="200"}} {completions}
infergate_adapter_requests_total{{{labels},route="/v1/parity/hidden_states",status="200"}} {hidden}
# TYPE infergate_adapter_busy_seconds_total counter
infergate_adapter_busy_seconds_total{{{labels}}} {busy:.6f}
"""


def test_vllm_time_is_the_change_of_the_latency_sum_and_count_of_the_served_model() -> None:
    before = _vllm(10, 3.5, other_count=4, other_seconds=1.0)
    after = _vllm(18, 6.7, other_count=9, other_seconds=5.0)
    served = engine_time(before, after, VLLM_CLOCK, model="qwen")
    assert served.requests == 8
    assert served.seconds == pytest.approx(3.2)
    # Without a model, every series of the engine counts.
    every = engine_time(before, after, VLLM_CLOCK)
    assert every.requests == 13
    assert every.seconds == pytest.approx(7.2)


def test_adapter_time_counts_engine_routes_only() -> None:
    # Between the scrapes: 16 completions (8 generations, 8 teacher-forced scores) and 8
    # hidden-state calls; health checks and the scrape itself do not run the engine.
    before = _adapter(completions=4, hidden=2, health=30, metrics=1, busy=1.25)
    after = _adapter(completions=20, hidden=10, health=45, metrics=2, busy=6.05)
    measured = engine_time(before, after, ADAPTER_CLOCK)
    assert measured.requests == 24
    assert measured.seconds == pytest.approx(4.8)


def test_overhead_of_a_check_over_both_sides() -> None:
    sides = {"baseline": EngineTime(8, 3.2), "candidate": EngineTime(24, 4.8)}
    one_at_a_time = runner_overhead(
        8.8, sides, sent={"baseline": 8, "candidate": 24}, concurrency=1
    )
    assert one_at_a_time.engine_seconds == pytest.approx(8.0)
    assert one_at_a_time.requests == 32
    assert one_at_a_time.ratio == pytest.approx(1.10)
    assert one_at_a_time.ratio_bound == pytest.approx(1.10)
    # Two prompts in flight: the engines may have worked at once, so up to twice that.
    two = runner_overhead(8.8, sides, sent={"baseline": 8, "candidate": 24}, concurrency=2)
    assert two.ratio == pytest.approx(1.10)
    assert two.ratio_bound == pytest.approx(2.20)


def test_an_engine_that_served_others_in_the_window_gives_no_figure() -> None:
    """Live traffic on the stable counts in its histogram: the time is not the check's."""
    sides = {"baseline": EngineTime(11, 4.1), "candidate": EngineTime(24, 4.8)}
    with pytest.raises(OverheadError, match=r"baseline: the engine counted 11 .* runner sent 8"):
        runner_overhead(8.8, sides, sent={"baseline": 8, "candidate": 24}, concurrency=1)


def test_counters_that_went_backwards_give_no_figure() -> None:
    with pytest.raises(OverheadError, match="backwards"):
        engine_time(_vllm(18, 6.7), _vllm(3, 0.9), VLLM_CLOCK, model="qwen")


def test_a_scrape_without_the_engine_metric_is_an_error_naming_it() -> None:
    with pytest.raises(OverheadError, match=r"vllm:e2e_request_latency_seconds_sum.*'qwen'"):
        engine_time("up 1\n", _vllm(1, 0.1), VLLM_CLOCK, model="qwen")


@pytest.mark.parametrize(
    ("wall", "sides", "sent", "concurrency", "message"),
    [
        (0.0, {"b": EngineTime(1, 1.0)}, {"b": 1}, 1, "wall_seconds"),
        (float("nan"), {"b": EngineTime(1, 1.0)}, {"b": 1}, 1, "wall_seconds"),
        (1.0, {"b": EngineTime(1, 1.0)}, {"b": 1}, 0, "concurrency"),
        (1.0, {}, {}, 1, "sides: none"),
        (1.0, {"b": EngineTime(1, 1.0)}, {"c": 1}, 1, "differ"),
        (1.0, {"b": EngineTime(0, 0.0)}, {"b": 0}, 1, "no time"),
    ],
)
def test_inputs_that_cannot_give_a_ratio_are_refused(
    wall: float,
    sides: dict[str, EngineTime],
    sent: dict[str, int],
    concurrency: int,
    message: str,
) -> None:
    with pytest.raises(OverheadError, match=message):
        runner_overhead(wall, sides, sent=sent, concurrency=concurrency)


def test_label_values_with_escapes_and_timestamps_are_read() -> None:
    text = 'm{a="x\\"y",b="p\\\\q",c="1,2"} 2.5 1700000000000\nn 3\n'
    samples = parse_samples(text)
    assert [(s.name, dict(s.labels), s.value) for s in samples] == [
        ("m", {"a": 'x"y', "b": "p\\q", "c": "1,2"}, 2.5),
        ("n", {}, 3.0),
    ]


def test_a_line_that_is_not_a_sample_is_an_error_with_its_number() -> None:
    with pytest.raises(OverheadError, match="line 2"):
        parse_samples("a 1\nthis is not a metric line at all\n")


def test_the_engine_is_known_by_the_metrics_it_serves() -> None:
    assert clock_of(_vllm(1, 0.1)) is VLLM_CLOCK
    assert clock_of(_adapter(1, 0, 1, 0, 0.1)) is ADAPTER_CLOCK
    with pytest.raises(OverheadError, match="no engine time"):
        clock_of("process_cpu_seconds_total 3.2\n")


def test_a_route_the_adapter_has_not_served_yet_counts_zero() -> None:
    labels = 'engine="mindformers",model_name="qwen"'
    fresh = (
        f'infergate_adapter_requests_total{{{labels},route="/health",status="200"}} 1\n'
        f"infergate_adapter_busy_seconds_total{{{labels}}} 0.0\n"
    )
    served = engine_time(fresh, _adapter(4, 2, 1, 1, 0.8), ADAPTER_CLOCK)
    assert (served.requests, served.seconds) == (6, pytest.approx(0.8))


def test_status_fields_and_the_line_for_people() -> None:
    found = runner_overhead(
        2.2, {"baseline": EngineTime(4, 1.0), "candidate": EngineTime(4, 1.0)},
        sent={"baseline": 4, "candidate": 4}, concurrency=1,
    )  # fmt: skip
    fields = overhead_fields(found)
    assert fields == {
        "ratio": 1.1,
        "ratioBound": 1.1,
        "wallSeconds": 2.2,
        "engineSeconds": 2.0,
        "requests": 8,
        "concurrency": 1,
    }
    assert describe_overhead(fields).startswith("runner overhead 1.1 (wall 2.2 s over 2.0 s")
    error = overhead_fields(OverheadError("baseline: the engine counted 9 requests"))
    assert error == {"error": "baseline: the engine counted 9 requests"}
    assert "not attributed: baseline" in describe_overhead(error)


@pytest.mark.parametrize(
    ("sent", "stated", "expected"),
    [
        (3, ["0.5", "0.25", "0.000001"], EngineTime(requests=3, seconds=0.750001)),
        (2, ["0.5", None], None),  # one answer stated nothing: metrics decide
        (3, ["0.5", "0.5"], None),  # an answer missing (fewer answers than requests)
        (1, ["-0.1"], None),
        (1, ["nan"], None),
        (1, ["inf"], None),
        (1, ["soon"], None),
        (0, [], None),
    ],
)
def test_engine_time_from_answers_stands_only_for_every_request(
    sent: int, stated: list[str | None], expected: EngineTime | None
) -> None:
    found = engine_time_from_answers(sent, stated)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert found.requests == expected.requests
        assert found.seconds == pytest.approx(expected.seconds)
