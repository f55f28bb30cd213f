"""Process-wide state of the operator: options, the API client, wake-ups and locks.

None of it is rollout truth: wake-ups only make a reconcile come sooner, locks
only keep two reconciles of one deployment from interleaving, and the client
is a connection pool. A restarted process starts with all of it empty.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from infergate.kube.client import KubeClient
from infergate.plan.observed import OwnerKey


@dataclass
class OperatorOptions:
    """How the operator process runs; set by `infergate operator` before kopf starts."""

    resync_seconds: float = 10.0
    """Longest time between two reconciles of one deployment when nothing wakes it."""
    kubeconfig: str | None = None
    """Kubeconfig for the API client; None: in-cluster credentials, else the default file."""


OPTIONS = OperatorOptions()
_client: KubeClient | None = None


def client() -> KubeClient:
    """The process's API client, made on first use."""
    global _client  # noqa: PLW0603 - one connection pool per process, made lazily
    if _client is None:
        _client = KubeClient.from_environment(OPTIONS.kubeconfig)
    return _client


def close_client() -> None:
    global _client  # noqa: PLW0603 - see client()
    if _client is not None:
        _client.close()
        _client = None


class Wakeups:
    """One event per deployment: set by its children's changes, awaited by its resync loop."""

    def __init__(self) -> None:
        self._events: dict[OwnerKey, asyncio.Event] = {}

    def event(self, key: OwnerKey) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def wake(self, key: OwnerKey) -> None:
        event = self._events.get(key)
        if event is not None:
            event.set()

    def forget(self, key: OwnerKey) -> None:
        self._events.pop(key, None)


WAKEUPS = Wakeups()
LOCKS: defaultdict[OwnerKey, asyncio.Lock] = defaultdict(asyncio.Lock)
