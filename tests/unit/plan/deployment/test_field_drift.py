"""Drift: edits of owned objects that contradict the revision are reverted and reported;
the controller's own changes are not drift."""

from __future__ import annotations

import json

from infergate.plan.deployment.field_drift import field_drift
from infergate.plan.deployment.sync import Recreate, Update
from tests.unit.plan.deployment.world import NAME, World


def _stable() -> tuple[World, str]:
    world = World()
    world.settle()
    assert world.status.stable_revision is not None
    return world, world.status.stable_revision


def _engine(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def test_edited_image_is_reverted_and_reported_by_field() -> None:
    world, stable = _stable()
    deployment = world.deployment(stable)
    _engine(deployment)["image"] = "vllm/vllm-openai:v0.99.0"
    plan = world.reconcile()
    updates = [w for w in plan.sync.writes if isinstance(w, Update)]
    assert len(updates) == 1
    assert updates[0].drift
    assert _engine(world.deployment(stable))["image"] == "vllm/vllm-openai:v0.32.0"
    assert world.condition("ConfigDrifted") == ("True", "DriftReverted")
    drifted = [e for e in plan.events if e.reason == "DriftReverted"]
    assert drifted
    assert drifted[0].warning
    assert "spec.template.spec.containers[engine].image" in drifted[0].message
    assert "v0.99.0" in drifted[0].message


def test_added_env_and_replicas_edit_are_drift() -> None:
    world, stable = _stable()
    deployment = world.deployment(stable)
    _engine(deployment)["env"].append({"name": "VLLM_USE_V1", "value": "0"})
    deployment["spec"]["replicas"] = 5
    plan = world.reconcile()
    [(_, fields)] = plan.sync.drift
    paths = {f.path for f in fields}
    assert "spec.replicas" in paths
    assert "spec.template.spec.containers[engine].env" in paths
    assert world.deployment(stable)["spec"]["replicas"] == 2


def test_replaced_config_map_data_is_recreated() -> None:
    world, stable = _stable()
    config_map = world.get("ConfigMap", f"{NAME}-{stable}")
    assert config_map is not None
    config = json.loads(config_map["data"]["engine.json"])
    config["dtype"] = "float16"
    config_map["data"]["engine.json"] = json.dumps(config)
    plan = world.reconcile()
    recreated = [w for w in plan.sync.writes if isinstance(w, Recreate)]
    assert len(recreated) == 1
    assert "data.engine.json" in recreated[0].drift[0].path
    restored = world.get("ConfigMap", f"{NAME}-{stable}")
    assert restored is not None
    assert json.loads(restored["data"]["engine.json"])["dtype"] == "bfloat16"


def test_a_spec_change_of_replicas_is_not_drift() -> None:
    world, _ = _stable()
    world.set("replicas", 3)
    plan = world.reconcile()
    assert plan.sync.drift == []
    assert world.condition("ConfigDrifted") == ("False", "NoDrift")


def test_drift_stays_reported_for_a_while_then_clears() -> None:
    world, stable = _stable()
    world.deployment(stable)["spec"]["replicas"] = 7
    world.reconcile()
    world.tick(60)
    world.reconcile()
    assert world.condition("ConfigDrifted") == ("True", "DriftReverted")
    world.tick(300)
    world.reconcile()
    assert world.condition("ConfigDrifted") == ("False", "NoDrift")


def test_server_defaults_are_not_drift() -> None:
    desired = {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "e"}]}}}}
    observed = {
        "replicas": 2,
        "revisionHistoryLimit": 10,
        "template": {"spec": {"containers": [{"name": "e", "terminationMessagePath": "/x"}]}},
    }
    assert field_drift(desired["spec"], observed, "spec") == []
    observed["template"]["spec"]["containers"].append({"name": "sidecar"})
    [drift] = field_drift(desired["spec"], observed, "spec")
    assert drift.path == "spec.template.spec.containers"
