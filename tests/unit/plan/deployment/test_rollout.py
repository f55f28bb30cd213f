"""Rollouts decided by the pure planner, reconcile after reconcile, in an in-memory cluster:
what a user would see in status, and which objects exist at which size."""

from __future__ import annotations

import pytest

from infergate.api.enums import DeploymentPhase, VerdictOutcome
from infergate.plan.deployment.control import ABORT, PROMOTE, REQUESTED_BY, ROLLBACK_TO
from infergate.plan.deployment.status import latest_parity_figures
from tests.unit.plan.deployment.world import NAME, World


def _stable_world() -> tuple[World, str]:
    world = World()
    world.settle()
    assert world.status.stable_revision is not None
    return world, world.status.stable_revision


def _canary(world: World, **engine: object) -> str:
    world.change(**engine)
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    return canary


def test_first_revision_becomes_stable_once_available() -> None:
    world = World()
    world.reconcile()
    revision = world.status.revisions[0].hash
    assert world.status.phase is DeploymentPhase.PROGRESSING
    assert world.status.stable_revision is None
    assert world.revisions() == {revision: 2}
    assert world.get("ConfigMap", f"{NAME}-{revision}") is not None
    assert world.get("Service", f"{NAME}-{revision}") is not None
    assert world.get("Service", NAME) is not None
    assert world.condition("Available") == ("False", "NoStableRevision")

    world.make_available()
    world.reconcile()
    assert world.status.stable_revision == revision
    assert world.status.phase is DeploymentPhase.STABLE
    assert world.condition("Available") == ("True", "MinimumReplicasAvailable")
    assert world.condition("Progressing") == ("False", "RolloutComplete")
    assert world.status.observed_generation == 1
    assert world.status.traffic_mechanism == "Dark"
    assert world.status.endpoints is not None
    assert world.status.endpoints.stable is not None
    assert world.status.endpoints.stable.service == NAME


def test_a_quiet_reconcile_writes_nothing() -> None:
    world, _ = _stable_world()
    plan = world.reconcile()
    assert plan.quiet
    assert plan.sync.writes == []
    assert not plan.status_changed
    assert plan.create_checks == []
    assert plan.delete_checks == []


def test_replicas_apply_in_place_without_canary() -> None:
    world, stable = _stable_world()
    world.set("replicas", 4)
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.revisions() == {stable: 4}
    assert world.status.observed_generation == 2


def test_canary_is_checked_and_promoted_when_parity_passes() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    assert canary != stable
    assert world.revisions() == {stable: 2, canary: 1}
    assert world.status.phase is DeploymentPhase.PROGRESSING
    assert world.of("ParityCheck") == []  # not before the canary is available

    world.make_available(canary)
    world.reconcile()
    check_name = f"{NAME}-{canary}"
    check = world.get("ParityCheck", check_name)
    assert check is not None
    assert check["spec"]["baseline"] == {
        "inferenceDeploymentRef": {"name": NAME},
        "revision": stable,
    }
    assert check["spec"]["candidate"] == {
        "inferenceDeploymentRef": {"name": NAME},
        "revision": canary,
    }
    assert check["metadata"]["ownerReferences"][0]["kind"] == "InferenceDeployment"
    assert world.status.phase is DeploymentPhase.VERIFYING
    assert world.condition("ParityPassed") == ("Unknown", "CheckPending")
    assert world.status.last_parity_check is not None
    assert world.status.last_parity_check.name == check_name
    assert world.status.last_parity_check.verdict is VerdictOutcome.PENDING

    world.set_check(check_name, "Passed", passed=True, metrics={"tokenMatchRate": 1.0})
    plan = world.reconcile()
    assert world.status.stable_revision == canary
    assert world.status.canary_revision is None
    assert world.status.phase is DeploymentPhase.PROMOTING
    assert world.condition("ParityPassed") == ("True", "CheckPassed")
    assert [(o.kind, o.reason) for o in plan.outcomes] == [
        ("verdict", "Passed"),
        ("promotion", "ParityPassed"),
    ]
    # The old stable keeps serving until the new one runs at full size.
    assert world.revisions() == {stable: 2, canary: 2}

    world.settle()
    assert world.revisions() == {stable: 0, canary: 2}
    assert world.status.phase is DeploymentPhase.STABLE
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.verdict is VerdictOutcome.PASSED
    assert record.metrics == {"tokenMatchRate": 1.0}
    assert record.promoted_at is not None
    assert world.status.last_parity_check is not None
    assert world.status.last_parity_check.verdict is VerdictOutcome.PASSED


