"""The golden record settings' vocabulary, free of numpy: the API models and the operator
process (which must not pull in numpy) import these; `policy` and `retention` re-export them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

GOLDEN_CONFIG_ENV: Final = "INFERGATE_GOLDEN_CONFIG"
"""The operator's golden settings (a GoldenSpec as JSON), set on the runner Job."""
GOLDEN_MOUNT_PATH: Final = "/var/lib/infergate/golden"
"""Where the runner Job mounts the golden PersistentVolumeClaim."""
GOLDEN_DIR_ENV: Final = "INFERGATE_GOLDEN_DIR"
"""Overrides GOLDEN_MOUNT_PATH (tests)."""

SKETCH_DIMS_DEFAULT: Final = 64
SKETCH_DIMS_MIN: Final = 8
SKETCH_DIMS_MAX: Final = 1024
MIN_BYTES: Final = 1 << 20


class HiddenStatesPolicy(StrEnum):
    """What a record keeps of the hidden states: none, summary or full (largest last)."""

    NONE = "none"
    SUMMARY = "summary"
    FULL = "full"


class WhenDeleted(StrEnum):
    """What happens to a deleted InferenceDeployment's records."""

    RETAIN = "Retain"
    DELETE = "Delete"
