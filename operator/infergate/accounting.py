"""Engine-time accounting: a check's wall time over the time the engines spent on its requests.

Shared by the runner (which scrapes and counts), the adapter inside engine pods and the
engine client (which state and read each request's engine seconds), and the report;
none of it decides parity, so it lives beside the parity core, not in it.

The engines say how long they worked, in their Prometheus metrics, scraped just before
the runner starts sending a side requests and just after its last answer:

- vLLM: the histogram `vllm:e2e_request_latency_seconds` (its `_sum` and `_count`), the
  time from a request's arrival at the engine to its last token, queueing included. It
  counts generation and pooling requests, not /tokenize.
- infergate's adapter (MindFormers, transformers): `infergate_adapter_busy_seconds_total`,
  the time inside the engine (calls are serialised, so it never counts one second twice),
  and `infergate_adapter_requests_total` by route, of which the engine routes count.
  The adapter also answers each request with its own engine seconds in the header
  `ENGINE_SECONDS_HEADER`: summed over the runner's requests, that is the engine's time
  for the check's requests alone, also while other clients use the engine (a stable
  revision that serves traffic during its check), so it is preferred when every request
  the runner sent to that engine carried it (`engine_time_from_answers`).

`runner_overhead` divides the runner's wall time by the sum of the engines' seconds over
every side (baseline, candidate, and their hidden-state probes when they are engines of
their own). When the runner sends one request at a time (concurrency 1), the engines'
intervals never overlap and the ratio is exact: 1.0 would be a runner that costs nothing.
With `concurrency` requests in flight the engines may work at the same time, so the sum
can count one wall second up to `concurrency` times: `ratio` is then a lower bound and
`ratio_bound` (`concurrency` times it) the upper one.

Fail closed: a figure is given only when it can be attributed to the check. An engine
that counted other requests than the runner sent in the window (live traffic on the
stable, another check) or whose counters went backwards (a restart) gives no figure
but an `OverheadError` that says which side and why.

Pure: the caller scrapes (it has the HTTP client); this module reads text and numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

# The adapter routes that run the engine (infergate.runtime.server, those that go through
# its engine lock); /health, /metrics and the like do not.
ADAPTER_ENGINE_ROUTES = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/parity/hidden_states",
        "/v1/parity/layer_states",
        "/tokenize",
        "/detokenize",
    }
)
# The vLLM routes whose requests end in its e2e latency histogram: generation and pooling
# requests reach the engine core; /tokenize and /detokenize are answered by the API server.
VLLM_ENGINE_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions", "/pooling"})


# The adapter's answer header with the seconds that request spent inside the engine.
ENGINE_SECONDS_HEADER = "X-Infergate-Engine-Seconds"


class OverheadError(ValueError):
    """The scrapes cannot give the overhead of this check; the message says why."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_samples(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and blank lines skipped)."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SAMPLE.match(stripped)
        if match is None:
            raise OverheadError(f"metrics line {number}: not a sample: {stripped[:80]!r}")
        labels = {}
        for key, raw in _LABEL.findall(match.group("labels") or ""):
            labels[key] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], raw)
        try:
            value = float(match.group("value"))
        except ValueError as err:
            raise OverheadError(f"metrics line {number}: value is not a number") from err
        samples.append(Sample(match.group("name"), labels, value))
    return samples


@dataclass(frozen=True)
class EngineClock:
    """Which metrics give an engine's own seconds and its request count."""

    seconds: str
    requests: str
    paths: frozenset[str]  # the request paths this engine counts (what a client must count)
    routes: frozenset[str] | None = None  # count only these `route` labels, if set


VLLM_CLOCK = EngineClock(
    seconds="vllm:e2e_request_latency_seconds_sum",
    requests="vllm:e2e_request_latency_seconds_count",
    paths=VLLM_ENGINE_ROUTES,
)
ADAPTER_CLOCK = EngineClock(
    seconds="infergate_adapter_busy_seconds_total",
    requests="infergate_adapter_requests_total",
    paths=ADAPTER_ENGINE_ROUTES,
    routes=ADAPTER_ENGINE_ROUTES,
)
CLOCKS = (VLLM_CLOCK, ADAPTER_CLOCK)


def clock_of(text: str) -> EngineClock:
    """The clock of the engine whose /metrics page this is, by the metrics it serves."""
    names = {s.name for s in parse_samples(text)}
    for clock in CLOCKS:
        if clock.seconds in names and clock.requests in names:
            return clock
    raise OverheadError(
        "its metrics have none of "
        + ", ".join(c.seconds for c in CLOCKS)
        + ": no engine time to compare with"
    )


@dataclass(frozen=True)
class EngineTime:
    """What one engine did between two scrapes."""

    requests: int
    seconds: float