def test_failed_check_rolls_back_and_the_revision_is_not_retried() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Failed", passed=False)
    plan = world.reconcile()

    assert world.status.stable_revision == stable
    assert world.status.canary_revision is None
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    assert world.condition("ParityPassed") == ("False", "CheckFailed")
    assert world.condition("Progressing") == ("False", "RolledBack")
    assert ("rollback", "ParityFailed") in [(o.kind, o.reason) for o in plan.outcomes]
    assert world.revisions() == {stable: 2}  # canary removed, stable untouched
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.rejected
    assert record.verdict is VerdictOutcome.FAILED
    assert "RolledBack" in world.events()

    for _ in range(3):  # not retried while the spec stays
        world.tick(30)
        world.make_available()
        world.reconcile()
    assert world.revisions() == {stable: 2}
    assert world.status.phase is DeploymentPhase.ROLLED_BACK


def test_a_rejected_revision_is_tried_again_after_the_spec_moved_on() -> None:
    world, _ = _stable_world()
    rejected = _canary(world, dtype="float16")
    world.make_available(rejected)
    world.reconcile()
    world.set_check(f"{NAME}-{rejected}", "Failed", passed=False)
    world.reconcile()

    other = _canary(world, dtype="float32")
    assert other != rejected
    world.change(dtype="float16")  # back to the rejected revision: the spec changed again
    world.tick(10)
    world.reconcile()
    assert world.status.canary_revision == rejected
    world.make_available(rejected)
    world.reconcile()
    check = world.get("ParityCheck", f"{NAME}-{rejected}")
    # The failed check of the first attempt is not this attempt's verdict.
    assert check is None or "status" not in check
    world.reconcile()
    fresh = world.get("ParityCheck", f"{NAME}-{rejected}")
    assert fresh is not None
    assert "status" not in fresh
    assert world.status.phase is DeploymentPhase.VERIFYING


def test_check_error_rolls_back_with_its_own_reason() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Error")
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    assert world.condition("ParityPassed") == ("False", "CheckError")
    assert ("rollback", "ParityError") in [(o.kind, o.reason) for o in plan.outcomes]


def test_no_verdict_within_the_deadline_rolls_back() -> None:
    """The deadline for a verdict is the canary's time to become available plus the check's
    own deadline, from the canary's start: a long check is never cut short by the rollout."""
    world, stable = _stable_world()
    world.set("rollout.parity.deadlineSeconds", 900)
    world.set("rollout.parity.runner.activeDeadlineSeconds", 600)
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Running")
    world.tick(600 + 900 + 59)  # progressDeadlineSeconds + deadlineSeconds + a minute's grace
    world.reconcile()
    assert world.status.canary_revision == canary
    world.tick(2)
    plan = world.reconcile()
    assert world.status.canary_revision is None
    assert world.status.stable_revision == stable
    assert ("rollback", "ProgressDeadlineExceeded") in [(o.kind, o.reason) for o in plan.outcomes]
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.message is not None
    assert "no verdict" in record.message


def test_a_check_that_cannot_be_created_counts_against_the_deadline() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    _squat(world, canary)
    world.tick(600 + 7200 + 61)
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.status.stable_revision == stable


def test_canary_that_never_becomes_available_is_rolled_back_at_the_deadline() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.tick(601)
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.revisions() == {stable: 2}
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.rejected
    assert "not available within" in (record.message or "")


def test_without_auto_promote_a_passed_canary_waits_for_promote_annotation() -> None:
    world, _ = _stable_world()
    world.set("rollout.autoPromote", False)
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.reconcile()
    world.reconcile()
    assert world.status.canary_revision == canary
    assert world.condition("Progressing") == ("True", "AwaitingPromotion")
    assert world.status.phase is DeploymentPhase.VERIFYING

    world.annotations[PROMOTE] = canary
    plan = world.reconcile()
    assert world.status.stable_revision == canary
    assert PROMOTE not in world.annotations
    assert plan.remove_annotations == (PROMOTE,)
    assert ("promotion", "ByHand") in [(o.kind, o.reason) for o in plan.outcomes]


def test_promote_of_a_canary_that_is_not_available_is_refused() -> None:
    world, stable = _stable_world()
    _canary(world, dtype="float16")
    world.annotations[PROMOTE] = "true"
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    refused = [e for e in plan.events if e.reason == "ManualActionRefused"]
    assert refused
    assert refused[0].warning
    assert "not available" in refused[0].message
    assert PROMOTE not in world.annotations


