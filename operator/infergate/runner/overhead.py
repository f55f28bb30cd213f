"""The runner's overhead on a check: its wall time over the engines' own time.

Around driving the suite the runner scrapes every engine a check talks to (each side's
serving engine, and its hidden-state probe when that is an engine of its own) and counts
the requests it sends to each by path, with the engine seconds each answer states when
the engine states them (infergate's adapter does); `infergate.accounting` turns the scrapes,
the counts and the stated seconds into the figure, or says why the engines' time is not
the check's alone. An engine whose every answer to the runner stated its seconds is
timed by those (exact also while other clients use it); any other by its metrics.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infergate.accounting import (
    EngineTime,
    Overhead,
    OverheadError,
    clock_of,
    describe_overhead,
    engine_time,
    engine_time_from_answers,
    overhead_fields,
    runner_overhead,
)
from infergate.runner.sides import SideTarget

Scrape = Callable[[str], str]
"""GET <engine url>/metrics: its text, or OverheadError saying why not."""


class RequestLog:
    """The requests the runner sent, by engine URL and path (prompts run in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._stated: dict[tuple[str, str], list[str | None]] = {}

    def recorder(self, url: str) -> Callable[[str], None]:
        """What a channel to `url` calls with the path of each request it sends."""

        def record(path: str) -> None:
            with self._lock:
                self._counts[(url, path)] += 1

        return record

    def answer_recorder(self, url: str) -> Callable[[str, str | None], None]:
        """What a channel to `url` calls with the path of each successful answer and the
        engine seconds it stated (None when it stated none)."""

        def record(path: str, seconds: str | None) -> None:
            with self._lock:
                self._stated.setdefault((url, path), []).append(seconds)

        return record

    def stated(self, url: str, paths: Iterable[str]) -> list[str | None]:
        """The engine seconds the answers from `url` on `paths` stated, one per answer."""
        wanted = frozenset(paths)
        with self._lock:
            return [s for (u, p), got in self._stated.items() if u == url and p in wanted
                    for s in got]  # fmt: skip

    def sent(self, url: str, paths: Iterable[str]) -> int:
        wanted = frozenset(paths)
        with self._lock:
            return sum(n for (u, p), n in self._counts.items() if u == url and p in wanted)


@dataclass(frozen=True)
class Engine:
    """One engine a check talks to; `label` names the sides it serves."""

    label: str
    url: str


def check_engines(targets: Iterable[SideTarget]) -> list[Engine]:
    """Every engine behind the sides, once each (a probe that is the serving engine is one)."""
    labels: dict[str, list[str]] = {}
    for target in targets:
        labels.setdefault(target.url, []).append(target.side)
        if target.probe_url is not None and target.probe_url != target.url:
            labels.setdefault(target.probe_url, []).append(f"{target.side} probe")
    return [Engine(" and ".join(names), url) for url, names in labels.items()]


def scrape_all(engines: Iterable[Engine], scrape: Scrape) -> dict[str, str]:
    """Each engine's /metrics text by URL; OverheadError naming the engine that failed."""
    pages = {}
    for engine in engines:
        try:
            pages[engine.url] = scrape(engine.url)
        except OverheadError as err:
            raise OverheadError(f"{engine.label} at {engine.url}: {err}") from err
    return pages


def measure(
    engines: Iterable[Engine],
    before: Mapping[str, str],
    after: Mapping[str, str],
    log: RequestLog,
    *,
    wall_seconds: float,
    concurrency: int,
) -> Overhead:
    """The overhead of the window between the scrapes, or OverheadError saying why not."""
    times: dict[str, EngineTime] = {}
    sent: dict[str, int] = {}
    for engine in engines:
        try:
            clock = clock_of(after[engine.url])
            sent[engine.label] = log.sent(engine.url, clock.paths)
            stated = engine_time_from_answers(
                sent[engine.label], log.stated(engine.url, clock.paths)
            )
            times[engine.label] = stated or engine_time(
                before[engine.url], after[engine.url], clock
            )
        except OverheadError as err:
            raise OverheadError(f"{engine.label} at {engine.url}: {err}") from err
    return runner_overhead(wall_seconds, times, sent=sent, concurrency=concurrency)


def first_scrape(
    engines: Iterable[Engine], scrape: Scrape
) -> tuple[dict[str, str] | None, dict[str, Any]]:
    """Every engine's metrics before a window, or None and the status field saying why not."""
    try:
        return scrape_all(engines, scrape), {}
    except OverheadError as err:
        return None, overhead_fields(err)


def window_overhead(
    engines: list[Engine],
    before: Mapping[str, str],
    scrape: Scrape,
    log: RequestLog,
    *,
    wall_seconds: float,
    concurrency: int,
) -> dict[str, Any]:
    """The status field of the window that just ended (its second scrape now), or why not."""
    try:
        after = scrape_all(engines, scrape)
        found = measure(
            engines, before, after, log, wall_seconds=wall_seconds, concurrency=concurrency
        )
    except OverheadError as err:
        return overhead_fields(err)
    return overhead_fields(found)


def describe(fields: Mapping[str, Any]) -> str:
    """The status field in one log line."""
    return describe_overhead(fields)
