"""A revision's Deployment is the one under its own name that the deployment controls; the
operator records its uid in the status, where the parity runner reads it. Labels,
annotations and owner references copied onto another Deployment make it none of that."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.plan.deployment.observed import (
    ANNOTATION_ROLE,
    collect,
    observe_deployment,
)
from infergate.plan.deployment.reconcile import with_deployment_uids

from .world import NAME, UID, World


def _first_revision() -> tuple[World, str]:
    world = World()
    world.settle()
    [revision] = world.revisions()
    return world, revision


def _look_alike(world: World, revision: str, name: str, **changes: Any) -> dict[str, Any]:
    """The revision's Deployment copied under `name`: its labels, annotations and owner
    references (the deployment's uid among them), as anyone may read and write them."""
    body = copy.deepcopy(world.deployment(revision))
    body["metadata"].update(name=name, uid=f"uid-{name}", **changes)
    world.objects[("Deployment", name)] = body
    return body


def test_the_operator_records_the_uid_of_each_revisions_deployment() -> None:
    world, revision = _first_revision()
    [record] = world.status.revisions
    assert record.deployment_uid == world.deployment(revision)["metadata"]["uid"]


@pytest.mark.parametrize("name", ["aaa-look-alike", "zzz-look-alike", f"{NAME}-other"])
def test_a_look_alike_deployment_is_no_revisions_and_its_uid_is_never_recorded(
    name: str,
) -> None:
    world, revision = _first_revision()
    real = world.deployment(revision)["metadata"]["uid"]
    _look_alike(world, revision, name)
    world.reconcile()
    [record] = world.status.revisions
    assert record.deployment_uid == real
    # Nor is it written to, as the revision's own would be.
    assert ("Deployment", name) not in {
        (w.ref.kind, w.ref.name) for plan in world.plans[-1:] for w in plan.sync.writes
    }


def test_a_look_alike_claiming_the_stable_role_is_not_taken_for_the_stable() -> None:
    """Status lost: the stable is read back from the role annotation of the revisions' own
    Deployments only."""
    world, revision = _first_revision()
    world.change(dtype="float16")
    world.settle()
    canary = next(r for r in world.revisions() if r != revision)
    look_alike = _look_alike(world, canary, "zzz-look-alike")
    look_alike["metadata"]["annotations"][ANNOTATION_ROLE] = "stable"
    bodies = [world.deployment(revision), look_alike]
    deployments = [d for body in bodies if (d := observe_deployment(body))]
    observed = collect(UID, deployments, [], [], [], owner_name=NAME)
    assert {r: d.name for r, d in observed.deployments.items()} == {revision: f"{NAME}-{revision}"}


def test_a_deployment_made_again_under_the_name_replaces_the_record() -> None:
    world, revision = _first_revision()
    world.deployment(revision)["metadata"]["uid"] = "uid-made-again"
    world.reconcile()
    [record] = world.status.revisions
    assert record.deployment_uid == "uid-made-again"


def test_a_revision_whose_deployment_is_not_seen_keeps_its_record() -> None:
    world, _ = _first_revision()
    status = world.status
    observed = collect(UID, [], [], [], [], owner_name=NAME)
    assert with_deployment_uids(status, observed) == status
    assert with_deployment_uids(InferenceDeploymentStatus(), observed).revisions == []
