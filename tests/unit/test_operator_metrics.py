"""The operator's parity gauges: what a Prometheus scrape of /metrics shows."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import REGISTRY, generate_latest

from infergate import __version__, metrics


def _parity_samples(namespace: str, name: str) -> dict[str, float]:
    return {
        sample.labels["metric"]: sample.value
        for family in REGISTRY.collect()
        if family.name == "infergate_parity_metric"
        for sample in family.samples
        if sample.labels["namespace"] == namespace and sample.labels["name"] == name
    }


def test_parity_figures_are_scraped_per_deployment_and_metric() -> None:
    metrics.record_parity("llm", "qwen-a", {"tokenMatchRate": 0.96875, "meanKl": 1.5e-5})
    metrics.record_parity("llm", "qwen-b", {"tokenMatchRate": 1.0})
    assert _parity_samples("llm", "qwen-a") == {"tokenMatchRate": 0.96875, "meanKl": 1.5e-5}
    assert _parity_samples("llm", "qwen-b") == {"tokenMatchRate": 1.0}
    text = generate_latest(REGISTRY).decode()
    assert 'infergate_parity_metric{metric="tokenMatchRate",name="qwen-a",namespace="llm"}' in text


def test_a_new_verdict_replaces_the_figures_and_drops_those_it_lacks() -> None:
    metrics.record_parity("llm", "qwen-c", {"tokenMatchRate": 1.0, "hiddenCosineP1": 0.9999})
    metrics.record_parity("llm", "qwen-c", {"tokenMatchRate": 0.5})
    assert _parity_samples("llm", "qwen-c") == {"tokenMatchRate": 0.5}


def test_no_figures_keep_the_last_verdict_showing() -> None:
    metrics.record_parity("llm", "qwen-d", {"tokenMatchRate": 0.75})
    metrics.record_parity("llm", "qwen-d", {})
    assert _parity_samples("llm", "qwen-d") == {"tokenMatchRate": 0.75}


def test_a_deleted_deployment_stops_showing_figures() -> None:
    metrics.record_parity("llm", "qwen-e", {"tokenMatchRate": 1.0, "meanKl": 0.0})
    metrics.forget("llm", "qwen-e")
    assert _parity_samples("llm", "qwen-e") == {}


def _condition_samples(namespace: str, name: str) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["type"], sample.labels["status"]): sample.value
        for family in REGISTRY.collect()
        if family.name == "infergate_deployment_condition"
        for sample in family.samples
        if sample.labels["namespace"] == namespace and sample.labels["name"] == name
    }


def test_conditions_are_scraped_as_one_true_status_per_type_and_follow_the_status() -> None:
    metrics.record_conditions("llm", "qwen-e", [("ConfigDrifted", "True"), ("Available", "True")])
    shown = _condition_samples("llm", "qwen-e")
    assert shown[("ConfigDrifted", "True")] == 1.0
    assert shown[("ConfigDrifted", "False")] == 0.0
    assert shown[("Available", "True")] == 1.0
    # The drift is repaired and the condition type goes away: no stale True stays behind.
    metrics.record_conditions("llm", "qwen-e", [("Available", "False")])
    shown = _condition_samples("llm", "qwen-e")
    assert not any(kind == "ConfigDrifted" for kind, _ in shown)
    assert shown[("Available", "False")] == 1.0
    metrics.forget("llm", "qwen-e")
    assert _condition_samples("llm", "qwen-e") == {}


def test_the_build_is_one_series_at_1_naming_the_version() -> None:
    samples = [
        sample
        for family in REGISTRY.collect()
        if family.name == "infergate_build"
        for sample in family.samples
    ]
    assert [(s.name, s.value) for s in samples] == [("infergate_build_info", 1.0)]
    assert samples[0].labels["version"] == __version__
    assert samples[0].labels["python"] == platform.python_version()
    text = generate_latest(REGISTRY).decode()
    assert (
        f'infergate_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
        in text
    )


def test_readiness_and_metrics_share_the_metrics_port() -> None:
    import socket
    import urllib.error
    import urllib.request

    from infergate import metrics

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics.serve("127.0.0.1", port)
    base = f"http://127.0.0.1:{port}"
    metrics.READY.clear()
    try:
        # Starting (or stopping): alive, but not ready to be counted on.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/readyz", timeout=5)  # noqa: S310 - loopback
        assert refused.value.code == 503
        metrics.READY.set()
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as answer:  # noqa: S310
            assert answer.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:  # noqa: S310
            assert b"infergate_build_info" in answer.read()
    finally:
        metrics.READY.clear()
