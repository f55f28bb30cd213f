"""Kubernetes Events about an InferenceDeployment, posted through our own client.

An Event that cannot be posted is logged and dropped: Events inform people,
they never decide anything, so a failed post must not fail a reconcile.

Our own poster rather than `kopf.event`: kopf finds its posting queue through context
variables set in its own tasks, and our Events come from worker threads of the resync
loops, for ParityChecks as well as the handled InferenceDeployment; kopf would also post
through its own HTTP client (not ours, with its timeouts and error translation), name the
Event `kopf-event-...` and cut a long message in the middle. The Kubernetes client has no
Event recorder, only the typed `CoreV1Event` body, which is this manifest spelled in classes.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from infergate.errors import KubeError, NotLeaderError
from infergate.jsontypes import JSON
from infergate.kube.client import EVENTS, KubeClient

COMPONENT = "infergate-operator"
_MESSAGE_MAX = 1024

log = logging.getLogger(__name__)


def event_manifest(
    involved: JSON, *, warning: bool, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object as read from the API)."""
    metadata = involved["metadata"]
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata.get("resourceVersion", ""),
        },
        "type": "Warning" if warning else "Normal",
        "reason": reason,
        "message": message if len(message) <= _MESSAGE_MAX else message[: _MESSAGE_MAX - 3] + "...",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass(frozen=True)
class _Pending:
    involved: JSON
    warning: bool
    reason: str
    message: str
    at: datetime


class EventPoster:
    """Posts Events from a thread of its own, so a reconcile never waits for them."""

    def __init__(self, client: KubeClient, *, capacity: int = 10000) -> None:
        self._client = client
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._run, name="infergate-events", daemon=True)
        self._thread.start()

    def post(self, involved: JSON, *, warning: bool, reason: str, message: str) -> None:
        """Queue one Event (dropped, with a log line, if the queue is full)."""
        try:
            self._queue.put_nowait(_Pending(involved, warning, reason, message, datetime.now(UTC)))
        except queue.Full:
            log.warning("Event %s on %s dropped: queue full", reason, involved["metadata"]["name"])

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued (up to `timeout`), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            manifest = event_manifest(
                item.involved,
                warning=item.warning,
                reason=item.reason,
                message=item.message,
                now=item.at,
            )
            try:
                self._client.create(EVENTS, item.involved["metadata"]["namespace"], manifest)
            except (KubeError, NotLeaderError) as error:
                log.warning(
                    "Event %s on %s not posted: %s",
                    item.reason,
                    item.involved["metadata"]["name"],
                    error,
                )
