"""The adapter server's own Prometheus metrics: what it served and how long the engine worked.

The server bumps plain counts (requests by route and status, prompt and generated tokens,
seconds inside the engine); `render` turns them into the Prometheus text format through
prometheus_client, which writes the HELP and TYPE lines and escapes label values (a served
model name may hold a quote or a backslash). The runner reads the busy seconds and the
request counts back (`infergate.parity.overhead`).

A collector of our own rather than prometheus_client's `Counter` objects: each server keeps
its own counts (tests run several in one process, and the default registry is global), and
the page carries no `_created` series it never had.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# What the page is, for the response's Content-Type (the classic text format).
METRICS_CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

_LABELS = ["engine", "model_name"]


@dataclass
class AdapterMetrics:
    """The counts behind `/metrics`, since the server started."""

    started: float = field(default_factory=time.time)
    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    busy_seconds: float = 0.0

    def count(self, route: str, status: int) -> None:
        """One answered request on `route` with HTTP `status`."""
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def families(self, engine: str, model: str) -> list[Metric]:
        """The metric families of the page, each sample labelled with the engine and model."""
        labels = [engine, model]
        requests = CounterMetricFamily(
            "infergate_adapter_requests_total",
            "Requests served, by route and status.",
            labels=[*_LABELS, "route", "status"],
        )
        for (route, status), value in sorted(self.requests.items()):
            requests.add_metric([*labels, route, str(status)], value)
        prompt = CounterMetricFamily(
            "infergate_adapter_prompt_tokens_total", "Prompt tokens processed.", labels=_LABELS
        )
        prompt.add_metric(labels, self.prompt_tokens)
        generation = CounterMetricFamily(
            "infergate_adapter_generation_tokens_total", "Tokens generated.", labels=_LABELS
        )
        generation.add_metric(labels, self.generation_tokens)
        busy = CounterMetricFamily(
            "infergate_adapter_busy_seconds_total", "Seconds spent in the engine.", labels=_LABELS
        )
        busy.add_metric(labels, self.busy_seconds)
        started = GaugeMetricFamily(
            "infergate_adapter_start_time_seconds",
            "When the server started (Unix time).",
            labels=_LABELS,
        )
        started.add_metric(labels, self.started)
        return [requests, prompt, generation, busy, started]

    def render(self, engine: str, model: str) -> str:
        """The Prometheus text of the page."""
        return generate_latest(_Families(self.families(engine, model))).decode("utf-8")


class _Families(Collector):
    """Fixed families as a collector, the shape `generate_latest` reads."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)