def test_abort_removes_the_canary_and_rejects_it() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.annotations[ABORT] = "true"
    world.annotations[REQUESTED_BY] = "alice@example.com"  # stamped by the admission policy
    plan = world.reconcile()
    assert world.status.canary_revision is None
    assert world.revisions() == {stable: 2}
    assert ("rollback", "Aborted") in [(o.kind, o.reason) for o in plan.outcomes]
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.rejected
    assert record.message == "aborted by alice@example.com; parity verdict none"
    assert any("alice@example.com" in e.message for e in plan.events)
    assert REQUESTED_BY not in world.annotations


def _promote_through(world: World, **engine: object) -> str:
    canary = _canary(world, **engine)
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.settle()
    assert world.status.stable_revision == canary
    return canary


def test_rollback_to_a_retained_revision_by_annotation() -> None:
    world, first = _stable_world()
    second = _promote_through(world, dtype="float16")
    world.annotations[ROLLBACK_TO] = first
    plan = world.reconcile()
    assert world.status.stable_revision == first
    assert ("rollback", "RollbackByHand") in [(o.kind, o.reason) for o in plan.outcomes]
    world.settle()
    assert world.revisions() == {first: 2, second: 0}
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    # The spec still says `second`; it is not rolled out again until the spec changes.
    assert world.status.canary_revision is None
    assert {r.hash: r for r in world.status.revisions}[second].rejected


def test_rollback_to_an_unknown_revision_is_refused() -> None:
    world, stable = _stable_world()
    world.annotations[ROLLBACK_TO] = "0123456789"
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    refused = [e for e in plan.events if e.reason == "ManualActionRefused"]
    assert refused
    assert "not a retained revision" in refused[0].message


def test_history_keeps_at_most_the_limit_of_old_revisions() -> None:
    world, first = _stable_world()
    for dtype in ("float16", "float32"):
        _promote_through(world, dtype=dtype)
    last = _promote_through(world, maxModelLen=8192)
    kept = world.revisions()
    assert kept[last] == 2
    assert len(kept) == 3  # stable + revisionHistoryLimit (2) old ones at zero
    assert first not in kept
    assert first not in {r.hash for r in world.status.revisions}
    assert all(check["spec"]["candidate"]["revision"] in kept for check in world.of("ParityCheck"))


def test_waiting_for_accelerators_is_progress_until_the_deadline() -> None:
    world = World()
    world.set("accelerator.count", 16)
    world.reconcile()
    revision = world.status.revisions[0].hash
    world.unschedulable_pod(revision, "0/7 nodes are available: 7 Insufficient nvidia.com/gpu.")
    world.reconcile()
    assert world.status.phase is DeploymentPhase.PROGRESSING
    assert world.condition("Progressing") == ("True", "Unschedulable")
    assert world.condition("Degraded") == ("False", "Healthy")
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert "Insufficient nvidia.com/gpu" in progressing.message
    assert f"{NAME}-{revision}-x" in progressing.message

    world.tick(601)
    world.reconcile()
    assert world.status.phase is DeploymentPhase.FAILED
    assert world.condition("Progressing") == ("False", "ProgressDeadlineExceeded")
    assert world.condition("Degraded") == ("True", "ProgressDeadlineExceeded")
    degraded = next(c for c in world.status.conditions if c.type == "Degraded")
    assert "Insufficient nvidia.com/gpu" in degraded.message


def test_a_canary_waiting_for_accelerators_is_progressing_then_rolled_back() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.unschedulable_pod(canary, "0/7 nodes are available: 7 Insufficient nvidia.com/gpu.")
    world.reconcile()
    assert world.status.phase is DeploymentPhase.PROGRESSING
    assert world.condition("Progressing") == ("True", "Unschedulable")
    world.tick(601)
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.status.stable_revision == stable
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert "Insufficient nvidia.com/gpu" in (record.message or "")


def test_status_lost_stable_is_found_from_the_deployment_role() -> None:
    world, stable = _stable_world()
    world.status = type(world.status)()
    world.reconcile()
    assert world.status.stable_revision == stable
    assert world.status.canary_revision is None
    assert world.revisions() == {stable: 2}


def test_a_restart_mid_canary_continues_from_status_and_children() -> None:
    """Nothing is remembered between reconciles: a fresh planner over the same state
    (what a restarted operator sees) reaches the same outcome."""
    world, _ = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    restarted = World(
        spec=world.spec,
        status=world.status,
        generation=world.generation,
        now=world.now,
        objects=world.objects,
    )
    restarted.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    restarted.settle()
    assert restarted.status.stable_revision == canary
    assert restarted.status.phase is DeploymentPhase.STABLE


