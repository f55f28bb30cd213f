"""Manual control by annotation: promote, abort, roll back to a revision.

People (or `infergate promote|abort|rollback`) set one of these annotations on
the InferenceDeployment; the controller acts on it once and removes it, so a
stale request never applies to a later canary.

Who asked is stamped by the API server, not by the person asking: the
admission policies in manifests/admission write the requester's user name into
`infergate.io/requested-by` whenever a control annotation is set or changed,
and refuse any other write of it. The controller removes it together with the
control annotations.

`infergate.io/abort` aborts whatever the canary is for "true", "yes" or "" (what
`kubectl annotate ... infergate.io/abort=` writes), and only that canary for a
revision hash (what `infergate abort` writes, so a request never lands on a newer
canary); "false", "no", "0" and anything else do nothing, and are removed like any
handled request so they cannot turn into an abort later.
"""

from __future__ import annotations

import re
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
_REVISION = re.compile(r"^[0-9a-f]{10}$")


@dataclass(frozen=True)
class ManualRequests:
    """The control annotations present on the object, parsed."""

    promote: str | None = None
    """The revision to promote, or "" for whatever the canary is."""
    abort: str | None = None
    """The canary revision to abort, "" for whatever the canary is; None: no abort asked for
    ("false" and other values that are neither a yes nor a revision hash)."""
    rollback_to: str | None = None
    requested_by: str | None = None
    """Who set or last changed a control annotation, as the API server authenticated them."""
    present: tuple[str, ...] = ()
    """Annotation keys to remove once acted on: every control annotation found (an abort of
    "false" included) and the requester stamp."""

    def promotes(self, canary: str) -> bool:
        """Whether the promote request applies to this canary revision."""
        return self.promote is not None and self.promote in (*_ANY_CANARY, canary)

    def aborts(self, canary: str) -> bool:
        """Whether the abort request applies to this canary revision."""
        return self.abort is not None and self.abort in ("", canary)


def manual_requests(annotations: Mapping[str, str]) -> ManualRequests:
    """Read the control annotations (values are trimmed; promote's "true" means any canary)."""
    promote = annotations.get(PROMOTE)
    abort = annotations.get(ABORT)
    rollback = annotations.get(ROLLBACK_TO)
    present = tuple(key for key in (*CONTROL_ANNOTATIONS, REQUESTED_BY) if key in annotations)
    return ManualRequests(
        promote=None if promote is None else promote.strip().lower(),
        abort=_abort(abort),
        rollback_to=None if rollback is None else rollback.strip().lower(),
        requested_by=annotations.get(REQUESTED_BY),
        present=present,
    )


def _abort(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if value in _ABORT_YES:
        return ""
    return value if _REVISION.match(value) else None
