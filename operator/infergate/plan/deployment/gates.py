"""The readiness gate of group leaders: who serves, and who waits for a re-check (pure,
table-tested).

With the drift watch on, a multi-node revision's leaders carry the readiness gate
`infergate.io/checked` (render/group.py): the kubelet counts a leader Ready, and the
EndpointSlice controller lists it as a ready endpoint of the revision and stable Services,
only once the operator sets that condition True on the pod. The operator sets it:

- True on a leader whose group is whole (every pod of it up, of its revision), unless
- the group is one of the stable revision's held groups (`status.drift.heldGroups`: it
  restarted, and no drift run made after the restart has passed yet): False, saying why.

A leader whose group is not whole is left as it is: a new pod starts without the
condition (not Ready), and a group that breaks is made again with new pods
(RecreateGroupOnPodRestart). Only a difference is written.

    leader_gates(workloads, pods, drift) -> [GateWrite]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from infergate.api.drift import DriftStatus
from infergate.plan import reasons
from infergate.plan.deployment.observed import (
    ObservedDeployment,
    ObservedPod,
    workload_group_verdicts,
)
from infergate.render.group import LWS_KIND

LEADER = "0"


@dataclass(frozen=True)
class GateWrite:
    """The `infergate.io/checked` condition to set on one leader pod."""

    pod: str
    status: bool
    reason: str
    message: str
    at: datetime
    """Its lastTransitionTime (the status changes with every write: only differences are)."""


def leader_gates(
    workloads: Mapping[str, ObservedDeployment],
    pods: Sequence[ObservedPod],
    drift: DriftStatus | None,
    now: datetime,
) -> list[GateWrite]:
    """The gate writes this reconcile makes, sorted by pod name (see the module docstring).

    `workloads` are the revisions' workloads by revision, `drift` status.drift as this
    reconcile writes it (None: no drift watch, nothing held).
    """
    held_revision = drift.revision if drift is not None else None
    held = set(drift.held_groups) if drift is not None else set()
    writes: list[GateWrite] = []
    for revision, workload in workloads.items():
        if workload.kind != LWS_KIND:
            continue
        members = [p for p in pods if p.group is not None and p.revision == revision]
        whole = {v.group for v in workload_group_verdicts(workload, members) if v.whole}
        for pod in members:
            group = pod.group
            if group is None or not group.gated or group.worker != LEADER:
                continue
            if group.group not in whole:
                continue
            if revision == held_revision and group.group in held:
                want = GateWrite(
                    pod.name,
                    False,
                    reasons.AWAITING_DRIFT_CHECK,
                    f"group {group.group} of stable revision {revision} restarted: it serves "
                    "again once a drift run made after the restart passes"
                    + (f" (run {drift.hold_run})" if drift is not None and drift.hold_run else ""),
                    now,
                )
            else:
                want = GateWrite(
                    pod.name,
                    True,
                    reasons.GROUP_CHECKED,
                    f"group {group.group} of revision {revision} is whole and not awaiting a "
                    "re-check",
                    now,
                )
            current = (group.checked, group.checked_reason)
            if current != ("True" if want.status else "False", want.reason):
                writes.append(want)
    return sorted(writes, key=lambda w: w.pod)
