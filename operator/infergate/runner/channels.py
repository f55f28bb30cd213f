"""HTTP channels of a resolved side: serving client, hidden-state probe, self-description."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import httpx

from infergate.accounting import OverheadError
from infergate.engines.client import EngineClient, HiddenStateProbe
from infergate.runner.drive import Channels, SideUnavailableError
from infergate.runner.overhead import RequestLog
from infergate.runner.sides import EndpointDescription, SideTarget
from infergate.runtime.fingerprints import PROBE_TEXT

_DESCRIBE_TIMEOUT = 30.0
_SCRAPE_TIMEOUT = 10.0


class HttpEngineInfo:
    """Asks a server what it is: our adapters answer `/v1/parity/config`; vLLM `/version`."""

    def describe(self, url: str) -> EndpointDescription:
        try:
            with httpx.Client(base_url=url, timeout=_DESCRIBE_TIMEOUT) as http:
                answer = http.get("/v1/parity/config")
                if answer.status_code == 200:
                    body = answer.json()
                    return EndpointDescription(
                        engine=str(body.get("engine")),
                        engine_version=str(body.get("engine_version")),
                        dtype=str(body.get("dtype")),
                        effective_config=dict(body.get("effective_config") or {}),
                        fingerprints=dict(body.get("fingerprints") or {}),
                    )
                version = http.get("/version")
                if version.status_code == 200:
                    return EndpointDescription(engine_version=str(version.json().get("version")))
                return EndpointDescription()
        except httpx.HTTPError as err:
            raise SideUnavailableError(f"{url}: {type(err).__name__}: {err}") from err

    def fingerprints(self, url: str) -> dict[str, Any]:
        try:
            with httpx.Client(base_url=url, timeout=_DESCRIBE_TIMEOUT) as http:
                answer = http.get("/v1/parity/fingerprints")
                answer.raise_for_status()
                found: dict[str, Any] = answer.json()
                return found
        except (httpx.HTTPError, ValueError) as err:
            raise SideUnavailableError(f"{url}/v1/parity/fingerprints: {err}") from err

    def probe_ids(self, url: str, model: str) -> list[int]:
        try:
            with httpx.Client(base_url=url, timeout=_DESCRIBE_TIMEOUT) as http:
                answer = http.post("/tokenize", json={"model": model, "prompt": PROBE_TEXT})
                answer.raise_for_status()
                return [int(t) for t in answer.json()["tokens"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            raise SideUnavailableError(f"{url}/tokenize of the probe text: {err}") from err


def wait_healthy(urls: list[str], timeout: float) -> None:
    """Block until every URL answers GET /health with 200, or raise SideUnavailableError."""
    deadline = time.monotonic() + timeout
    for url in urls:
        while True:
            try:
                with httpx.Client(base_url=url, timeout=5.0) as http:
                    if http.get("/health").status_code == 200:
                        break
                    problem = "GET /health did not answer 200"
            except httpx.HTTPError as err:
                problem = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise SideUnavailableError(f"{url} is not healthy after {timeout:.0f}s: {problem}")
            time.sleep(1.0)


def scrape_metrics(url: str) -> str:
    """An engine's Prometheus metrics (GET /metrics), or OverheadError saying why not."""
    try:
        with httpx.Client(base_url=url, timeout=_SCRAPE_TIMEOUT) as http:
            answer = http.get("/metrics")
    except httpx.HTTPError as err:
        raise OverheadError(f"GET /metrics: {type(err).__name__}: {err}") from err
    if answer.status_code != 200:
        raise OverheadError(f"GET /metrics: HTTP {answer.status_code}")
    return answer.text


def open_channels(
    target: SideTarget, stack: ExitStack, request_timeout: float, log: RequestLog
) -> Channels:
    """The serving client and (if any) the probe of one side, closed with `stack`; every
    request they send is counted in `log` by engine URL and path."""
    serving = stack.enter_context(
        EngineClient(
            target.url,
            target.model,
            timeout=request_timeout,
            on_request=log.recorder(target.url),
            on_answer=log.answer_recorder(target.url),
        )
    )
    probe = None
    if target.probe_url is not None and target.probe_kind is not None:
        probe = stack.enter_context(
            HiddenStateProbe(
                target.probe_url,
                target.model,
                target.probe_kind,
                timeout=request_timeout,
                on_request=log.recorder(target.probe_url),
                on_answer=log.answer_recorder(target.probe_url),
            )
        )
    return Channels(name=f"{target.side} ({target.url})", serving=serving, probe=probe)
