"""JSON as the API server and the engines speak it: objects as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
"""A JSON object we build or own (camelCase keys, as `kubectl get -o json` shows)."""
JSONMap = Mapping[str, Any]
"""A JSON object we only read (a body from a watch stream, say)."""
