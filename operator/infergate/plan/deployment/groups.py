"""When one group of a multi-node revision (spec.topology.nodes above 1) is whole (pure,
table-tested).

A group revision renders to a LeaderWorkerSet (render/group.py): `replicas` groups of a
leader and `nodes - 1` workers. The rollout counts a group ready only when it is whole
(`group_verdicts`), so a canary group is judged, and a group serves, only with every pod
of it up and of its revision (plan/deployment/observed.py `with_whole_groups`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.render.group import CHECKED_GATE
from infergate.render.labels import ANNOTATION_REVISION_HASH, LABEL_REVISION

# Labels the LWS controller puts on every pod of a group (sigs.k8s.io/lws
# api/leaderworkerset/v1/leaderworkerset_types.go).
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# The reason the kubelet gives a Ready condition held False by readiness gates alone
# (kubernetes pkg/kubelet/status/generate.go, ReadinessGatesNotReady).
GATES_NOT_READY = "ReadinessGatesNotReady"


@dataclass(frozen=True)
class GroupPod:
    """One pod of a revision's LeaderWorkerSet, reduced to what wholeness needs."""

    name: str
    group: str | None
    """The LWS group index label; None: not (yet) labelled by the LWS controller."""
    worker: str | None
    """The LWS worker index label: "0" is the leader."""
    revision: str | None
    revision_hash: str | None
    ready: bool
    """Its containers are ready: the pod is Ready, or held only by the readiness gate the
    operator sets (`held`)."""
    terminating: bool = False
    uid: str = ""
    restarts: int = 0
    """Container restarts the kubelet counted (the sum of restartCount)."""
    gated: bool = False
    """The pod declares the readiness gate `infergate.io/checked` (a group leader's, with the
    drift watch on: render/group.py)."""
    checked: str | None = None
    """That gate's condition as the pod's status has it: "True", "False", or None (unset)."""
    checked_reason: str | None = None

    @property
    def held(self) -> bool:
        """The gate keeps the pod out of its Services' ready endpoints."""
        return self.gated and self.checked != "True"


@dataclass(frozen=True)
class GroupVerdict:
    """Whether one group may serve and be judged; why not, naming the pods."""

    group: str
    whole: bool
    reason: str
    held: bool = False
    """Whole, but a pod of it is held out of serving by its readiness gate."""

    @property
    def serving(self) -> bool:
        """Whole and not held: its leader is a ready endpoint of its Services."""
        return self.whole and not self.held


def group_verdicts(
    pods: Sequence[GroupPod], *, size: int, revision: str, revision_hash: str
) -> list[GroupVerdict]:
    """Each group of a revision's pods, whole or not (pure).

    A group is whole when it has exactly `size` pods, worker indexes 0..size-1, none
    terminating, each ready and each labelled with `revision` and annotated with its full
    hash. Anything else (a worker missing, restarting, not ready, or of another revision)
    is not whole: not ready, never judged. A pod without a group label belongs to no group
    and makes none whole.
    """
    groups: dict[str, list[GroupPod]] = {}
    for pod in pods:
        if pod.group is not None:
            groups.setdefault(pod.group, []).append(pod)
    return [
        GroupVerdict(
            index,
            *_whole(members, size, revision, revision_hash),
            held=any(pod.held for pod in members),
        )
        for index, members in sorted(groups.items(), key=lambda item: _order(item[0]))
    ]


def whole_groups(pods: Sequence[GroupPod], *, size: int, revision: str, revision_hash: str) -> int:
    """How many groups of the revision are whole (its ready replicas)."""
    verdicts = group_verdicts(pods, size=size, revision=revision, revision_hash=revision_hash)
    return sum(1 for verdict in verdicts if verdict.whole)


def whole_group_digests(
    pods: Sequence[GroupPod], *, size: int, revision: str, revision_hash: str
) -> dict[str, str]:
    """Each whole group of a revision's pods, by group index, to a digest of who its pods
    are: name, uid and restart count of each (pure). A group whose digest changes between
    two sightings had a pod replaced (a new uid) or restarted in place (a higher count):
    `plan.drift.restart` reads that as a restart of the group."""
    verdicts = group_verdicts(pods, size=size, revision=revision, revision_hash=revision_hash)
    whole = {verdict.group for verdict in verdicts if verdict.whole}
    found: dict[str, list[str]] = {}
    for pod in pods:
        if pod.group in whole:
            found.setdefault(pod.group, []).append(f"{pod.name}/{pod.uid}/{pod.restarts}")
    return {
        index: hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:16]
        for index, members in found.items()
    }


def _order(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def _whole(
    members: Sequence[GroupPod], size: int, revision: str, revision_hash: str
) -> tuple[bool, str]:
    names = ", ".join(sorted(pod.name for pod in members))
    other = [
        pod.name
        for pod in members
        if pod.revision != revision or pod.revision_hash != f"sha256:{revision_hash}"
    ]
    if other:
        return False, f"pods {', '.join(sorted(other))} are not of revision {revision}"
    workers = sorted(pod.worker or "" for pod in members)
    if workers != sorted(str(index) for index in range(size)):
        return False, f"{len(members)} of {size} pods ({names}); the group is not whole"
    leaving = [pod.name for pod in members if pod.terminating]
    if leaving:
        return False, f"pods {', '.join(sorted(leaving))} are terminating"
    waiting = [pod.name for pod in members if not pod.ready]
    if waiting:
        return False, f"pods {', '.join(sorted(waiting))} are not ready"
    return True, f"all {size} pods ready, of revision {revision}"


def observe_group_pod(body: Mapping[str, Any]) -> GroupPod:
    """A pod body, reduced to what `group_verdicts` reads (pure)."""
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    by_type = {str(c.get("type")): c for c in conditions if isinstance(c, dict)}
    gated = any(
        isinstance(g, dict) and g.get("conditionType") == CHECKED_GATE
        for g in (body.get("spec") or {}).get("readinessGates") or []
    )
    gate = by_type.get(CHECKED_GATE) or {}
    checked = gate.get("status")
    ready_condition = by_type.get("Ready") or {}
    ready = ready_condition.get("status") == "True" or (
        # Held by the gate alone: the containers are ready, the kubelet says why not Ready.
        gated
        and checked != "True"
        and ready_condition.get("reason") == GATES_NOT_READY
        and (by_type.get("ContainersReady") or {}).get("status") == "True"
    )
    statuses = (body.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))
    return GroupPod(
        name=str(metadata.get("name")),
        group=labels.get(LWS_GROUP_INDEX),
        worker=labels.get(LWS_WORKER_INDEX),
        revision=labels.get(LABEL_REVISION),
        revision_hash=(metadata.get("annotations") or {}).get(ANNOTATION_REVISION_HASH),
        ready=ready,
        terminating=metadata.get("deletionTimestamp") is not None,
        uid=str(metadata.get("uid") or ""),
        restarts=restarts,
        gated=gated,
        checked=str(checked) if checked is not None else None,
        checked_reason=str(gate["reason"]) if gate.get("reason") is not None else None,
    )