def test_latest_parity_figures_follow_the_last_finished_check() -> None:
    world, _ = _stable_world()
    assert latest_parity_figures(world.status) == {}

    first = _canary(world, dtype="float16")
    world.make_available(first)
    world.reconcile()
    assert latest_parity_figures(world.status) == {}  # pending: nothing measured yet
    world.set_check(f"{NAME}-{first}", "Passed", passed=True, metrics={"tokenMatchRate": 1.0})
    world.settle()
    assert latest_parity_figures(world.status) == {"tokenMatchRate": 1.0}

    second = _canary(world, dtype="float32")
    world.make_available(second)
    world.reconcile()
    assert latest_parity_figures(world.status) == {}
    figures = {"tokenMatchRate": 0.5, "meanKl": 0.2}
    world.set_check(f"{NAME}-{second}", "Failed", passed=False, metrics=figures)
    world.settle()
    assert world.status.stable_revision == first
    assert latest_parity_figures(world.status) == figures


# -- a verdict counts only when it is bound to what the rollout asked ----------------------


def _checked_canary() -> tuple[World, str, str]:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    return world, stable, canary


def _squat(world: World, canary: str, **metadata: object) -> None:
    """Someone else creates a check under the canary check's name first."""
    world.objects[("ParityCheck", f"{NAME}-{canary}")] = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": f"{NAME}-{canary}", "namespace": "llm", "uid": "squatter",
                     "generation": 1, **metadata},
        "spec": {"baseline": {"revision": canary}, "candidate": {"revision": canary}},
        "status": {"phase": "Passed", "verdict": {"passed": True, "outcome": "Passed"}},
    }  # fmt: skip


def test_a_phase_passed_without_a_verdict_does_not_promote() -> None:
    world, stable, canary = _checked_canary()
    world.set_check(f"{NAME}-{canary}", "Passed")  # a phase, no verdict at all
    world.reconcile()
    assert world.status.stable_revision == stable
    assert world.condition("ParityPassed") == ("False", "CheckNotBound")
    assert "verdict.passed is not true" in next(
        c.message for c in world.status.conditions if c.type == "ParityPassed"
    )


def test_a_passed_verdict_for_another_spec_or_generation_does_not_promote() -> None:
    world, stable, canary = _checked_canary()
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True, bound=False)
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    assert world.status.canary_revision is None  # rolled back as an error, fail closed
    assert ("rollback", "ParityError") in [(o.kind, o.reason) for o in plan.outcomes]
    assert "CheckNotBound" in [e.reason for e in plan.events]


def test_a_check_whose_spec_was_edited_does_not_promote() -> None:
    world, stable, canary = _checked_canary()
    check = world.objects[("ParityCheck", f"{NAME}-{canary}")]
    check["spec"]["candidate"]["revision"] = stable  # compare stable with itself
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.reconcile()
    assert world.status.stable_revision == stable
    message = next(c.message for c in world.status.conditions if c.type == "ParityPassed")
    assert "not stable" in message


def test_a_check_created_by_someone_else_is_never_adopted_nor_deleted() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    _squat(world, canary)
    world.make_available(canary)
    plan = world.reconcile()
    assert world.status.stable_revision == stable
    assert world.status.canary_revision == canary
    assert plan.create_checks == []
    assert plan.delete_checks == []
    assert world.condition("ParityPassed") == ("Unknown", "CheckNotBound")
    assert world.get("ParityCheck", f"{NAME}-{canary}")["metadata"]["uid"] == "squatter"


def test_a_check_claiming_this_deployment_but_not_made_for_this_attempt_is_replaced() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    owner = {"ownerReferences": [{"kind": "InferenceDeployment", "name": NAME, "uid": "0f6c-uid",
                                  "controller": True}]}  # fmt: skip
    _squat(world, canary, **owner)
    world.make_available(canary)
    plan = world.reconcile()
    assert plan.delete_checks == [f"{NAME}-{canary}"]
    assert world.status.stable_revision == stable
    world.reconcile()
    fresh = world.get("ParityCheck", f"{NAME}-{canary}")
    assert fresh is not None
    assert fresh["metadata"]["uid"] != "squatter"
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.parity_check_uid == fresh["metadata"]["uid"]


