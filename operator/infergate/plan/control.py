"""Manual control by annotation: promote, abort, roll back to a revision.

People (or `infergate promote|abort|rollback`) set one of these annotations on
the InferenceDeployment; the controller acts on it once and removes it, so a
stale request never applies to a later canary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROMOTE = "infergate.io/promote"
ABORT = "infergate.io/abort"
ROLLBACK_TO = "infergate.io/rollback-to"
CONTROL_ANNOTATIONS = (PROMOTE, ABORT, ROLLBACK_TO)

# `infergate.io/promote` may name the canary revision, or just say yes.
_ANY_CANARY = ("", "true", "yes")


@dataclass(frozen=True)
class ManualRequests:
    """The control annotations present on the object, parsed."""

    promote: str | None = None
    """The revision to promote, or "" for whatever the canary is."""
    abort: bool = False
    rollback_to: str | None = None

    @property
    def present(self) -> tuple[str, ...]:
        """Annotation keys to remove once acted on."""
        keys: list[str] = []
        if self.promote is not None:
            keys.append(PROMOTE)
        if self.abort:
            keys.append(ABORT)
        if self.rollback_to is not None:
            keys.append(ROLLBACK_TO)
        return tuple(keys)

    def promotes(self, canary: str) -> bool:
        """Whether the promote request applies to this canary revision."""
        return self.promote is not None and self.promote in (*_ANY_CANARY, canary)


def manual_requests(annotations: Mapping[str, str]) -> ManualRequests:
    """Read the control annotations (values are trimmed; promote's "true" means any canary)."""
    promote = annotations.get(PROMOTE)
    rollback = annotations.get(ROLLBACK_TO)
    return ManualRequests(
        promote=None if promote is None else promote.strip().lower(),
        abort=ABORT in annotations,
        rollback_to=None if rollback is None else rollback.strip().lower(),
    )
