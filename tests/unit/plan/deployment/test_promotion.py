"""A promotion that cannot drop the stable, reconcile after reconcile in the in-memory cluster:
the new stable grows to full size, then the stable Service (and the HTTPRoute) moves, then,
once the move is read back and scaleDownDelaySeconds passed, the old stable scales down.
What a user would see: which pods the Service selects, the route's weights, each
Deployment's size, status.promotion and the Progressing condition."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.enums import DeploymentPhase, PromotionStep
from infergate.plan.deployment.control import ABORT, REQUESTED_BY, ROLLBACK_TO
from infergate.plan.deployment.reconcile import ReconcilePlan
from infergate.plan.deployment.sync import Update
from tests.unit.plan.deployment.world import NAME, World

DELAY = 30
REPLICAS = 2
GATEWAY = {
    "mode": "gateway",
    "gateway": {"parentRefs": [{"name": "public"}], "steps": [{"weight": 50}]},
}
MODES: dict[str, dict[str, Any]] = {
    "dark": {"mode": "dark"},
    "replicas": {"mode": "replicas"},
    "gateway": GATEWAY,
}


def _promoting(mode: str = "dark", delay: int = DELAY) -> tuple[World, str, str]:
    """A stable revision at full size and a canary whose check passed, up to the reconcile
    that promoted it (in gateway mode, after its one step): (world, old, new)."""
    world = World()
    world.set("rollout.scaleDownDelaySeconds", delay)
    world.set("rollout.traffic", MODES[mode])
    world.settle()
    old = world.status.stable_revision
    assert old is not None
    world.change(dtype="float16")
    world.reconcile()
    new = world.status.canary_revision
    assert new is not None
    world.make_available(new)
    world.reconcile()
    world.set_check(f"{NAME}-{new}", "Passed", passed=True)
    for _ in range(3):
        world.reconcile()
        if world.status.stable_revision == new:
            break
    assert world.status.stable_revision == new
    return world, old, new


def _selected(world: World) -> set[str]:
    """Revisions whose pods the stable Service selects."""
    service = world.get("Service", NAME)
    assert service is not None
    selector = service["spec"]["selector"]
    found = set()
    for deployment in world.of("Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if "infergate.io/revision" in labels and selector.items() <= labels.items():
            found.add(labels["infergate.io/revision"])
    return found


def _weights(world: World) -> dict[str, int]:
    """Revision -> weight, as the HTTPRoute says (empty without a route)."""
    route = world.get("HTTPRoute", NAME)
    if route is None:
        return {}
    [rule] = route["spec"]["rules"]
    return {b["name"].removeprefix(f"{NAME}-"): b["weight"] for b in rule["backendRefs"]}


def _serves(world: World, revision: str) -> bool:
    """Whether clients' requests reach `revision` alone (dark, gateway) as the cluster says;
    in replicas mode the Service selects every revision, so only readiness decides."""
    if world.spec["rollout"]["traffic"]["mode"] == "replicas":
        return True
    route_ok = world.spec["rollout"]["traffic"]["mode"] != "gateway" or _weights(world) == {
        revision: 100
    }
    return _selected(world) == {revision} and route_ok


def _moves_traffic(plan: ReconcilePlan) -> bool:
    """Whether the plan writes the stable Service or the HTTPRoute."""
    return any(
        isinstance(w, Update)
        and (w.ref.kind, w.ref.name) in {("Service", NAME), ("HTTPRoute", NAME)}
        for w in plan.sync.writes
    )


def _step(world: World) -> PromotionStep | None:
    return world.status.promotion.step if world.status.promotion is not None else None


# -- each step ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """What happens in the cluster (and to the clock) before one reconcile, and what that
    reconcile decides."""

    name: str
    before: Callable[[World, str], None]
    step: PromotionStep | None
    progressing: str
    serves_new: bool
    """After the reconcile's writes: the Service (and route) send requests to the new stable."""
    old_replicas: int
    due_in: int | None
    """Seconds from now the reconcile asks to run again at (None: no time-based step)."""


def _nothing(world: World, new: str) -> None:
    del world, new


def _available(world: World, new: str) -> None:
    world.make_available(new)


