"""The adapter's /metrics page: the series a scrape and the runner's overhead read."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from infergate.accounting import ADAPTER_CLOCK, engine_time, parse_samples
from infergate.runtime.metrics import AdapterMetrics

# A served model name a user may well write, and one that breaks hand-written label text.
ODD_MODEL = 'qwen "tiny" \\ v2\nnext'


def test_the_page_has_each_series_with_its_type_help_and_labels() -> None:
    metrics = AdapterMetrics(started=1_767_225_600.5)
    metrics.count("/v1/completions", 200)
    metrics.count("/v1/completions", 200)
    metrics.count("/tokenize", 400)
    metrics.prompt_tokens, metrics.generation_tokens, metrics.busy_seconds = 12, 4, 0.25

    families = {
        f.name: f for f in text_string_to_metric_families(metrics.render("transformers", ODD_MODEL))
    }

    assert {name: (f.type, f.documentation) for name, f in families.items()} == {
        "infergate_adapter_requests": ("counter", "Requests served, by route and status."),
        "infergate_adapter_prompt_tokens": ("counter", "Prompt tokens processed."),
        "infergate_adapter_generation_tokens": ("counter", "Tokens generated."),
        "infergate_adapter_busy_seconds": ("counter", "Seconds spent in the engine."),
        "infergate_adapter_start_time_seconds": ("gauge", "When the server started (Unix time)."),
    }
    model = {"engine": "transformers", "model_name": ODD_MODEL}
    requests = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in families["infergate_adapter_requests"].samples
    }
    assert requests == {("/tokenize", "400"): 1, ("/v1/completions", "200"): 2}
    assert all(
        {k: s.labels[k] for k in model} == model for f in families.values() for s in f.samples
    )
    [started] = families["infergate_adapter_start_time_seconds"].samples
    assert started.value == 1_767_225_600.5


def test_the_runner_reads_the_engine_time_back_for_an_odd_model_name() -> None:
    metrics = AdapterMetrics()
    metrics.count("/v1/completions", 200)
    before = metrics.render("transformers", ODD_MODEL)
    metrics.count("/v1/completions", 200)
    metrics.count("/health", 200)  # not an engine route: not counted as engine work
    metrics.busy_seconds += 1.5

    spent = engine_time(
        before, metrics.render("transformers", ODD_MODEL), ADAPTER_CLOCK, model=ODD_MODEL
    )

    assert (spent.requests, spent.seconds) == (1, 1.5)
    assert {s.labels["model_name"] for s in parse_samples(before)} == {ODD_MODEL}
