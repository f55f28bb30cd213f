"""Which endpoint of a side's Service the runner calls: only an address of a pod the
operator's own workload made.

A Service selects pods by labels, and anyone who may create pods in the namespace can
set them: a pod wearing the canary's labels but running the stable's template is
published by the cluster's own EndpointSlice controller like any other, and, called,
would have a harmful canary judged on the stable's answers. So an endpoint counts only
when, besides coming from a trusted slice (`runner.endpoints.trusted_slices`):

- its targetRef names its pod (name and uid), and the address is that pod's own IP
  (`runner.endpoints.not_the_pods_address`);
- the pod was made by the side's maker: for a revision, the Deployment whose uid the
  operator recorded in the InferenceDeployment's status, through one of that
  Deployment's ReplicaSets (`plan.ownership.pod_not_made_by`); for a probe, the one pod
  of the probe's name that the check controls.

Every ready endpoint is looked at, not only the first: one whose pod is someone else's
is a forgery (`ForgedEndpointError`, which ends the check) even while a real one is
there too. One whose pod or ReplicaSet cannot be read yet (just replaced, being deleted)
is skipped; a side with no accepted address waits, and never falls back to another.

A group leader held out of serving by the readiness gate `infergate.io/checked` (a
restarted group awaiting its drift run, plan/deployment/gates.py) is no ready endpoint,
so no user reaches it; the check that re-checks it must. With `awaiting_check` (the
candidate of a check against a golden record, as a drift run is) such a leader is called
first, when its containers are ready and that gate alone holds it (`held_by_gate`,
read from the pod's status, which only the kubelet and the operator write); it must have
been made by the side's maker like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from infergate.jsontypes import JSON, JSONMap
from infergate.plan.deployment.groups import GATES_NOT_READY
from infergate.plan.ownership import (
    Controller,
    controller_reference,
    describe_controller,
    describe_object,
    leader_not_made_by,
    not_controlled_by,
    pod_not_made_by,
    replica_set_of,
    revision_deployment,
    revision_group_set,
    stateful_set_of,
)
from infergate.render.group import CHECKED_GATE
from infergate.runner.endpoints import (
    EndpointResolutionError,
    ResolvedEndpoint,
    ignored_note,
    none_ready,
    not_the_pods_address,
    ready_endpoints,
    trusted_slices,
)


class ForgedEndpointError(RuntimeError):
    """A Service's trusted slice lists an address of a pod its side's maker did not make."""


class PodReads(Protocol):
    """The reads of a side's pods, in the check's namespace; None when absent."""

    def pod(self, name: str) -> JSON | None: ...

    def replica_set(self, name: str) -> JSON | None: ...

    def stateful_set(self, name: str) -> JSON | None: ...


@dataclass(frozen=True)
class Refusal:
    """Why a pod is not called; `forged` when it never will be (someone else made it)."""

    why: str
    forged: bool


@dataclass(frozen=True)
class RevisionPods:
    """The pods of a revision: made by its Deployment (the uid the operator recorded),
    through one of its ReplicaSets; or, for a multi-node revision, the group leaders made by
    its LeaderWorkerSet (the same recorded uid: the operator records its workload's) through
    its leader StatefulSet. Each under exactly the name the operator gives it."""

    deployment: Controller
    group_set: Controller

    @classmethod
    def of(cls, name: str, revision: str, uid: str) -> RevisionPods:
        """The pods of revision `revision` of InferenceDeployment `name`, whose workload's
        uid the operator recorded as `uid`."""
        return cls(
            revision_deployment(name, revision, uid), revision_group_set(name, revision, uid)
        )

    def refusal(self, reads: PodReads, pod: JSONMap) -> Refusal | None:
        stateful = stateful_set_of(pod)
        if stateful is not None:
            return self._leader_refusal(reads, pod, stateful)
        name = replica_set_of(pod)
        if name is None:
            ref = controller_reference(pod)
            return Refusal(
                f"{describe_object(pod, 'Pod')} is not made by a ReplicaSet: "
                f"{describe_controller(ref)}",
                forged=True,
            )
        replica_set = reads.replica_set(name)
        if replica_set is None:
            return Refusal(f"its ReplicaSet {name} does not exist (being deleted?)", forged=False)
        owner = controller_reference(replica_set) or {}
        if (owner.get("kind"), owner.get("name")) == ("Deployment", self.deployment.name) and (
            owner.get("uid") != self.deployment.uid
        ):
            # The Deployment of that name made again (deleted by someone): its pods count
            # once the operator has recorded the new one, the old ones go with the old.
            return Refusal(
                f"{describe_object(pod, 'Pod')} belongs to Deployment {self.deployment.name} "
                f"(uid {owner.get('uid')}), not the one recorded (uid {self.deployment.uid})",
                forged=False,
            )
        why = pod_not_made_by(pod, replica_set, self.deployment)
        return None if why is None else Refusal(why, forged=True)

    def _leader_refusal(self, reads: PodReads, pod: JSONMap, name: str) -> Refusal | None:
        stateful_set = reads.stateful_set(name)
        if stateful_set is None:
            return Refusal(f"its StatefulSet {name} does not exist (being deleted?)", forged=False)
        owner = controller_reference(stateful_set) or {}
        group_set = self.group_set
        if (owner.get("kind"), owner.get("name")) == (group_set.kind, group_set.name) and (
            owner.get("uid") != group_set.uid
        ):
            return Refusal(
                f"{describe_object(pod, 'Pod')} belongs to LeaderWorkerSet {group_set.name} "
                f"(uid {owner.get('uid')}), not the one recorded (uid {group_set.uid})",
                forged=False,
            )
        why = leader_not_made_by(pod, stateful_set, group_set)
        return None if why is None else Refusal(why, forged=True)


@dataclass(frozen=True)
class ProbePod:
    """The probe of a check's side: the one pod of that name the check controls."""

    name: str
    check: Controller

    def refusal(self, reads: PodReads, pod: JSONMap) -> Refusal | None:
        del reads  # a probe pod is the check's own child: nothing else to read
        meta = pod.get("metadata") or {}
        if meta.get("name") != self.name:
            return Refusal(
                f"{describe_object(pod, 'Pod')} is not the probe pod {self.name}", forged=True
            )
        why = not_controlled_by(pod, self.check, kind="Pod")
        return None if why is None else Refusal(why, forged=True)


class PodMaker(Protocol):
    """Who must have made the pods a side's Service leads to."""

    def refusal(self, reads: PodReads, pod: JSONMap) -> Refusal | None: ...


def held_by_gate(pod: JSONMap) -> bool:
    """The pod's containers are ready and only the readiness gate CHECKED_GATE keeps it from
    being Ready (the kubelet's reason ReadinessGatesNotReady, every other gate met)."""
    status = pod.get("status") or {}
    conditions = {
        str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)
    }
    gates = {
        str(g.get("conditionType"))
        for g in (pod.get("spec") or {}).get("readinessGates") or []
        if isinstance(g, dict)
    }
    if CHECKED_GATE not in gates or (conditions.get(CHECKED_GATE) or {}).get("status") == "True":
        return False
    others_met = all(
        (conditions.get(g) or {}).get("status") == "True" for g in gates - {CHECKED_GATE}
    )
    ready = conditions.get("Ready") or {}
    return (
        others_met
        and ready.get("status") == "False"
        and ready.get("reason") == GATES_NOT_READY
        and (conditions.get("ContainersReady") or {}).get("status") == "True"
    )


