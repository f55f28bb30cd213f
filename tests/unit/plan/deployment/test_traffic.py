"""Where live requests go during a rollout, as a user reads it off the cluster: which pods the
stable Service selects, the HTTPRoute's weights step by step, and status.traffic."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.enums import DeploymentPhase, VerdictOutcome
from infergate.plan.deployment.sync import Update
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


def _world(traffic: dict[str, Any] | None = None) -> tuple[World, str]:
    world = World()
    if traffic is not None:
        world.set("rollout.traffic", traffic)
    world.settle()
    stable = world.status.stable_revision
    assert stable is not None
    return world, stable


def _checked_canary(world: World) -> tuple[str, str]:
    world.change(dtype="float16")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    world.make_available(canary)
    world.reconcile()
    check = f"{NAME}-{canary}"
    assert world.get("ParityCheck", check) is not None
    return canary, check


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
    """Revision Service -> weight, as the HTTPRoute says."""
    route = world.get("HTTPRoute", NAME)
    assert route is not None
    [rule] = route["spec"]["rules"]
    return {b["name"].removeprefix(f"{NAME}-"): b["weight"] for b in rule["backendRefs"]}


# -- dark and replicas ----------------------------------------------------------------------


def test_dark_by_default_the_canary_serves_nobody_until_promoted() -> None:
    world, stable = _world()
    assert world.status.traffic_mechanism == "Dark"
    canary, check = _checked_canary(world)
    assert _selected(world) == {stable}
    assert world.status.traffic is not None
    assert world.status.traffic.canary_weight == 0
    # The runner reaches the canary through its own Service.
    assert world.status.endpoints is not None
    assert world.status.endpoints.canary is not None
    assert world.status.endpoints.canary.service == f"{NAME}-{canary}"

    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    assert world.status.stable_revision == canary
    # The new stable grows to full size first; the old one answers meanwhile.
    assert _selected(world) == {stable}
    world.make_available(canary)
    world.reconcile()
    # Promotion moves traffic: from now on only the new stable answers.
    assert _selected(world) == {canary}


def test_a_failed_canary_never_serves_under_dark() -> None:
    world, stable = _world()
    canary, check = _checked_canary(world)
    world.set_check(check, "Failed", passed=False)
    world.reconcile()
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    assert _selected(world) == {stable}
    assert canary not in _selected(world)


def test_replicas_mode_selects_every_revision_and_states_the_share() -> None:
    world, stable = _world({"mode": "replicas"})
    assert world.status.traffic_mechanism == "ReplicaRatio"
    canary, _ = _checked_canary(world)
    assert _selected(world) == {stable, canary}
    assert world.status.traffic is not None
    # canaryReplicas 1 beside replicas 2.
    assert world.status.traffic.canary_weight == 33


def test_moving_from_dark_to_replicas_drops_the_revision_from_the_selector() -> None:
    world, _ = _world()
    assert "infergate.io/revision" in world.get("Service", NAME)["spec"]["selector"]  # type: ignore[index]
    world.set("rollout.traffic", {"mode": "replicas"})
    plan = world.reconcile()
    [update] = [
        w
        for w in plan.sync.writes
        if isinstance(w, Update) and w.manifest["metadata"]["name"] == NAME
    ]
    # A merge patch keeps keys it does not name: the stale key is removed explicitly.
    assert update.manifest["spec"]["selector"]["infergate.io/revision"] is None


# -- gateway ----------------------------------------------------------------------------------


def test_gateway_weights_follow_the_steps_then_the_canary_is_promoted() -> None:
    world, stable = _world(GATEWAY)
    assert world.status.traffic_mechanism == "GatewayWeights"
    assert _weights(world) == {stable: 100}
    route = world.get("HTTPRoute", NAME)
    assert route is not None
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public",
         "namespace": "gateways"}
    ]  # fmt: skip
    canary, check = _checked_canary(world)
    assert _weights(world) == {stable: 100, canary: 0}
    assert _selected(world) == {stable}

    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    assert _weights(world) == {stable: 90, canary: 10}
    traffic = world.status.traffic
    assert traffic is not None
    assert (traffic.revision, traffic.step, traffic.canary_weight) == (canary, 0, 10)
    assert world.status.phase is DeploymentPhase.PROMOTING
    assert world.condition("Progressing") == ("True", "TrafficStepping")
    assert world.status.stable_revision == stable

    world.tick(30)
    world.reconcile()
    assert _weights(world) == {stable: 90, canary: 10}
    assert world.get("ParityCheck", f"{check}-step1") is None  # still pausing

    world.tick(31)
    world.reconcile()
    recheck = f"{check}-step1"
    assert world.get("ParityCheck", recheck) is not None
    assert world.status.traffic is not None
    assert world.status.traffic.recheck == recheck
    assert _weights(world) == {stable: 90, canary: 10}

    world.set_check(recheck, "Passed", passed=True)
    world.reconcile()
    assert _weights(world) == {stable: 50, canary: 50}
    assert world.status.traffic is not None
    assert world.status.traffic.step == 1

    world.tick(31)
    world.reconcile()
    assert world.status.stable_revision == canary
    assert world.status.canary_revision is None
    # The route keeps the last step's weights while the new stable grows to full size.
    assert _weights(world) == {stable: 50, canary: 50}
    world.make_available(canary)
    world.reconcile()
    assert _weights(world) == {canary: 100}
    assert _selected(world) == {canary}


@pytest.mark.parametrize("phase", ["Failed", "Error", "Inconclusive"])
def test_a_failed_recheck_sends_the_weight_back_to_stable(phase: str) -> None:
    world, stable = _world(GATEWAY)
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    world.tick(61)
    world.reconcile()
    world.set_check(f"{check}-step1", phase, passed=False)
    plan = world.reconcile()
    assert _weights(world) == {stable: 100}
    assert world.status.canary_revision is None
    assert world.status.phase is DeploymentPhase.ROLLED_BACK
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert record.rejected is True
    assert record.verdict is VerdictOutcome(phase)
    assert "gateway step 1 (10% of requests) failed" in (record.message or "")
    assert ("rollback", "TrafficStepFailed") in [(o.kind, o.reason) for o in plan.outcomes]


def test_a_canary_that_stops_being_available_during_a_step_is_rolled_back() -> None:
    world, stable = _world(GATEWAY)
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    assert _weights(world) == {stable: 90, canary: 10}
    world.make_unavailable(canary)
    world.reconcile()
    assert _weights(world) == {stable: 100}
    assert world.status.canary_revision is None
    record = {r.hash: r for r in world.status.revisions}[canary]
    assert "not available" in (record.message or "")


def test_a_restarted_operator_continues_the_step_from_status() -> None:
    world, stable = _world(GATEWAY)
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    world.tick(40)
    # A restart: nothing but the status read back from the API server.
    world.status = InferenceDeploymentStatus.model_validate(world.status.to_kube())
    world.reconcile()
    assert _weights(world) == {stable: 90, canary: 10}
    world.tick(21)
    world.reconcile()
    assert world.get("ParityCheck", f"{check}-step1") is not None


def test_a_manual_promote_skips_the_remaining_steps() -> None:
    world, stable = _world(GATEWAY)
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    world.annotations["infergate.io/promote"] = "true"
    world.reconcile()
    assert world.status.stable_revision == canary
    assert _weights(world) == {stable: 90, canary: 10}  # until it runs at full size
    world.make_available(canary)
    world.reconcile()
    assert _weights(world) == {canary: 100}


def test_a_step_counts_only_once_the_route_is_seen_carrying_its_weight() -> None:
    world, stable = _world(GATEWAY)
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    route = world.get("HTTPRoute", NAME)
    assert route is not None
    # The route still says 0 for the canary (an update not seen yet, or undone by hand).
    route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 0
    route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 100
    world.tick(61)
    world.reconcile()
    assert world.get("ParityCheck", f"{check}-step1") is None
    assert world.condition("Progressing") == ("True", "TrafficStepping")
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert f"waiting for HTTPRoute {NAME} to give it 10% (it gives 0%)" in progressing.message
    assert _weights(world) == {stable: 90, canary: 10}  # written back
    world.reconcile()
    assert world.get("ParityCheck", f"{check}-step1") is not None


# -- names held by someone else's objects --------------------------------------------------


def _message(world: World, type_: str) -> str:
    return next(c.message for c in world.status.conditions if c.type == type_)


def test_a_route_someone_else_made_under_the_name_holds_the_steps_and_is_left_alone() -> None:
    world = World()
    world.foreign("HTTPRoute", NAME, spec={"rules": [{"backendRefs": [{"name": "theirs"}]}]})
    world.set("rollout.traffic", GATEWAY)
    world.settle()
    stable = world.status.stable_revision
    assert stable is not None
    assert world.condition("Degraded") == ("True", "NameTaken")
    assert (
        f"HTTPRoute {NAME} already exists and was not made by infergate (it has no controller)"
        in _message(world, "Degraded")
    )
    assert "NameTaken" in world.events()
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    world.tick(3600)
    world.reconcile()
    assert world.condition("Progressing") == ("True", "TrafficHeld")
    assert f"HTTPRoute {NAME} already exists" in _message(world, "Progressing")
    assert world.status.stable_revision == stable
    assert world.status.traffic is not None
    assert world.status.traffic.canary_weight == 0
    assert world.get("ParityCheck", f"{check}-step1") is None
    # Nothing is watched of theirs: the name is tried again soon, not at the next resync.
    assert world.plans[-1].due is not None
    assert world.plans[-1].due <= world.now + timedelta(seconds=30)
    # Theirs is never written.
    route = world.get("HTTPRoute", NAME)
    assert route is not None
    assert route["spec"] == {"rules": [{"backendRefs": [{"name": "theirs"}]}]}
    # Once the name is free, the route is ours and the steps begin.
    world.objects.pop(("HTTPRoute", NAME))
    world.reconcile()
    world.reconcile()
    assert world.condition("Degraded") == ("False", "Healthy")
    assert _weights(world) == {stable: 90, canary: 10}
    assert world.condition("Progressing") == ("True", "TrafficStepping")


def test_a_stable_service_someone_else_made_holds_promotion_even_by_hand() -> None:
    world = World()
    world.foreign("Service", NAME, spec={"selector": {"app": "theirs"}})
    world.settle()
    stable = world.status.stable_revision
    assert stable is not None
    assert world.condition("Degraded") == ("True", "NameTaken")
    canary, check = _checked_canary(world)
    world.set_check(check, "Passed", passed=True)
    world.reconcile()
    assert world.condition("Progressing") == ("True", "TrafficHeld")
    assert world.status.stable_revision == stable
    world.annotations["infergate.io/promote"] = "true"
    world.reconcile()
    assert world.status.stable_revision == stable
    assert "ManualActionRefused" in world.events()
    service = world.get("Service", NAME)
    assert service is not None
    assert service["spec"] == {"selector": {"app": "theirs"}}
    world.objects.pop(("Service", NAME))
    world.reconcile()
    world.reconcile()
    assert world.status.stable_revision == canary
    world.make_available(canary)  # the new stable at full size before the Service moves
    world.reconcile()
    assert _selected(world) == {canary}
    assert world.condition("Degraded") == ("False", "Healthy")


def test_a_name_no_longer_wanted_stops_being_reported() -> None:
    world = World()
    world.foreign("HTTPRoute", NAME)
    world.set("rollout.traffic", GATEWAY)
    world.settle()
    assert world.condition("Degraded") == ("True", "NameTaken")
    world.set("rollout.traffic", {"mode": "dark"})
    world.reconcile()
    assert world.condition("Degraded") == ("False", "Healthy")


def test_leaving_gateway_mode_deletes_the_route() -> None:
    world, _ = _world(GATEWAY)
    assert world.get("HTTPRoute", NAME) is not None
    world.set("rollout.traffic", {"mode": "dark"})
    world.reconcile()
    assert world.get("HTTPRoute", NAME) is None


# -- mirror -------------------------------------------------------------------------------------


MIRROR_KINDS = ("ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Deployment", "Service")


def test_a_mirror_is_rendered_with_its_own_identity_and_removed_with_it() -> None:
    world, _ = _world()
    world.set("rollout.mirror", {"replicas": 1})
    world.reconcile()
    name = f"{NAME}-mirror"
    for kind in MIRROR_KINDS:
        assert world.get(kind, name) is not None, kind
    policy = world.get("NetworkPolicy", name)
    assert policy is not None
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "InferenceDeployment"
    assert world.status.endpoints is not None
    assert world.status.endpoints.mirror is not None
    assert world.status.endpoints.mirror.service == name
    # A second reconcile writes nothing: what was made is what is wanted.
    assert world.reconcile().quiet
    world.set("rollout.mirror", None)
    world.reconcile()
    for kind in MIRROR_KINDS:
        assert world.get(kind, name) is None, kind


def test_a_mirror_policy_opened_by_hand_is_closed_again() -> None:
    world, _ = _world()
    world.set("rollout.mirror", {"replicas": 1})
    world.reconcile()
    name = f"{NAME}-mirror"
    policy = world.get("NetworkPolicy", name)
    assert policy is not None
    wanted = copy.deepcopy(policy["spec"])
    # Someone drops the control port's source restriction: every pod could read sessions.
    for rule in policy["spec"]["ingress"]:
        rule.pop("from", None)
    plan = world.reconcile()
    assert [w.ref.kind for w in plan.sync.writes if isinstance(w, Update)] == ["NetworkPolicy"]
    restored = world.get("NetworkPolicy", name)
    assert restored is not None
    assert restored["spec"] == wanted
    # Deleted by hand: made again.
    world.objects.pop(("NetworkPolicy", name))
    world.reconcile()
    assert world.get("NetworkPolicy", name) is not None
