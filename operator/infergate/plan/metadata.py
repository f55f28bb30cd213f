"""What every room reads from an object's metadata, whichever resource it belongs to (pure).

`OwnerKey` is where the kopf indexes keep a child: under the InferenceDeployment it
belongs to, or under the ParityCheck whose name it carries. `parse_time` reads the
timestamps the API server writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class OwnerKey:
    """Namespace and name a child is indexed under: the InferenceDeployment it belongs to,
    or the ParityCheck whose name it carries."""

    namespace: str
    name: str


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
