"""The check writer puts each child in its own namespace: the runner's Job, ServiceAccount
and NetworkPolicy in the runner namespace, the rest in the check's; deletions too, also
of what outlived a deleted check."""

from __future__ import annotations

from typing import Any

from infergate.errors import AlreadyExistsError
from infergate.kube.check_writer import CheckWriter, delete_children
from infergate.kube.client import Resource
from infergate.plan.check.observed import CheckChild, observe_parity_check
from infergate.render.check_names import runner_labels

RUNNERS = "infergate-system"


class _Client:
    """Records where each call went."""

    def __init__(self, existing: dict[tuple[str, str, str], dict[str, Any]] | None = None) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.deleted_uids: list[str | None] = []
        self.existing = existing or {}

    def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", resource.kind, namespace, body["metadata"]["name"]))
        key = (resource.kind, namespace, body["metadata"]["name"])
        if key in self.existing:
            raise AlreadyExistsError("taken")
        return {**body, "metadata": {**body["metadata"], "uid": "new"}}

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get", resource.kind, namespace, name))
        return self.existing[(resource.kind, namespace, name)]

    def delete(self, resource: Resource, namespace: str, name: str, *, uid: str | None) -> None:
        self.calls.append(("delete", resource.kind, namespace, name))
        self.deleted_uids.append(uid)


def _writer(client: _Client) -> CheckWriter:
    check = observe_parity_check({"metadata": {"name": "c", "namespace": "llm", "uid": "u1"}})
    return CheckWriter(client, check, runner_namespace=RUNNERS)  # type: ignore[arg-type]


def test_children_are_created_and_deleted_in_their_own_namespace() -> None:
    client = _Client()
    writer = _writer(client)
    writer.create({"kind": "Job", "metadata": {"name": "check-u1-runner", "namespace": RUNNERS}})
    writer.create({"kind": "Role", "metadata": {"name": "c-runner", "namespace": "llm"}})
    writer.delete(
        [
            CheckChild("ServiceAccount", "check-u1-runner", "sa", "u1", namespace=RUNNERS),
            CheckChild("Pod", "c-probe-baseline", "p", "u1", namespace="llm"),
        ]
    )
    assert client.calls == [
        ("create", "Job", RUNNERS, "check-u1-runner"),
        ("create", "Role", "llm", "c-runner"),
        ("delete", "ServiceAccount", RUNNERS, "check-u1-runner"),
        ("delete", "Pod", "llm", "c-probe-baseline"),
    ]
    assert client.deleted_uids == ["sa", "p"]  # only the objects decided on


def test_a_runner_object_already_there_is_the_checks_own_by_its_labels() -> None:
    """In the runner namespace no owner reference can say whose an object is: its labels
    do (only the operator writes there); one of another check is someone else's."""
    name = "check-u1-runner"
    mine = {
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": RUNNERS,
            "uid": "sa",
            "labels": runner_labels("llm", "c", "u1"),
        },
    }
    client = _Client({("ServiceAccount", RUNNERS, name): mine})
    manifest = {"kind": "ServiceAccount", "metadata": {"name": name, "namespace": RUNNERS}}
    assert _writer(client).create(manifest) is None


def test_what_outlived_a_deleted_check_is_deleted_where_it_is() -> None:
    client = _Client()
    delete_children(client, [CheckChild("Job", "check-u0-runner", "j", "u0", namespace=RUNNERS)])  # type: ignore[arg-type]
    assert client.calls == [("delete", "Job", RUNNERS, "check-u0-runner")]