def own_pod_url(
    reads: PodReads,
    service: JSONMap,
    slices: Sequence[JSONMap],
    maker: PodMaker,
    port: str | int = "http",
    *,
    awaiting_check: bool = False,
) -> str:
    """The URL of the first ready endpoint (stable order) whose pod `maker` made; with
    `awaiting_check`, a leader held by the gate CHECKED_GATE alone comes first.

    Raises `ForgedEndpointError` when any ready endpoint of a trusted slice leads to a pod
    someone else made, and `EndpointResolutionError` (wait and retry) when none is usable.
    """
    trusted, ignored = trusted_slices(service, slices)
    endpoints = ready_endpoints(service, trusted, port)
    held = ready_endpoints(service, trusted, port, ready=False) if awaiting_check else []
    if not endpoints and not held:
        raise EndpointResolutionError(none_ready(service, trusted, ignored))
    accepted: list[str] = []
    skipped: list[str] = []
    for endpoint in held:
        pod = reads.pod(endpoint.pod) if endpoint.pod is not None else None
        if pod is None or not held_by_gate(pod):
            continue  # not ready for another reason: never called
        refusal = _refusal(reads, endpoint, maker)
        if refusal is None:
            return endpoint.url
        if refusal.forged:
            name = (service.get("metadata") or {}).get("name")
            raise ForgedEndpointError(
                f"Service {name} lists endpoint {endpoint.url}: {refusal.why}; it is not called"
            )
        skipped.append(f"{endpoint.url}: {refusal.why}")
    if not endpoints:
        raise EndpointResolutionError(none_ready(service, trusted, ignored))
    for endpoint in endpoints:
        refusal = _refusal(reads, endpoint, maker)
        if refusal is None:
            accepted.append(endpoint.url)
        elif refusal.forged:
            name = (service.get("metadata") or {}).get("name")
            raise ForgedEndpointError(
                f"Service {name} lists endpoint {endpoint.url}: {refusal.why}; it is not called"
            )
        else:
            skipped.append(f"{endpoint.url}: {refusal.why}")
    if accepted:
        return accepted[0]
    meta = service.get("metadata") or {}
    raise EndpointResolutionError(
        f"Service {meta.get('namespace', '?')}/{meta.get('name', '?')} has no ready endpoint "
        f"of its own pods: {len(skipped)} ready, none usable yet ({skipped[0]})"
        + ignored_note(ignored)
    )


def _refusal(reads: PodReads, endpoint: ResolvedEndpoint, maker: PodMaker) -> Refusal | None:
    if endpoint.pod is None or endpoint.pod_uid is None:
        # The cluster's publishers name the pod of every endpoint they list.
        return Refusal(f"endpoint {endpoint.address} names no pod (targetRef)", forged=False)
    pod = reads.pod(endpoint.pod)
    if pod is None:
        return Refusal(f"its Pod {endpoint.pod} does not exist", forged=False)
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    if uid != endpoint.pod_uid:
        # A pod made again under the name: the slice is updated after it.
        return Refusal(
            f"its Pod {endpoint.pod} is now another pod (uid {uid}, the slice names "
            f"{endpoint.pod_uid})",
            forged=False,
        )
    why = not_the_pods_address(endpoint, pod)
    if why is not None:
        return Refusal(why, forged=True)
    return maker.refusal(reads, pod)