def test_a_check_whose_uid_record_was_lost_is_bound_not_replaced() -> None:
    """The status write recording a new check's uid fails after the create (a 500, a 409,
    a crash): the check is the one the attempt asked for, its spec the digest the attempt
    recorded before creating it. It is bound and judged, not deleted with its runner's
    work; its verdict promotes."""
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.lost_uid_writes = 1
    world.reconcile()
    name = f"{NAME}-{canary}"
    made = world.get("ParityCheck", name)
    assert made is not None
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.parity_check_uid is None
    world.set_check(name, "Passed", passed=True)
    plan = world.reconcile()
    assert plan.delete_checks == []
    assert plan.create_checks == []
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.parity_check_uid == made["metadata"]["uid"]
    assert any(e.reason == "ParityCheckCreated" and name in e.message for e in plan.events)
    world.settle()
    assert world.status.stable_revision == canary
    assert world.get("ParityCheck", name)["metadata"]["uid"] == made["metadata"]["uid"]
    assert stable != canary


def test_an_earlier_attempts_check_of_the_same_spec_is_replaced_even_unrecorded() -> None:
    """A check of an earlier attempt has the very spec the new attempt asks for (same
    revisions, same suite), and a Passed verdict. A new attempt clears the digest it
    binds by, so the old check is replaced, not bound, even when the new attempt's own
    uid record is lost too; only the new check's verdict counts."""
    world, stable = _stable_world()
    world.set("rollout.autoPromote", False)
    first = _canary(world, dtype="float16")
    world.make_available(first)
    world.reconcile()
    name = f"{NAME}-{first}"
    old_uid = world.get("ParityCheck", name)["metadata"]["uid"]
    world.set_check(name, "Passed", passed=True)  # waits for a person
    world.reconcile()
    _canary(world, dtype="float32")  # the spec moves on ...
    world.make_available()
    world.reconcile()
    world.change(dtype="float16")  # ... and back: a new attempt of the first canary
    world.tick(10)
    world.lost_uid_writes = 1
    world.reconcile()
    world.make_available(first)
    for _ in range(3):
        world.reconcile()
    fresh = world.get("ParityCheck", name)
    assert fresh is not None
    assert fresh["metadata"]["uid"] != old_uid
    assert "status" not in fresh
    record = {r.hash: r for r in world.status.revisions}[first]
    assert record.parity_check_uid == fresh["metadata"]["uid"]
    assert world.status.stable_revision == stable
    assert record.verdict is VerdictOutcome.PENDING


@pytest.mark.parametrize("phase", ["Failed", "Error", "Inconclusive"])
def test_every_verdict_but_a_bound_pass_rolls_back(phase: str) -> None:
    world, stable, canary = _checked_canary()
    world.set_check(f"{NAME}-{canary}", phase, passed=False)
    world.reconcile()
    assert world.status.stable_revision == stable
    assert world.status.canary_revision is None
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.verdict is VerdictOutcome(phase)
    assert record.rejected


def test_a_promote_by_hand_names_who_asked_and_the_verdict_it_overrode() -> None:
    world, _ = _stable_world()
    canary = _canary(world, dtype="float16")
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"{NAME}-{canary}", "Inconclusive", passed=False)
    world.set("rollout.autoRollback", False)
    world.reconcile()
    world.annotations[PROMOTE] = "true"
    world.annotations[REQUESTED_BY] = "bob@example.com"
    plan = world.reconcile()
    assert world.status.stable_revision == canary
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.message == "promoted by bob@example.com; parity verdict Inconclusive"
    assert record.promoted_at is not None
    [event] = [e for e in plan.events if e.reason == "ManualAction"]
    assert event.warning  # promoted over a verdict that was not Passed
    assert "bob@example.com" in event.message


def test_abort_false_does_nothing_but_is_consumed() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    world.annotations[ABORT] = "false"
    plan = world.reconcile()
    assert world.status.canary_revision == canary
    assert world.status.stable_revision == stable
    assert plan.remove_annotations == (ABORT,)


def test_abort_by_hash_applies_to_that_canary_only() -> None:
    world, stable = _stable_world()
    canary = _canary(world, dtype="float16")
    other = "0" * 10 if canary != "0" * 10 else "1" * 10
    world.annotations[ABORT] = other  # asked about a canary that is no longer the canary
    plan = world.reconcile()
    assert world.status.canary_revision == canary
    assert any(e.warning and f"the canary is {canary}" in e.message for e in plan.events)
    assert plan.remove_annotations == (ABORT,)
    world.annotations[ABORT] = canary  # what `infergate abort` writes
    world.reconcile()
    assert world.status.canary_revision is None
    assert world.revisions() == {stable: 2}
