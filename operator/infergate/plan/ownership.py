"""Whether an object was made by the controller it should have been (pure).

The parity runner reads objects by name in the check's namespace (a revision's ConfigMap
and Service, a check's probe Services, a deployment's mirror Service) and trusts what
they say. A name is no proof: anyone who may create ConfigMaps or Services there can
make one first. The controlling owner reference, matched on kind, name and uid, is: a
uid is the one object the operator rendered the child for, never reused, and the
operator writes it into every child it makes (`plan.deployment.desired.Owner`,
`render.check_children.owner_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.jsontypes import JSONMap
from infergate.render.labels import group_set_name, revision_object_name


@dataclass(frozen=True)
class Controller:
    """The owner an object must name as its controller."""

    kind: str
    name: str
    uid: str

    def describe(self) -> str:
        return f"{self.kind} {self.name} (uid {self.uid})"


def controller_reference(obj: JSONMap) -> JSONMap | None:
    """The owner reference marked `controller: true` (the API server allows at most one)."""
    refs: list[JSONMap] = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller") is True), None)


def controller_uid(obj: JSONMap) -> str | None:
    """uid of the controlling owner reference."""
    uid = (controller_reference(obj) or {}).get("uid")
    return str(uid) if uid else None


def describe_controller(ref: JSONMap | None) -> str:
    """Who controls an object, in words for a message."""
    if ref is None:
        return "it has no controller"
    return f"its controller is {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"


def describe_object(obj: JSONMap, kind: str | None = None) -> str:
    """`Kind namespace/name`; `kind` where the object does not carry its own (list items)."""
    meta = obj.get("metadata") or {}
    shown = kind or obj.get("kind") or "object"
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{shown} {where}{meta.get('name', '?')}"


def not_controlled_by(obj: JSONMap, expected: Controller, *, kind: str | None = None) -> str | None:
    """None when `expected` controls `obj` (kind, name and uid all match); otherwise a
    sentence naming the object, the controller it should have, and what it has instead."""
    ref = controller_reference(obj)
    if ref is not None and (ref.get("kind"), ref.get("name"), ref.get("uid")) == (
        expected.kind,
        expected.name,
        expected.uid,
    ):
        return None
    head = (
        f"{describe_object(obj, kind)} is not controlled by {expected.describe()}, "
        "so it was not made by infergate for it"
    )
    found = f"{head}: {describe_controller(ref)}"
    if ref is not None and (ref.get("kind"), ref.get("name")) == (expected.kind, expected.name):
        return f"{found}, another object of that name"
    return found


POD_TEMPLATE_HASH = "pod-template-hash"
"""The label the Deployment controller puts on a ReplicaSet and its pod template, and the
ReplicaSet controller on every pod it creates from that template."""


def revision_deployment(name: str, revision: str, uid: str) -> Controller:
    """A revision's Deployment, named as the operator names it (`<name>-<revision>`), with
    the uid it recorded."""
    return Controller("Deployment", revision_object_name(name, revision), uid)


def replica_set_of(pod: JSONMap) -> str | None:
    """The name of the ReplicaSet a pod says controls it (None: no ReplicaSet does)."""
    ref = controller_reference(pod)
    if ref is None or ref.get("kind") != "ReplicaSet" or not ref.get("name"):
        return None
    return str(ref["name"])


def pod_not_made_by(pod: JSONMap, replica_set: JSONMap, deployment: Controller) -> str | None:
    """None when `deployment` made `pod` through `replica_set`; otherwise why not, naming
    the pod.

    Three links, each checked: the pod's controller is that ReplicaSet (kind, name, uid);
    the ReplicaSet's controller is `deployment`, whose uid the operator recorded when it
    created it; and the pod carries the ReplicaSet's selector and template hash, as the
    ReplicaSet controller stamps every pod it creates. Owner references and labels can be
    copied onto any pod by anyone who may create pods: that the pods carrying these are
    the ReplicaSet controller's own is what admission guarantees
    (manifests/admission/managed-objects.yaml); what is checked here is that a pod is the
    revision's, not merely one that wears its labels.
    """
    meta = replica_set.get("metadata") or {}
    owner = Controller("ReplicaSet", str(meta.get("name")), str(meta.get("uid")))
    refused = not_controlled_by(pod, owner, kind="Pod")
    if refused is not None:
        return refused
    refused = not_controlled_by(replica_set, deployment, kind="ReplicaSet")
    if refused is not None:
        return f"{describe_object(pod, 'Pod')} belongs to a ReplicaSet not made for it: {refused}"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    selector = ((replica_set.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    template_hash = (meta.get("labels") or {}).get(POD_TEMPLATE_HASH)
    wanted = {**selector, POD_TEMPLATE_HASH: template_hash}
    missing = sorted(k for k, v in wanted.items() if not v or labels.get(k) != v)
    if missing:
        return (
            f"{describe_object(pod, 'Pod')} names {owner.describe()} as its controller but "
            f"does not carry its labels ({', '.join(missing)}), as every pod it creates does"
        )
    return None


def revision_group_set(name: str, revision: str, uid: str) -> Controller:
    """A multi-node revision's LeaderWorkerSet, named as the operator names it
    (`<name>-<revision>-group`: `render.labels.group_set_name`), with the uid it recorded."""
    return Controller("LeaderWorkerSet", group_set_name(name, revision), uid)


def stateful_set_of(pod: JSONMap) -> str | None:
    """The name of the StatefulSet a pod says controls it (None: no StatefulSet does)."""
    ref = controller_reference(pod)
    if ref is None or ref.get("kind") != "StatefulSet" or not ref.get("name"):
        return None
    return str(ref["name"])


def leader_not_made_by(pod: JSONMap, stateful_set: JSONMap, group_set: Controller) -> str | None:
    """None when `group_set` (a LeaderWorkerSet) made `pod` as a group's leader, through its
    leader StatefulSet `stateful_set`; otherwise why not, naming the pod.

    The links mirror `pod_not_made_by`: the pod's controller is that StatefulSet (kind, name,
    uid); the StatefulSet's controller is the LeaderWorkerSet whose uid the operator recorded
    (a worker's StatefulSet is controlled by its leader pod, so a worker never passes); and
    the pod carries the StatefulSet's selector, as the StatefulSet controller stamps every
    pod it creates. Copyable metadata alone decides nothing.
    """
    meta = stateful_set.get("metadata") or {}
    owner = Controller("StatefulSet", str(meta.get("name")), str(meta.get("uid")))
    refused = not_controlled_by(pod, owner, kind="Pod")
    if refused is not None:
        return refused
    refused = not_controlled_by(stateful_set, group_set, kind="StatefulSet")
    if refused is not None:
        return f"{describe_object(pod, 'Pod')} belongs to a StatefulSet not made for it: {refused}"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    selector = ((stateful_set.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    missing = sorted(k for k, v in selector.items() if not v or labels.get(k) != v)
    if missing or not selector:
        return (
            f"{describe_object(pod, 'Pod')} names {owner.describe()} as its controller but "
            f"does not carry its selector ({', '.join(missing) or 'none'}), as every pod it "
            "creates does"
        )
    return None
