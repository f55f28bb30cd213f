"""What one run of the runner is given, and the two ways an attempt ends early.

A run is given the API it reads and writes the check through (`RunnerApi`), how it
paces itself (`RunOptions`), how it talks to engines (`Connector`) and a clock; the
steps of `runner.steps` read them from one `RunContext` and never change it.

Fail closed: a step that cannot measure raises `RetryableRunError` when another
attempt may succeed (a side unreachable, the API server away: the Job retries) or
`CheckEndedError` when none can (a side that does not exist, an invalid suite: the
check ends in Error at once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from infergate.api.golden import GoldenSpec
from infergate.runner.channels import HttpEngineInfo, open_channels, scrape_metrics, wait_healthy
from infergate.runner.drive import Channels
from infergate.runner.layers import LayerOpener, open_layer_probe
from infergate.runner.overhead import RequestLog, Scrape
from infergate.runner.sides import ClusterReads, EngineInfo, SideTarget

EXIT_DONE = 0
"""The check has its verdict, or ended in Error, or needed nothing: the Job succeeds."""
EXIT_RETRY = 3
"""This attempt failed in a way another may not: the Job retries."""


class RunnerApi(ClusterReads, Protocol):
    """The API calls the runner makes (implemented by `infergate.kube.paritycheck_api`)."""

    namespace: str

    def get_check(self, name: str) -> dict[str, Any]: ...

    def patch_check_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]: ...

    def replace_check_status(self, check: Mapping[str, Any]) -> dict[str, Any]: ...

    def inference_deployments(self) -> list[dict[str, Any]]:
        """Every InferenceDeployment of the namespace (golden retention; needs `list`)."""
        ...

    def write_report(
        self,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, str],
        labels: Mapping[str, str],
        owner: Mapping[str, Any] | None,
    ) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """How the runner paces itself."""

    concurrency: int = 2
    """Prompts in flight at once (each holds one prompt pair in memory)."""
    request_timeout: float = 600.0
    """Seconds one engine request may take before the side counts as failing."""
    wait_for_sides: float = 120.0
    """Seconds to wait for sides' endpoints to be ready before giving up (a retry)."""
    progress_interval: float = 2.0
    """Least seconds between two progress writes to the status."""
    previous_report: str | None = None
    """Report ConfigMap of the last passing check, for the regression test."""
    golden: GoldenSpec | None = None
    """The operator's golden record store and size policy (None: no records are kept)."""
    environ: Mapping[str, str] | None = None
    """Where the S3 keys and the store's mount override are read (None: os.environ)."""


@dataclass(frozen=True)
class Connector:
    """How the runner talks to engines: over HTTP, or (in unit tests) in process."""

    info: EngineInfo = field(default_factory=HttpEngineInfo)
    open: Callable[[SideTarget, ExitStack, float, RequestLog], Channels] = open_channels
    health: Callable[[list[str], float], None] = wait_healthy
    layers: LayerOpener = open_layer_probe
    scrape: Scrape = scrape_metrics
    """An engine's /metrics text, for the runner's overhead."""


@dataclass(frozen=True)
class RunContext:
    """The fixed inputs of one run: which check, through which API, paced how."""

    api: RunnerApi
    name: str
    """The ParityCheck's name (in `api.namespace`)."""
    options: RunOptions
    connector: Connector
    clock: Callable[[], datetime]
    """Wall-clock time for status timestamps (UTC)."""


class RetryableRunError(RuntimeError):
    """This attempt failed in a way another attempt may not; exit for the Job to retry."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CheckEndedError(RuntimeError):
    """The check cannot be measured; it ends in Error with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def say(message: str) -> None:
    """One line in the runner's pod log."""
    print(f"[parity-runner] {message}", flush=True)  # noqa: T201 - the pod log is the user's view
