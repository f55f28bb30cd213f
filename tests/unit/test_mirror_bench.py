"""bench-mirror's pure parts: latency figures, the paired bootstrap of a percentile
difference, the order of routes, and the Service table the mirror reads (no engines)."""

from __future__ import annotations

import itertools
from collections import Counter
from types import ModuleType

import pytest

from infergate.mirror.upstream import Endpoints, revision_service
from infergate.runner.endpoints import ready_endpoints
from tests.unit.scripts import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench/mirror_bench.py")


def test_summary_gives_linear_percentiles_and_the_mean(bench: ModuleType) -> None:
    figures = bench.summary([float(v) for v in range(1, 101)])
    assert figures == {
        "count": 100,
        "median_ms": 50.5,
        "p90_ms": 90.1,
        "p99_ms": 99.0,
        "mean_ms": 50.5,
    }
    assert bench.summary([]) == {"count": 0}


def test_a_constant_cost_of_the_mirror_is_found_with_its_sign_and_no_spread(
    bench: ModuleType,
) -> None:
    direct = [100.0 + 7 * (i % 13) for i in range(200)]
    mirror = [d + 10.0 for d in direct]
    for percentile in (50, 99):
        delta = bench.bootstrap_difference(direct, mirror, percentile)
        assert delta == {"point_ms": 10.0, "low_ms": 10.0, "high_ms": 10.0, "pairs": 200}
    faster = bench.bootstrap_difference(mirror, direct, 50)
    assert faster["point_ms"] == -10.0


def test_two_slow_requests_move_the_p99_but_its_interval_reaches_back_to_no_cost(
    bench: ModuleType,
) -> None:
    direct = [100.0 + (i % 10) for i in range(200)]
    mirror = list(direct)
    mirror[19] = mirror[159] = 5000.0  # two of the slowest, 1% of 200: the P99 lies among them
    median = bench.bootstrap_difference(direct, mirror, 50)
    p99 = bench.bootstrap_difference(direct, mirror, 99)
    assert median["point_ms"] == 0.0
    assert p99["point_ms"] > 0
    assert p99["low_ms"] <= 0.0 < p99["point_ms"] <= p99["high_ms"]


def test_the_bootstrap_refuses_unpaired_or_too_few_latencies(bench: ModuleType) -> None:
    with pytest.raises(ValueError, match="unpaired"):
        bench.bootstrap_difference([1.0, 2.0], [1.0], 50)
    with pytest.raises(ValueError, match="at least two"):
        bench.bootstrap_difference([1.0], [1.0], 50)


def test_a_failed_request_counts_as_failed_and_leaves_its_turn_out_of_the_pairs(
    bench: ModuleType,
) -> None:
    sample = bench.Sample
    samples = [
        sample(0, "direct", 100.0, True),
        sample(0, "mirror", 110.0, True),
        sample(1, "mirror", 120.0, True),
        sample(1, "direct", 900.0, False),
        sample(2, "direct", 102.0, True),
        sample(2, "mirror", 112.0, True),
    ]
    figures = bench.window_figures(samples)
    assert figures["failed"] == {"direct": 1, "mirror": 0}
    assert figures["routes"]["direct"]["count"] == 2
    assert figures["routes"]["mirror"]["count"] == 3
    assert figures["mirror_minus_direct"]["median"]["pairs"] == 2
    assert figures["mirror_minus_direct"]["median"]["point_ms"] == 10.0
    assert "| no_session | mirror | 3 | 112.0 |" in bench.table({"no_session": figures})


def test_neither_route_is_always_first_nor_first_only_for_one_kind_of_request(
    bench: ModuleType,
) -> None:
    first = {turn: bench.route_order(turn)[0] for turn in range(8)}
    greedy_first = [first[t] for t in first if bench.completion(t)["temperature"] == 0]
    sampled_first = [first[t] for t in first if bench.completion(t)["temperature"] != 0]
    for firsts in (greedy_first, sampled_first):
        assert sorted(firsts) == ["direct", "direct", "mirror", "mirror"]
    sent = [route for turn in range(8) for route in bench.route_order(turn)]
    follows = Counter(itertools.pairwise(sent))
    assert follows[("mirror", "direct")] == follows[("mirror", "mirror")] > 0


def test_the_drain_waits_for_copies_queued_or_being_scored(bench: ModuleType) -> None:
    counts = {"sampled": 10, "queued": 0, "scored": 7, "stableFailures": 1,
              "canaryFailures": 0, "refused": {"unusable": 1, "queueFull": 5}}  # fmt: skip
    assert bench.unfinished(counts) == 1, "queue empty, one copy still being scored"
    assert bench.unfinished({**counts, "scored": 8}) == 0
    assert bench.dropped(counts) == 6


def test_the_mirror_reads_the_stable_and_the_canary_at_the_local_engines(
    bench: ModuleType,
) -> None:
    reads = bench.LocalReads(stable_port=41001, canary_port=41002)
    canary = revision_service(reads, bench.DEPLOYMENT, bench.CANARY_REVISION)
    endpoints = ready_endpoints(canary, reads.endpoint_slices(canary["metadata"]["name"]))
    assert [e.url for e in endpoints] == ["http://127.0.0.1:41002"]
    stable = Endpoints(reads, bench.DEPLOYMENT)
    stable.read()
    assert stable.urls == ["http://127.0.0.1:41001"]
    assert stable.problem is None
