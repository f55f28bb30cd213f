"""Which nodes the executor plays, as they come and go (pure).

The executor starts with the default executor nodes (nodes.NODES) and, on each loop,
takes on every Node labelled `infergate.io/local-executor=true` that appears (a test
that adds a machine creates its Node object; the executor then heartbeats it and runs
the pods bound to it, as a kubelet that registered would). A node it played whose Node
object is gone is a lost machine: the processes of its pods die at once (no SIGTERM, no
preStop, no status written: nothing of that machine is left to do it), while the pods
themselves stay in the API, with the status they last had, until the pod garbage
collector deletes them, exactly as on a real cluster; the executor keeps publishing
their endpoints meanwhile, as the cluster's EndpointSlice controller would.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from infergate.jsontypes import JSON
from infergate_dev.localcluster.nodes import EXECUTOR_LABEL

EXECUTOR_SELECTOR = f"{EXECUTOR_LABEL}=true"


@dataclass(frozen=True)
class NodeChanges:
    added: frozenset[str]
    lost: frozenset[str]


def played(listed: list[JSON]) -> frozenset[str]:
    """The names of the listed Nodes the executor plays: labelled as its own, not going."""
    return frozenset(
        node["metadata"]["name"]
        for node in listed
        if (node["metadata"].get("labels") or {}).get(EXECUTOR_LABEL) == "true"
        and not node["metadata"].get("deletionTimestamp")
    )


def node_changes(known: Collection[str], listed: list[JSON]) -> NodeChanges:
    """Nodes to take on (listed, not yet played) and nodes lost (played, no longer listed)."""
    now = played(listed)
    return NodeChanges(added=now - frozenset(known), lost=frozenset(known) - now)


@dataclass(frozen=True)
class PodSplit:
    run: list[JSON]
    """Pods bound to a node the executor plays: their processes run here."""
    orphaned: list[JSON]
    """Pods bound to a lost node, still in the API: nothing runs them, their endpoints stay
    published with their last status until they are deleted."""


def split_pods(pods: list[JSON], playing: Collection[str], lost: Collection[str]) -> PodSplit:
    """The listed pods by what the executor does with them; pods of other nodes dropped."""
    run, orphaned = [], []
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node in playing:
            run.append(pod)
        elif node in lost:
            orphaned.append(pod)
    return PodSplit(run=run, orphaned=orphaned)