def _tick(seconds: int) -> Callable[[World, str], None]:
    def tick(world: World, new: str) -> None:
        del new
        world.tick(seconds)

    return tick


# Dark mode, one reconcile per row, each row after the ones above it; the first row is the
# reconcile of the verdict itself.
STAGES = [
    Stage("verdict", _nothing, PromotionStep.SCALING_UP, "PromotionScalingUp", False, 2, None),
    Stage("new stable available", _available, PromotionStep.SWITCHING, "PromotionSwitching",
          True, 2, None),
    Stage("the move read back", _tick(5), PromotionStep.SCALE_DOWN_DELAY,
          "PromotionScaleDownDelay", True, 2, DELAY),
    Stage("the delay not over", _tick(DELAY - 1), PromotionStep.SCALE_DOWN_DELAY,
          "PromotionScaleDownDelay", True, 2, 1),
    Stage("the delay over", _tick(1), None, "RolloutComplete", True, 0, None),
]  # fmt: skip


def _run_stages(world: World, new: str, upto: int) -> ReconcilePlan | None:
    """Play the stages after the verdict's up to `upto` (exclusive); the last plan."""
    plan = None
    for stage in STAGES[1:upto]:
        stage.before(world, new)
        plan = world.reconcile()
    return plan


@pytest.mark.parametrize("index", range(len(STAGES)), ids=[s.name for s in STAGES])
def test_each_step_is_decided_from_what_is_observed(index: int) -> None:
    stage = STAGES[index]
    world, old, new = _promoting()
    plan = world.plans[-1] if index == 0 else _run_stages(world, new, index + 1)
    assert plan is not None
    assert _step(world) is stage.step
    assert world.condition("Progressing")[1] == stage.progressing
    assert _serves(world, new) is stage.serves_new
    assert _serves(world, old) is not stage.serves_new
    assert world.revisions() == {old: stage.old_replicas, new: REPLICAS}
    assert world.status.stable_revision == new
    due = None if plan.due is None else (plan.due - world.now).total_seconds()
    assert due == stage.due_in
    expected_phase = DeploymentPhase.PROMOTING if stage.step else DeploymentPhase.STABLE
    assert world.status.phase is expected_phase
    # Clients are served throughout: by the old stable until the move, by the new after it.
    assert world.condition("Available") == ("True", "MinimumReplicasAvailable")


def test_status_says_which_revision_serves_and_until_when_the_old_one_stays() -> None:
    world, old, new = _promoting()
    promotion = world.status.promotion
    assert promotion is not None
    assert (promotion.revision, promotion.previous, promotion.switched_at) == (new, old, None)
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert f"revision {new} grows to {REPLICAS} pods" in progressing.message
    assert f"revision {old} keeps serving" in progressing.message
    available = next(c for c in world.status.conditions if c.type == "Available")
    assert f"pods of revision {old} available" in available.message

    _run_stages(world, new, 3)
    promotion = world.status.promotion
    assert promotion is not None
    assert promotion.switched_at == world.now
    assert promotion.scale_down_at == world.now + timedelta(seconds=DELAY)
    # One Event per step, as the Progressing condition moves.
    assert {"PromotionScalingUp", "PromotionSwitching", "PromotionScaleDownDelay"} <= set(
        world.events()
    )


# -- the order ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_old_stable_keeps_its_pods_until_the_move_is_seen_and_the_delay_passed(
    mode: str,
) -> None:
    """Reconcile after reconcile, pods becoming available as they come, 5 seconds apart:
    no reconcile lowers the old stable while it moves traffic, nor before a reconcile read
    the move back and scaleDownDelaySeconds passed since."""
    world, old, new = _promoting(mode)
    seen_moved_at = None
    for _ in range(20):
        world.make_available(new)
        world.tick(5)
        moved_before = _serves(world, new) and world.revisions()[new] == REPLICAS
        if moved_before and seen_moved_at is None:
            seen_moved_at = world.now
        before = world.revisions()[old]
        plan = world.reconcile()
        after = world.revisions()[old]
        if after < before:
            assert not _moves_traffic(plan)
            assert seen_moved_at is not None, "scaled down before the move was seen"
            assert world.now - seen_moved_at >= timedelta(seconds=DELAY)
            assert after == 0
            break
        assert after == REPLICAS
    else:
        raise AssertionError("the old stable was never scaled down")
    assert world.revisions() == {old: 0, new: REPLICAS}
    assert world.status.promotion is None
    assert _serves(world, new)


