"""Manual control by annotation: promote, abort, roll back to a revision.

People (or `infergate promote|abort|rollback`) set one of these annotations on
the InferenceDeployment; the controller acts on it once and removes it, so a
stale request never applies to a later canary.

Who asked is stamped by the API server, not by the person asking: the
admission policies in manifests/admission write the requester's user name into
`infergate.io/requested-by` whenever a control annotation is set or changed,
and refuse any other write of it. The controller removes it together with the
control annotations.

`infergate.io/abort` aborts for "true", "yes" or "" (what `kubectl annotate ...
infergate.io/abort=` writes); "false", "no" or "0" do nothing, and are removed
like any handled request so they cannot turn into an abort later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROMOTE = "infergate.io/promote"
ABORT = "infergate.io/abort"
ROLLBACK_TO = "infergate.io/rollback-to"
CONTROL_ANNOTATIONS = (PROMOTE, ABORT, ROLLBACK_TO)
REQUESTED_BY = "infergate.io/requested-by"

# `infergate.io/promote` may name the canary revision, or just say yes.
_ANY_CANARY = ("", "true", "yes")
_ABORT_YES = ("", "true", "yes")


@dataclass(frozen=True)
class ManualRequests:
    """The control annotations present on the object, parsed."""

    promote: str | None = None
    """The revision to promote, or "" for whatever the canary is."""
    abort: bool = False
    """Whether abort was asked for ("true", "yes" or ""; "false" and the rest are not)."""
    rollback_to: str | None = None
    requested_by: str | None = None
    """Who set or last changed a control annotation, as the API server authenticated them."""
    present: tuple[str, ...] = ()
    """Annotation keys to remove once acted on: every control annotation found (an abort of
    "false" included) and the requester stamp."""

    def promotes(self, canary: str) -> bool:
        """Whether the promote request applies to this canary revision."""
        return self.promote is not None and self.promote in (*_ANY_CANARY, canary)


def manual_requests(annotations: Mapping[str, str]) -> ManualRequests:
    """Read the control annotations (values are trimmed; promote's "true" means any canary)."""
    promote = annotations.get(PROMOTE)
    abort = annotations.get(ABORT)
    rollback = annotations.get(ROLLBACK_TO)
    present = tuple(key for key in (*CONTROL_ANNOTATIONS, REQUESTED_BY) if key in annotations)
    return ManualRequests(
        promote=None if promote is None else promote.strip().lower(),
        abort=abort is not None and abort.strip().lower() in _ABORT_YES,
        rollback_to=None if rollback is None else rollback.strip().lower(),
        requested_by=annotations.get(REQUESTED_BY),
        present=present,
    )
