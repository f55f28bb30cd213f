"""The stable revision's PodDisruptionBudget, as a platform team checks it through a rollout:
none before a revision is stable, over the stable pods only (never the canary's), moved at
promotion, put back when edited or deleted by hand."""

from __future__ import annotations

from typing import Any

from infergate.plan.deployment.sync import Update
from infergate.render.labels import LABEL_REVISION
from tests.unit.plan.deployment.world import NAME, World


def _budget(world: World) -> dict[str, Any] | None:
    return world.get("PodDisruptionBudget", NAME)


def _covers(world: World) -> str | None:
    budget = _budget(world)
    if budget is None:
        return None
    revision: str = budget["spec"]["selector"]["matchLabels"][LABEL_REVISION]
    return revision


def _promote(world: World, canary: str) -> None:
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.settle()


def test_no_budget_before_a_revision_is_stable_then_one_over_it() -> None:
    world = World()
    world.reconcile()
    assert world.status.stable_revision is None
    assert _budget(world) is None
    world.settle()
    stable = world.status.stable_revision
    assert stable is not None
    budget = _budget(world)
    assert budget is not None
    assert budget["spec"]["maxUnavailable"] == 1
    assert _covers(world) == stable
    # The budget selects exactly the stable Deployment's pods, and goes with the deployment.
    assert (
        budget["spec"]["selector"]["matchLabels"]
        == world.deployment(stable)["spec"]["selector"]["matchLabels"]
    )
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "InferenceDeployment"


def test_a_canary_gets_no_budget_and_promotion_moves_it() -> None:
    world = World()
    stable, canary = world.available_canary()
    assert _covers(world) == stable
    assert len(world.of("PodDisruptionBudget")) == 1
    _promote(world, canary)
    assert world.status.stable_revision == canary
    assert _covers(world) == canary
    assert len(world.of("PodDisruptionBudget")) == 1


def test_a_budget_loosened_or_deleted_by_hand_is_put_back() -> None:
    world = World()
    world.settle()
    budget = _budget(world)
    assert budget is not None
    budget["spec"]["maxUnavailable"] = 5
    plan = world.reconcile()
    assert [w.ref.kind for w in plan.sync.writes if isinstance(w, Update)] == [
        "PodDisruptionBudget"
    ]
    restored = _budget(world)
    assert restored is not None
    assert restored["spec"]["maxUnavailable"] == 1
    world.objects.pop(("PodDisruptionBudget", NAME))
    world.reconcile()
    assert _budget(world) is not None
    # What was made is what is wanted: nothing more to write.
    assert world.reconcile().quiet
