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
