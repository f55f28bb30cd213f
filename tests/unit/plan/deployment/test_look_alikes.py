"""A ParityCheck the operator did not make never moves a rollout, whatever it copies.

A tenant who may create and edit ParityChecks in the namespace can copy everything a check
shows: its name pattern, labels, owner references and the spec-digest annotation, and
have the runner give it a real verdict. What a tenant cannot write is the deployment's
status, where the operator recorded the uid of each check it created and the digest of
the spec it created it with. Each row makes a look-alike of one check the rollout acts on
(the canary's check, a gateway step's re-check, a drift run) that differs only in uid or
spec, gives it the verdict that would help an attacker most, and asserts nothing moves.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infergate.api.golden import GoldenSpec
from infergate.plan.check.owned import ANNOTATION_SPEC_DIGEST
from infergate.plan.check.status import spec_digest
from tests.unit.plan.deployment.test_drift_rollout import (
    STORE,
    _entry,
    drift_checks,
    first_revision,
)
from tests.unit.plan.deployment.world import NAME, World

GATEWAY = {
    "mode": "gateway",
    "gateway": {
        "parentRefs": [{"name": "public", "namespace": "gateways"}],
        "steps": [
            {"weight": 10, "pauseSeconds": 60, "recheck": True},
            {"weight": 50, "pauseSeconds": 30},
        ],
    },
}
LOOSENED = {"disabledChecks": ["minTokenMatchRate", "maxMeanKl"]}
"""A spec a tenant would rather be judged by: the checks that would catch the harm off."""


def impersonate(world: World, name: str, how: str) -> None:
    """Replace the operator's check `name` with a look-alike: the same name, labels, owner
    references and (restamped) spec-digest annotation, but another uid (`how` "uid": made
    again by someone else) or another spec (`how` "spec": same object, spec changed)."""
    original = world.objects[("ParityCheck", name)]
    fake = copy.deepcopy(original)
    if how == "uid":
        fake["metadata"]["uid"] = "look-alike"
    else:
        fake["spec"] |= LOOSENED
    fake["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST] = spec_digest(fake["spec"])
    fake.pop("status", None)
    world.objects[("ParityCheck", name)] = fake


def _canary_world(traffic: dict[str, Any] | None = None) -> tuple[World, str, str]:
    world = World()
    if traffic is not None:
        world.set("rollout.traffic", traffic)
    stable, canary = world.available_canary()
    return world, stable, canary


@pytest.mark.parametrize("how", ["uid", "spec"])
def test_a_look_alike_of_the_canarys_check_never_promotes(how: str) -> None:
    world, stable, canary = _canary_world()
    name = f"{NAME}-{canary}"
    impersonate(world, name, how)
    world.set_check(name, "Passed", passed=True)  # a real runner's verdict of that object
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    assert world.condition("ParityPassed")[0] != "True"
    assert ("promotion", "Automatic") not in [(o.kind, o.reason) for o in plan.outcomes]
    if how == "uid":
        # Not the attempt's check: replaced, and the canary waits for the real one.
        assert plan.delete_checks == [name]
        assert world.status.canary_revision == canary


@pytest.mark.parametrize("how", ["uid", "spec"])
def test_a_look_alike_of_a_gateway_recheck_never_moves_a_step(how: str) -> None:
    world, stable, canary = _canary_world(GATEWAY)
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.reconcile()
    world.tick(61)
    world.reconcile()
    recheck = f"{NAME}-{canary}-step1"
    assert world.get("ParityCheck", recheck) is not None
    impersonate(world, recheck, how)
    world.set_check(recheck, "Passed", passed=True)
    world.reconcile()
    traffic = world.status.traffic
    assert world.status.stable_revision == stable
    assert traffic is None or (traffic.revision, traffic.step) != (canary, 1)


def _watched(on_drift: dict[str, Any] | None = None) -> tuple[World, str, str]:
    """A stable revision with a golden record, watched, its first drift run under way:
    (world, the revision before it, stable)."""
    world = World(golden=GoldenSpec.model_validate(STORE))
    world.set("rollout.parity.watch", {"intervalSeconds": 3600})
    if on_drift is not None:
        world.set("rollout.parity.onDrift", on_drift)
    old, canary = world.available_canary()
    world.set_check(
        f"{NAME}-{canary}", "Passed", passed=True, metrics={"tokenMatchRate": 1.0},
        golden={"stored": True, "entries": [_entry(old, "baseline"), _entry(canary, "candidate")]},
    )  # fmt: skip
    world.settle()
    assert world.status.stable_revision == canary
    world.tick(3600)
    world.reconcile()
    [run] = drift_checks(world)
    assert world.status.drift is not None
    assert world.status.drift.check_uid == run["metadata"]["uid"]
    assert world.status.drift.spec_digest == spec_digest(run["spec"])
    return world, old, canary


@pytest.mark.parametrize("how", ["uid", "spec"])
def test_a_look_alike_drift_run_never_rolls_the_stable_back(how: str) -> None:
    world, _, stable = _watched({"action": "rollback", "rollbackTo": first_revision()})
    name = f"{NAME}-{stable}-drift1"
    impersonate(world, name, how)
    world.set_check(name, "Failed", passed=False)
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    assert world.condition("Drifted")[0] != "True"
    assert ("rollback", "DriftRollback") not in [(o.kind, o.reason) for o in plan.outcomes]
    assert world.status.drift is not None
    assert name in world.status.drift.ignored
    assert (True, "DriftCheckNotBound") in [(e.warning, e.reason) for e in plan.events]


def test_a_run_nobody_recorded_never_clears_a_real_drift() -> None:
    world, _, stable = _watched()
    [run] = drift_checks(world)
    world.set_check(run["metadata"]["name"], "Failed", passed=False)
    world.reconcile()
    assert world.condition("Drifted") == ("True", "DriftDetected")
    # The next run's name, labels and owner copied from the real one, made by a tenant.
    fake = copy.deepcopy(run)
    fake["metadata"] |= {"name": f"{NAME}-{stable}-drift2", "uid": "look-alike"}
    fake.pop("status", None)
    world.objects[("ParityCheck", fake["metadata"]["name"])] = fake
    world.set_check(fake["metadata"]["name"], "Passed", passed=True)
    plan = world.reconcile()
    assert world.condition("Drifted") == ("True", "DriftDetected")
    assert world.status.drift is not None
    assert world.status.drift.ignored == [fake["metadata"]["name"]]
    assert ("drift", "Passed") not in [(o.kind, o.reason) for o in plan.outcomes]
    # The watch's own next run takes the next free name and counts as usual.
    world.tick(3600)
    world.reconcile()
    third = f"{NAME}-{stable}-drift3"
    assert world.get("ParityCheck", third) is not None
    world.set_check(third, "Passed", passed=True)
    world.reconcile()
    assert world.condition("Drifted") == ("False", "NoDriftDetected")


def test_a_look_alike_with_a_higher_run_number_does_not_hide_the_real_run() -> None:
    """A tenant copies the run under way as the next run's name while it runs: the watch
    still judges its own run (it does not take the copy's number for the run it asked
    for, wait for that, and make another), so a real drift is seen."""
    world, _, stable = _watched()
    [run] = drift_checks(world)
    fake = copy.deepcopy(run)
    fake["metadata"] |= {"name": f"{NAME}-{stable}-drift2", "uid": "look-alike"}
    fake.pop("status", None)
    world.objects[("ParityCheck", fake["metadata"]["name"])] = fake
    world.reconcile()
    assert world.status.drift is not None
    assert world.status.drift.run == 1
    assert world.status.drift.ignored == [fake["metadata"]["name"]]
    world.tick(120)  # past the grace the watch gives a run it asked for to appear
    world.reconcile()
    world.set_check(run["metadata"]["name"], "Failed", passed=False)
    world.reconcile()
    assert world.condition("Drifted") == ("True", "DriftDetected")
    assert world.status.drift.last_verdict_check == run["metadata"]["name"]


def test_a_check_made_before_status_recorded_its_digest_is_bound_as_it_was() -> None:
    """An upgrade mid-canary: the record has the check's uid but no spec digest; the uid and
    the immutable spec bind it as before, so its Passed still promotes."""
    world, _, canary = _canary_world()
    world.status = world.status.model_copy(
        update={
            "revisions": [
                r.model_copy(update={"parity_check_digest": None}) for r in world.status.revisions
            ]
        }
    )
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.settle()
    assert world.status.stable_revision == canary
