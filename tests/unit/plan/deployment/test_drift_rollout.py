"""The drift watch inside whole reconciles: what a user sees in status, Events and checks as
the stable revision is watched, drifts, recovers, or is rolled back; and that a drift run
never moves a canary."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from infergate.api.enums import DeploymentPhase
from infergate.api.golden import GoldenSpec
from infergate.plan.deployment.reconcile import ReconcilePlan
from infergate.plan.deployment.wake import again_in
from tests.unit.plan.deployment.world import NAME, World

STORE = {"store": {"pvc": {"claimName": "golden-records"}}}


def _entry(revision: str, role: str) -> str:
    return f"llm/{NAME}/{revision}-20260105T090000000000Z-{role}-0a1b2c3d"


def watched(
    watch: dict[str, Any] | None = None, on_drift: dict[str, Any] | None = None, **golden: Any
) -> tuple[World, str, str]:
    """A deployment whose stable revision got its golden record from the canary check that
    promoted it: (world, previous stable, stable)."""
    world = World(golden=GoldenSpec.model_validate({**STORE, **golden}))
    world.set("rollout.parity.watch", watch or {"intervalSeconds": 3600})
    if on_drift is not None:
        world.set("rollout.parity.onDrift", on_drift)
    old, canary = world.available_canary()
    check = f"{NAME}-{canary}"
    world.set_check(
        check, "Passed", passed=True, metrics={"tokenMatchRate": 1.0},
        golden={"stored": True, "entries": [_entry(old, "baseline"), _entry(canary, "candidate")]},
    )  # fmt: skip
    world.settle()
    assert world.status.stable_revision == canary
    return world, old, canary


def drift_checks(world: World) -> list[dict[str, Any]]:
    return [
        c
        for c in world.of("ParityCheck")
        if c["metadata"]["labels"].get("infergate.io/check-purpose") == "drift"
    ]


def notices(plan: ReconcilePlan) -> list[tuple[bool, str]]:
    return [(e.warning, e.reason) for e in plan.events]


def test_a_stable_revision_is_checked_against_its_own_record_when_due() -> None:
    world, _, stable = watched()
    assert world.condition("Drifted") == ("Unknown", "DriftWatchWaiting")
    drift = world.status.drift
    assert drift is not None
    record = next(r for r in world.status.revisions if r.hash == stable)
    assert record.promoted_at is not None
    assert drift.next_run == record.promoted_at + timedelta(seconds=3600)
    plan = world.reconcile()
    wake = again_in(plan.due, world.now)
    assert wake is not None
    assert 0 < wake <= 3600
    assert drift_checks(world) == []

    world.tick(wake)
    plan = world.reconcile()
    [check] = drift_checks(world)
    assert check["metadata"]["name"] == f"{NAME}-{stable}-drift1"
    assert check["spec"]["baseline"] == {"golden": {"revision": stable}}
    assert check["spec"]["candidate"] == {
        "inferenceDeploymentRef": {"name": NAME},
        "revision": stable,
    }
    assert check["spec"]["profile"] == "strict"  # the engine runs deterministic
    # The store keeps hidden-state summaries, which cannot be teacher-forced against.
    assert check["spec"]["hiddenStates"]["enabled"] is False
    assert "infergate.io/spec-digest" in check["metadata"]["annotations"]
    assert world.status.drift is not None
    assert world.status.drift.running is True
    assert world.condition("Drifted") == ("Unknown", "DriftCheckPending")

    # One at a time: however long it runs, no second run starts.
    for _ in range(3):
        world.tick(1800)
        world.reconcile()
    assert len(drift_checks(world)) == 1


def test_a_failed_run_sets_drifted_with_a_warning_and_a_passed_run_clears_it() -> None:
    world, _, stable = watched()
    world.tick(3600)
    world.reconcile()
    [check] = drift_checks(world)
    world.set_check(check["metadata"]["name"], "Failed", passed=False)
    plan = world.reconcile()
    assert world.condition("Drifted") == ("True", "DriftDetected")
    assert (True, "DriftDetected") in notices(plan)
    assert ("drift", "Failed") in [(o.kind, o.reason) for o in plan.outcomes]
    # Nothing else happens with the default action (alert).
    assert world.status.stable_revision == stable
    assert world.status.canary_revision is None
    assert world.status.phase is DeploymentPhase.STABLE
    assert world.condition("ParityPassed")[0] == "True"
    again = world.reconcile()
    assert again.outcomes == []  # counted once

    world.tick(3600)
    world.reconcile()
    second = f"{NAME}-{stable}-drift2"
    assert world.get("ParityCheck", second) is not None
    world.set_check(second, "Passed", passed=True)
    plan = world.reconcile()
    assert world.condition("Drifted") == ("False", "NoDriftDetected")
    assert (False, "NoDriftDetected") in notices(plan)


def first_revision() -> str:
    """The revision the first spec makes (rollout settings are not part of it)."""
    world = World()
    world.settle()
    assert world.status.stable_revision is not None
    return world.status.stable_revision


def test_a_forged_failed_verdict_neither_sets_drifted_nor_rolls_back() -> None:
    world, old, stable = watched(on_drift={"action": "rollback", "rollbackTo": first_revision()})
    world.tick(3600)
    world.reconcile()
    [check] = drift_checks(world)
    world.set_check(check["metadata"]["name"], "Failed", passed=False, bound=False)
    world.reconcile()
    assert world.condition("Drifted") == ("Unknown", "DriftCheckNotBound")
    assert world.status.stable_revision == stable
    assert world.revisions()[old] == 0


def test_a_drift_rolls_back_to_the_revision_named_when_asked() -> None:
    first = first_revision()
    world, old, stable = watched(on_drift={"action": "rollback", "rollbackTo": first})
    assert old == first
    world.tick(3600)
    world.reconcile()
    [check] = drift_checks(world)
    world.set_check(check["metadata"]["name"], "Failed", passed=False)
    plan = world.reconcile()
    assert world.status.stable_revision == old
    record = next(r for r in world.status.revisions if r.hash == stable)
    assert record.rejected  # not made a canary again until the spec changes
    assert (True, "DriftRollback") in notices(plan)
    assert ("rollback", "DriftRollback") in [(o.kind, o.reason) for o in plan.outcomes]
    world.settle()
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    assert world.status.canary_revision is None
    assert world.revisions()[old] == 2


def test_a_canary_never_takes_a_drift_run_for_its_check_nor_deletes_a_running_one() -> None:
    world, _, stable = watched()
    world.tick(3600)
    world.reconcile()
    [running] = drift_checks(world)
    world.change(dtype="float32")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    world.make_available(canary)
    world.reconcile()
    assert world.get("ParityCheck", running["metadata"]["name"]) is not None
    assert world.get("ParityCheck", f"{NAME}-{canary}") is not None
    assert world.condition("Drifted") == ("Unknown", "DriftCheckPending")
    assert world.status.last_parity_check is not None
    assert world.status.last_parity_check.name == f"{NAME}-{canary}"
    # The drift run's verdict does not judge the canary.
    world.set_check(running["metadata"]["name"], "Failed", passed=False)
    world.reconcile()
    assert world.status.canary_revision == canary
    assert world.condition("ParityPassed") == ("Unknown", "CheckPending")
    assert world.status.stable_revision == stable


def test_without_a_golden_store_no_run_is_made_and_status_says_why() -> None:
    world = World()
    world.set("rollout.parity.watch", {"schedule": "* * * * *"})
    world.settle()
    world.tick(3600)
    world.reconcile()
    assert drift_checks(world) == []
    assert world.condition("Drifted") == ("Unknown", "GoldenStoreNotConfigured")


def test_a_revision_without_a_record_is_not_watched_and_status_says_why() -> None:
    world = World(golden=GoldenSpec.model_validate(STORE))
    world.set("rollout.parity.watch", {"schedule": "* * * * *"})
    world.settle()  # the first revision was never checked: nothing recorded it
    world.tick(3600)
    world.reconcile()
    assert drift_checks(world) == []
    assert world.condition("Drifted") == ("Unknown", "NoGoldenRecord")


def test_removing_the_watch_removes_drifted_and_its_status() -> None:
    world, _, _ = watched()
    world.spec["rollout"]["parity"].pop("watch")
    world.generation += 1
    world.reconcile()
    assert world.status.drift is None
    assert all(c.type != "Drifted" for c in world.status.conditions)


def test_a_full_hidden_state_store_compares_hidden_states() -> None:
    world, _, _ = watched(hiddenStates="full")
    world.tick(3600)
    world.reconcile()
    [check] = drift_checks(world)
    assert check["spec"]["hiddenStates"]["enabled"] is True


def test_a_restarted_group_of_the_stable_revision_is_re_checked_at_once() -> None:
    """A multi-node stable revision: its groups are recorded as seen whole; a pod of one
    made again (new uids) calls a drift run at once, though the next is an hour away."""
    world = World(golden=GoldenSpec.model_validate(STORE))
    world.set("topology", {"nodes": 2, "acceleratorsPerNode": 1, "pipelineParallelSize": 2})
    world.set("rollout.parity.watch", {"intervalSeconds": 3600})
    world.set("rollout.parity.hiddenStates", {"enabled": False})
    old, canary = world.available_canary()
    world.set_check(
        f"{NAME}-{canary}", "Passed", passed=True, metrics={"tokenMatchRate": 1.0},
        golden={"stored": True, "entries": [_entry(old, "baseline"), _entry(canary, "candidate")]},
    )  # fmt: skip
    world.settle()
    assert world.status.stable_revision == canary
    assert world.of("Deployment") == []
    drift = world.status.drift
    assert drift is not None
    assert len(drift.groups) == 2  # two replicas: two groups of two pods
    assert world.condition("Drifted") == ("Unknown", "DriftWatchWaiting")
    assert drift_checks(world) == []

    world.replace_pod(f"{NAME}-{canary}-group-1-1")
    plan = world.reconcile()
    [run] = drift_checks(world)
    assert run["metadata"]["name"] == f"{NAME}-{canary}-drift1"
    assert world.condition("Drifted") == ("Unknown", "GroupRestarted")
    assert (True, "GroupRestarted") in notices(plan)
    assert world.status.drift is not None
    assert world.status.drift.restarted_groups == []  # the run took it over
    plan = world.reconcile()
    assert (True, "GroupRestarted") not in notices(plan)  # announced once
    assert len(drift_checks(world)) == 1
