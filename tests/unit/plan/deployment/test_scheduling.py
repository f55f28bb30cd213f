"""When a deployment is reconciled again though nothing changes: each plan says when its
decision changes by time alone (`ReconcilePlan.due`: a deadline, the end of a pause), the
operator sleeps until then instead of polling, and a reconcile in between writes nothing
(a waiting status says until when, not how long from now)."""

from __future__ import annotations

from datetime import timedelta

from infergate.plan.deployment.state import clock
from tests.unit.plan.deployment.test_traffic import GATEWAY
from tests.unit.plan.deployment.world import NAME, START, World


def _stable(world: World | None = None) -> tuple[World, str]:
    world = world or World()
    world.settle()
    assert world.status.stable_revision is not None
    return world, world.status.stable_revision


def _canary(world: World) -> str:
    """A canary whose Deployment exists (its second reconcile has seen it)."""
    world.change(dtype="float16")
    world.reconcile()
    world.reconcile()
    assert world.status.canary_revision is not None
    return world.status.canary_revision


def _wake_at_due(world: World) -> None:
    """Sleep as the resync loop does: until the last plan's due time."""
    due = world.plans[-1].due
    assert due is not None
    world.now = due


def test_a_deployment_at_rest_asks_for_no_reconcile() -> None:
    world, _ = _stable()
    plan = world.reconcile()
    assert plan.quiet
    assert plan.due is None


def test_a_canary_that_never_becomes_available_is_rolled_back_at_its_deadline() -> None:
    world, stable = _stable()
    canary = _canary(world)
    plan = world.plans[-1]
    # progressDeadlineSeconds is 600: passed once more than 600 s went by.
    assert plan.due == START + timedelta(seconds=601)

    # Woken earlier (a resync, a child's change): nothing to write, same due time.
    world.tick(599)
    plan = world.reconcile()
    assert plan.quiet
    assert plan.due == START + timedelta(seconds=601)
    assert world.status.canary_revision == canary

    _wake_at_due(world)
    plan = world.reconcile()
    assert world.status.canary_revision is None
    assert world.status.stable_revision == stable
    assert ("rollback", "ProgressDeadlineExceeded") in [(o.kind, o.reason) for o in plan.outcomes]
    assert plan.due is None


def test_a_canary_waiting_for_accelerators_says_until_when_and_keeps_saying_it() -> None:
    world, _ = _stable()
    canary = _canary(world)
    world.unschedulable_pod(canary, "0/7 nodes are available: 7 Insufficient nvidia.com/gpu.")
    world.reconcile()
    due = START + timedelta(seconds=601)
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert f"still unscheduled at {clock(due)}" in progressing.message
    assert clock(due) == "2026-01-05T09:10:01Z"
    for seconds in (1, 60, 300):
        world.tick(seconds)
        plan = world.reconcile()
        assert plan.quiet, "a waiting status changed with time alone"
        assert plan.due == due


def test_a_canary_without_a_verdict_is_reconciled_at_the_verdict_deadline() -> None:
    world, stable = _stable()
    world.set("rollout.parity.deadlineSeconds", 900)
    world.set("rollout.parity.runner.activeDeadlineSeconds", 600)
    canary = _canary(world)
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Running")
    plan = world.reconcile()
    # From the canary's start: 600 s to become available, the check's 900 s, a minute.
    due = START + timedelta(seconds=600 + 900 + 60 + 1)
    assert plan.due == due
    world.now = due - timedelta(seconds=1)
    world.reconcile()
    assert world.status.canary_revision == canary

    _wake_at_due(world)
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.status.stable_revision == stable


def test_a_gateway_step_is_reconciled_when_its_pause_ends() -> None:
    world = World()
    world.set("rollout.traffic", GATEWAY)
    world, _ = _stable(world)
    canary = _canary(world)
    world.make_available(canary)
    world.reconcile()
    check = f"{NAME}-{canary}"
    world.tick(5)
    world.set_check(check, "Passed", passed=True)
    plan = world.reconcile()
    passed_at = START + timedelta(seconds=5)
    assert plan.due == passed_at + timedelta(seconds=60)  # the first step's pause
    world.reconcile()  # the step as status now says it

    world.tick(20)
    plan = world.reconcile()
    assert plan.quiet
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert f"holding until {clock(passed_at + timedelta(seconds=60))}" in progressing.message
    assert world.get("ParityCheck", f"{check}-step1") is None

    _wake_at_due(world)
    world.reconcile()
    recheck = f"{check}-step1"
    assert world.get("ParityCheck", recheck) is not None  # the step's re-check, at its time

    world.set_check(recheck, "Passed", passed=True)
    plan = world.reconcile()
    assert world.status.traffic is not None
    assert world.status.traffic.step == 1
    assert plan.due == world.now + timedelta(seconds=30)  # the second step's pause

    _wake_at_due(world)
    plan = world.reconcile()
    assert world.status.stable_revision == canary
    assert plan.due is None
