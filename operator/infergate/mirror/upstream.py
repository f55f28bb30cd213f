"""Where the mirror sends requests: ready endpoints of a Service, re-read every few seconds.

The mirror never dials a ClusterIP (there may be no kube-proxy): like the runner it
reads the Service's EndpointSlices and picks a ready endpoint itself, round robin. A
read that fails keeps the last endpoints known, so an API server hiccup never fails a
client's request. Like the runner, it reads only the slices the cluster published for
the Service (`runner.endpoints.trusted_slices`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
from typing import Protocol

from infergate.jsontypes import JSON
from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, LABEL_REVISION, MANAGED_BY
from infergate.runner.endpoints import (
    EndpointResolutionError,
    ignored_note,
    ready_endpoints,
    trusted_slices,
)

log = logging.getLogger(__name__)
REVISION_PATTERN = re.compile(r"^[0-9a-f]{10}$")


class ServiceReads(Protocol):
    """The reads the mirror makes (its Role: get Services, list EndpointSlices)."""

    def service(self, name: str) -> JSON | None: ...

    def endpoint_slices(self, service: str) -> list[JSON]: ...


class NotARevisionError(ValueError):
    """A Service asked for as a revision is not one of this deployment's."""


def revision_service(reads: ServiceReads, deployment: str, revision: str) -> JSON:
    """The revision Service `<deployment>-<revision>`, only if infergate made it for this
    deployment: a session can copy live requests to nothing else."""
    if not REVISION_PATTERN.match(revision):
        raise NotARevisionError(f"{revision!r} is not a revision (10 hex digits)")
    name = f"{deployment}-{revision}"
    service = reads.service(name)
    labels = ((service or {}).get("metadata") or {}).get("labels") or {}
    if (
        service is None
        or labels.get(LABEL_MANAGED_BY) != MANAGED_BY
        or labels.get(LABEL_DEPLOYMENT) != deployment
        or labels.get(LABEL_REVISION) != revision
    ):
        raise NotARevisionError(f"Service {name} is not a revision Service of {deployment}")
    return service


class Endpoints:
    """The ready URLs of one Service, refreshed in the background."""

    def __init__(self, reads: ServiceReads, service: str, *, refresh: float = 2.0) -> None:
        self.reads, self.service, self.refresh = reads, service, refresh
        self.urls: list[str] = []
        self.problem: str | None = "not read yet"
        self._turn = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def read(self) -> None:
        """Read the endpoints now (blocking: call from a thread)."""
        service = self.reads.service(self.service)
        if service is None:
            self.urls, self.problem = [], f"Service {self.service} does not exist"
            return
        try:
            trusted, ignored = trusted_slices(service, self.reads.endpoint_slices(self.service))
            found = ready_endpoints(service, trusted)
        except EndpointResolutionError as err:
            self.urls, self.problem = [], str(err)
            return
        self.urls = [e.url for e in found]
        self.problem = None if self.urls else f"Service {self.service} has no ready endpoint"
        if self.problem:
            self.problem += ignored_note(ignored)

    def pick(self) -> str | None:
        """A ready URL, round robin; None when there is none."""
        urls = self.urls
        return urls[next(self._turn) % len(urls)] if urls else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"endpoints {self.service}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.read)
            except Exception as err:  # noqa: BLE001 - keep the last endpoints known
                log.warning("reading endpoints of %s failed: %s", self.service, err)
            await asyncio.sleep(self.refresh)
