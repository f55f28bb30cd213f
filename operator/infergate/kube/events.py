"""Kubernetes Events (events.k8s.io/v1) about our objects, posted through our own client.

An Event that cannot be posted is logged and dropped: Events inform people,
they never decide anything, so a failed post must not fail a reconcile.

Our own poster rather than `kopf.event`: kopf finds its posting queue through context
variables set in its own tasks, and our Events come from worker threads of the resync
loops, for ParityChecks as well as the handled InferenceDeployment; kopf would also post
through its own HTTP client (not ours, with its timeouts and error translation), post
core/v1 Events with a count of 1 each, name them `kopf-event-...` and cut a long message
in the middle.

Repeats are folded into a series, as client-go's events library does
(k8s.io/client-go tools/events, event_broadcaster.go): an Event isomorphic to one posted
less than `SERIES_FINISH` (6 minutes, client-go's `finishTime`) before it is not posted
again; the first one's `series.count` and `series.lastObservedTime` are patched instead.
client-go's key is type, action, reason, reporting controller and instance, regarding
and related; ours adds the note, because our reasons are coarse (`CheckFailed`) and the
note names the revision or check, which folding would hide. A series is patched on its
first repeat and then at most every `SERIES_PATCH_INTERVAL` (client-go defers to a 30
minute heartbeat; ours is shorter because our repeats are rare and people watch
`kubectl describe`): repeats in between are counted and carried by the next patch.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from infergate.errors import KubeError, NotFoundError, NotLeaderError
from infergate.jsontypes import JSON
from infergate.kube.client import EVENTS, KubeClient

COMPONENT = "infergate-operator"
REPORTING_CONTROLLER = "infergate.io/operator"
ACTION = "Reconcile"
"""What the operator was doing about the object: every Event comes from a reconcile."""
SERIES_FINISH = timedelta(minutes=6)
SERIES_PATCH_INTERVAL = timedelta(seconds=30)
_MESSAGE_MAX = 1024
_INSTANCE_MAX = 128

log = logging.getLogger(__name__)


def _micro(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def reporting_instance() -> str:
    """Which operator process reports: the component and the pod's name (its host name)."""
    host = os.environ.get("HOSTNAME") or os.uname().nodename
    return f"{COMPONENT}-{host}"[:_INSTANCE_MAX]


def event_manifest(
    involved: JSON,
    *,
    warning: bool,
    reason: str,
    message: str,
    now: datetime,
    instance: str = COMPONENT,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about `involved` (an object as read from the API)."""
    metadata = involved["metadata"]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        # client-go's name: the object's name and the time in nanoseconds, in hex.
        "metadata": {
            "name": f"{metadata['name']}.{int(now.timestamp() * 1e9):x}",
            "namespace": metadata["namespace"],
        },
        "regarding": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata.get("resourceVersion", ""),
        },
        "type": "Warning" if warning else "Normal",
        "reason": reason,
        "action": ACTION,
        "note": message if len(message) <= _MESSAGE_MAX else message[: _MESSAGE_MAX - 3] + "...",
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "eventTime": _micro(now),
    }


def series_patch(count: int, last_observed: datetime) -> dict[str, Any]:
    """The merge patch that records `count` occurrences, the last at `last_observed`."""
    return {"series": {"count": count, "lastObservedTime": _micro(last_observed)}}


@dataclass
class _Series:
    namespace: str
    name: str
    count: int
    last_observed: datetime
    last_written: datetime
    written_count: int


@dataclass(frozen=True)
class Fold:
    """What to do with one Event: post it, patch the series it repeats, or only count it."""

    action: Literal["create", "patch", "count"]
    name: str
    count: int


EventKey = tuple[str, str, str, str, str]
"""(namespace, regarding uid, type, reason, note): Events with one key form a series."""


class SeriesBook:
    """The series seen in the last `SERIES_FINISH`: which Event each repeat belongs to."""

    def __init__(self) -> None:
        self._series: dict[EventKey, _Series] = {}

    def observe(self, key: EventKey, name: str, now: datetime) -> Fold:
        """Fold one occurrence at `now`; `name` is the Event to post if it starts a series."""
        self._forget_before(now - SERIES_FINISH)
        series = self._series.get(key)
        if series is None:
            self._series[key] = _Series(key[0], name, 1, now, now, 1)
            return Fold("create", name, 1)
        series.count += 1
        series.last_observed = now
        if series.count == 2 or now - series.last_written >= SERIES_PATCH_INTERVAL:
            series.last_written, series.written_count = now, series.count
            return Fold("patch", series.name, series.count)
        return Fold("count", series.name, series.count)

    def due(self, now: datetime) -> list[tuple[str, str, int, datetime]]:
        """Series with repeats not yet written whose last patch is `SERIES_PATCH_INTERVAL`
        old: (namespace, Event name, count, last observed), marked written."""
        flush = []
        for series in self._series.values():
            late = now - series.last_written >= SERIES_PATCH_INTERVAL
            if series.count > series.written_count and late:
                series.last_written, series.written_count = now, series.count
                flush.append((series.namespace, series.name, series.count, series.last_observed))
        return flush

    def renamed(self, key: EventKey, name: str) -> None:
        """The series' Event was gone (expired or deleted) and was posted again as `name`."""
        if key in self._series:
            self._series[key].name = name

    def _forget_before(self, horizon: datetime) -> None:
        for key in [k for k, s in self._series.items() if s.last_observed < horizon]:
            del self._series[key]


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
        self._book = SeriesBook()
        self._instance = reporting_instance()
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
        wait = SERIES_PATCH_INTERVAL.total_seconds()
        while True:
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                self._flush(datetime.now(UTC))
                continue
            if item is None:
                self._flush(datetime.now(UTC) + SERIES_PATCH_INTERVAL)
                return
            try:
                self._record(item)
            except (KubeError, NotLeaderError) as error:
                log.warning(
                    "Event %s on %s not posted: %s",
                    item.reason,
                    item.involved["metadata"]["name"],
                    error,
                )

    def _flush(self, now: datetime) -> None:
        """Write the counts of series that repeated since their last patch."""
        for namespace, name, count, last in self._book.due(now):
            try:
                self._client.merge_patch(EVENTS, namespace, name, series_patch(count, last))
            except (KubeError, NotLeaderError) as error:
                log.warning("Event series %s/%s not updated: %s", namespace, name, error)

    def _record(self, item: _Pending) -> None:
        manifest = event_manifest(
            item.involved,
            warning=item.warning,
            reason=item.reason,
            message=item.message,
            now=item.at,
            instance=self._instance,
        )
        metadata = item.involved["metadata"]
        namespace = metadata["namespace"]
        note = manifest["note"]
        key: EventKey = (namespace, metadata["uid"], manifest["type"], item.reason, note)
        fold = self._book.observe(key, manifest["metadata"]["name"], item.at)
        if fold.action == "create":
            self._client.create(EVENTS, namespace, manifest)
        elif fold.action == "patch":
            try:
                self._client.merge_patch(
                    EVENTS, namespace, fold.name, series_patch(fold.count, item.at)
                )
            except NotFoundError:
                self._client.create(EVENTS, namespace, manifest | series_patch(fold.count, item.at))
                self._book.renamed(key, manifest["metadata"]["name"])