def _total(
    samples: list[Sample], name: str, model: str | None, routes: frozenset[str] | None
) -> float:
    found = [
        s
        for s in samples
        if s.name == name and (model is None or s.labels.get("model_name") == model)
    ]
    if not found:
        which = f" for model {model!r}" if model is not None else ""
        raise OverheadError(f"metric {name}{which} is not in the scrape")
    # A counter by route shows a route only once it was asked: an absent route is zero.
    return sum(s.value for s in found if routes is None or s.labels.get("route") in routes)


def engine_time(
    before: str, after: str, clock: EngineClock, *, model: str | None = None
) -> EngineTime:
    """The requests and seconds an engine counted between two scrapes of its /metrics.

    `model` keeps only the series of that served model (label `model_name`).
    """
    first, last = parse_samples(before), parse_samples(after)
    seconds = _total(last, clock.seconds, model, None) - _total(first, clock.seconds, model, None)
    requests = _total(last, clock.requests, model, clock.routes) - _total(
        first, clock.requests, model, clock.routes
    )
    if seconds < 0 or requests < 0:
        raise OverheadError(
            f"{clock.seconds}: counters went backwards between the scrapes (the engine restarted?)"
        )
    return EngineTime(requests=round(requests), seconds=seconds)


def engine_time_from_answers(sent: int, stated: list[str | None]) -> EngineTime | None:
    """The engine's time for the runner's requests from the seconds each answer stated
    (header ENGINE_SECONDS_HEADER), or None when they cannot stand for all of them: an
    answer without the header (an engine that does not state it), fewer answers than
    requests sent, or a value that is not a finite, non-negative number."""
    if sent < 1 or len(stated) != sent:
        return None
    total = 0.0
    for raw in stated:
        if raw is None:
            return None
        try:
            seconds = float(raw)
        except ValueError:
            return None
        if not math.isfinite(seconds) or seconds < 0:
            return None
        total += seconds
    return EngineTime(requests=sent, seconds=total)


@dataclass(frozen=True)
class Overhead:
    """The runner's wall time over the engines' own time for the same requests."""

    wall_seconds: float
    engine_seconds: float
    requests: int
    concurrency: int
    ratio: float  # exact when requests never overlap (concurrency 1), else a lower bound
    ratio_bound: float  # concurrency x ratio: the most it can be with overlapping requests


def runner_overhead(
    wall_seconds: float,
    sides: Mapping[str, EngineTime],
    *,
    sent: Mapping[str, int],
    concurrency: int,
) -> Overhead:
    """The overhead of one check; `sent`: the requests the runner sent to each side's
    engine (counted as the engine counts them) in the window of its scrapes."""
    if not math.isfinite(wall_seconds) or wall_seconds <= 0:
        raise OverheadError(f"wall_seconds: {wall_seconds} is not allowed; give a positive time")
    if concurrency < 1:
        raise OverheadError(f"concurrency: {concurrency} is not allowed; it is at least 1")
    if not sides:
        raise OverheadError("sides: none given; give each engine's time")
    if set(sides) != set(sent):
        raise OverheadError(
            f"sent: sides {sorted(sent)} differ from the engines' sides {sorted(sides)}"
        )
    for side, time in sides.items():
        if time.requests != sent[side]:
            raise OverheadError(
                f"{side}: the engine counted {time.requests} requests in the window, the "
                f"runner sent {sent[side]}: its time is not the check's alone"
            )
    engine = sum(t.seconds for t in sides.values())
    if engine <= 0:
        raise OverheadError("the engines counted no time: nothing to compare the wall time with")
    ratio = wall_seconds / engine
    return Overhead(
        wall_seconds=wall_seconds,
        engine_seconds=engine,
        requests=sum(t.requests for t in sides.values()),
        concurrency=concurrency,
        ratio=ratio,
        ratio_bound=ratio * concurrency,
    )


GOAL = 1.10
"""The goal for the ratio (issue 16: a runner that costs nothing beside the engines)."""


def overhead_fields(found: Overhead | OverheadError) -> dict[str, float | int | str]:
    """The figure as ParityCheck status and the report carry it (camelCase), or why not."""
    if isinstance(found, OverheadError):
        return {"error": str(found)}
    return {
        "ratio": round(found.ratio, 4),
        "ratioBound": round(found.ratio_bound, 4),
        "wallSeconds": round(found.wall_seconds, 3),
        "engineSeconds": round(found.engine_seconds, 3),
        "requests": found.requests,
        "concurrency": found.concurrency,
    }


def describe_overhead(fields: Mapping[str, object]) -> str:
    """One line for people from `overhead_fields` (the status or the report's document)."""
    if fields.get("error"):
        return f"runner overhead: not attributed: {fields['error']}"
    ratio, bound = fields.get("ratio"), fields.get("ratioBound")
    concurrency = fields.get("concurrency")
    text = (
        f"runner overhead {ratio} (wall {fields.get('wallSeconds')} s over "
        f"{fields.get('engineSeconds')} s of engine time for {fields.get('requests')} requests"
    )
    if concurrency != 1:
        text += f"; {concurrency} prompts in flight, so at most {bound} if the engines overlapped"
    return text + f"; goal <= {GOAL:.2f})"
