"""Kubernetes Events about an InferenceDeployment, posted through our own client.

An Event that cannot be posted is logged and dropped: Events inform people,
they never decide anything, so a failed post must not fail a reconcile.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from infergate.errors import KubeError
from infergate.kube.client import JSON, KubeClient, Resource

EVENTS = Resource("", "v1", "events", "Event")
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


def post_event(
    client: KubeClient, involved: JSON, *, warning: bool, reason: str, message: str
) -> None:
    """Post one Event; a failure is logged, not raised."""
    manifest = event_manifest(
        involved, warning=warning, reason=reason, message=message, now=datetime.now(UTC)
    )
    try:
        client.create(EVENTS, involved["metadata"]["namespace"], manifest)
    except KubeError as error:
        log.warning("Event %s on %s not posted: %s", reason, involved["metadata"]["name"], error)