def test_without_a_delay_the_old_stable_goes_once_the_move_is_read_back() -> None:
    world, old, new = _promoting(delay=0)
    world.make_available(new)
    plan = world.reconcile()
    assert _moves_traffic(plan)
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}  # not in the same reconcile
    world.reconcile()
    assert world.revisions() == {old: 0, new: REPLICAS}


# -- a restart in the middle ------------------------------------------------------------------


def _restarted(world: World) -> World:
    """What a restarted operator sees: the status as read back from the API server, the
    children, the clock; nothing of the stopped process."""
    return World(
        spec=copy.deepcopy(world.spec),
        status=InferenceDeploymentStatus.model_validate(world.status.to_kube()),
        generation=world.generation,
        now=world.now,
        objects=copy.deepcopy(world.objects),
    )


@pytest.mark.parametrize("index", range(1, len(STAGES)), ids=[s.name for s in STAGES[1:]])
def test_a_restart_decides_the_same_step_from_the_same_observed_state(index: int) -> None:
    world, _, new = _promoting()
    _run_stages(world, new, index)
    STAGES[index].before(world, new)
    restarted = _restarted(world)
    running = world.reconcile()
    fresh = restarted.reconcile()
    assert fresh.status.to_kube() == running.status.to_kube()
    assert fresh.sync.writes == running.sync.writes
    assert fresh.due == running.due
    assert _step(restarted) is STAGES[index].step


# -- a refused write in the middle ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "refused"),
    [("dark", "Service"), ("gateway", "Service"), ("gateway", "HTTPRoute")],
)
def test_a_refused_switch_is_retried_and_the_old_stable_keeps_serving(
    mode: str, refused: str
) -> None:
    """The API server answers 409 to the write that moves traffic: the move is not seen, so
    the same step is decided again and the write retried, however long it takes; the old
    stable keeps its pods and its requests meanwhile."""
    world, old, new = _promoting(mode)
    world.conflicts.add((refused, NAME))
    world.make_available(new)
    for _ in range(4):
        plan = world.reconcile()
        assert _step(world) is PromotionStep.SWITCHING
        assert _moves_traffic(plan)
        assert world.revisions() == {old: REPLICAS, new: REPLICAS}
        assert not _serves(world, new)
        world.tick(DELAY * 2)
    assert world.refused == [(refused, NAME)] * 4
    world.conflicts.clear()
    world.reconcile()  # the write lands
    assert _serves(world, new)
    world.reconcile()  # ... and is read back
    assert _step(world) is PromotionStep.SCALE_DOWN_DELAY
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}
    world.tick(DELAY)
    world.reconcile()
    assert world.revisions() == {old: 0, new: REPLICAS}


def test_a_move_undone_before_it_was_read_back_is_made_again() -> None:
    """Someone sets the Service back to the old stable in the delay: the move was seen, so
    the old stable still goes at the end of the delay, and the Service is moved back."""
    world, old, new = _promoting()
    _run_stages(world, new, 3)
    service = world.get("Service", NAME)
    assert service is not None
    service["spec"]["selector"]["infergate.io/revision"] = old
    world.reconcile()
    assert _serves(world, new)
    assert world.revisions()[old] == REPLICAS


def test_a_new_stable_that_loses_a_pod_before_the_switch_holds_the_switch() -> None:
    world, old, new = _promoting()
    world.make_available(new)
    world.make_unavailable(new)
    world.reconcile()
    assert _step(world) is PromotionStep.SCALING_UP
    assert _serves(world, old)
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}


# -- gateway: the route moves with the Service ----------------------------------------------


def test_the_route_keeps_its_weights_while_the_new_stable_grows() -> None:
    world, old, new = _promoting("gateway")
    assert _weights(world) == {old: 50, new: 50}
    assert _selected(world) == {old}
    world.make_available(new)
    world.reconcile()
    assert _weights(world) == {new: 100}
    assert _selected(world) == {new}


