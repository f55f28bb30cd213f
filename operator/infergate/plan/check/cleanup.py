"""Which runner objects in the runner namespace no check will clean up any more (pure).

A check's Role, RoleBinding, probes and report live in its own namespace and carry an
owner reference to it: the garbage collector removes them with the check. The runner's
Job, ServiceAccount and NetworkPolicy live in the runner namespace, where no owner
reference can name the check (owners must share the namespace), so the ParityCheck
controller removes them itself:

- while the check lives, `lifecycle` releases them when it ends (a finished Job stays
  for its log until its ttlSecondsAfterFinished);
- once the check is gone, or a check of the same name with another uid took its place,
  they are stale, and this module says so: the controller deletes them. The same
  decision, made for every check key the runner namespace holds objects of when the
  operator starts, sweeps what was left while it was down.

Their labels say whose they are (namespace, name, uid): trusted, since no tenant may
write to the runner namespace. Nothing is stale until the operator's watches have
listed every object once: a check not yet seen is not a check that is gone.
"""

from __future__ import annotations

from collections.abc import Sequence

from infergate.plan.check.observed import CheckChild, ObservedParityCheck

RUNNER_NAMESPACE_KINDS = ("Job", "ServiceAccount", "NetworkPolicy")
"""What the controller makes in the runner namespace (the Job's pods go with the Job)."""


def stale_runner_objects(
    check: ObservedParityCheck | None,
    children: Sequence[CheckChild],
    *,
    runner_namespace: str,
    listed: bool,
) -> list[CheckChild]:
    """The runner objects among `children` (those indexed under one check key) that belong
    to no living check: `check` is None (deleted) or has another uid than the one their
    labels name. `listed`: every watch has listed its objects at least once."""
    if not listed:
        return []
    uid = check.uid if check is not None else None
    return [
        child
        for child in children
        if child.namespace == runner_namespace
        and child.kind in RUNNER_NAMESPACE_KINDS
        and child.owner_uid != uid
    ]