# -- abort and rollback during a promotion --------------------------------------------------


def test_an_abort_while_the_new_stable_grows_leaves_the_stable_untouched() -> None:
    world, old, new = _promoting()
    old_deployment = copy.deepcopy(world.deployment(old))
    world.annotations[ABORT] = "true"
    world.annotations[REQUESTED_BY] = "alice@example.com"
    plan = world.reconcile()
    assert world.status.stable_revision == old
    assert world.status.promotion is None
    assert world.revisions() == {old: REPLICAS}
    assert _serves(world, old)
    assert world.deployment(old)["spec"] == old_deployment["spec"]
    record = {r.hash: r for r in world.status.revisions}[new]
    assert record.rejected
    assert record.promoted_at is None
    assert "promotion aborted by alice@example.com before traffic moved" in (record.message or "")
    assert ("rollback", "Aborted") in [(o.kind, o.reason) for o in plan.outcomes]
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    world.settle()
    assert world.status.stable_revision == old
    assert world.revisions() == {old: REPLICAS}


@pytest.mark.parametrize("upto", [2, 3], ids=["switching", "scale-down delay"])
def test_an_abort_once_traffic_moves_is_refused(upto: int) -> None:
    world, old, new = _promoting()
    _run_stages(world, new, upto)
    world.annotations[ABORT] = new
    plan = world.reconcile()
    assert world.status.stable_revision == new
    [refused] = [e for e in plan.events if e.reason == "ManualActionRefused"]
    assert refused.warning
    assert f"roll back to revision {old} instead" in refused.message
    assert world.revisions()[old] == REPLICAS
    assert ABORT not in world.annotations


def test_an_abort_naming_another_revision_is_refused() -> None:
    world, old, new = _promoting()
    world.annotations[ABORT] = old
    plan = world.reconcile()
    assert world.status.stable_revision == new
    assert any(f"the revision being promoted is {new}" in e.message for e in plan.events)


def test_a_rollback_before_the_move_moves_nothing() -> None:
    world, old, new = _promoting()
    assert _serves(world, old)  # the new stable still grows
    world.annotations[ROLLBACK_TO] = old
    world.reconcile()
    assert world.status.stable_revision == old
    assert world.status.promotion is None
    assert _serves(world, old)
    assert world.revisions() == {old: REPLICAS, new: 0}


def test_a_rollback_in_the_delay_is_a_promotion_back_in_the_same_order() -> None:
    world, old, new = _promoting()
    _run_stages(world, new, 3)
    world.annotations[ROLLBACK_TO] = old
    plan = world.reconcile()
    assert world.status.stable_revision == old
    promotion = world.status.promotion
    assert promotion is not None
    assert (promotion.revision, promotion.previous) == (old, new)
    assert _moves_traffic(plan)  # the old stable is still at full size: it moves back at once
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}
    world.reconcile()
    assert _step(world) is PromotionStep.SCALE_DOWN_DELAY
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}
    world.tick(DELAY)
    world.reconcile()
    assert world.revisions() == {old: REPLICAS, new: 0}
    assert world.status.phase is DeploymentPhase.ROLLED_BACK


def test_a_rollback_to_a_revision_at_zero_keeps_the_current_stable_serving() -> None:
    """The revision rolled back to has no pods left: the current stable serves, and counts
    as Available, until it is back at full size."""
    world, old, new = _promoting(delay=0)
    world.settle()
    assert world.revisions() == {old: 0, new: REPLICAS}
    world.annotations[ROLLBACK_TO] = old
    world.reconcile()
    assert world.status.stable_revision == old
    assert _step(world) is PromotionStep.SCALING_UP
    assert _serves(world, new)
    assert world.revisions() == {old: REPLICAS, new: REPLICAS}
    assert world.condition("Available") == ("True", "MinimumReplicasAvailable")
    assert world.condition("Degraded") == ("False", "Healthy")
    world.settle()
    assert _serves(world, old)
    assert world.revisions() == {old: REPLICAS, new: 0}
