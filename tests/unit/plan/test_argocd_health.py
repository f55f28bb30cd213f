"""The Argo CD health checks of docs/day-2.md, run as written on statuses the operator
writes: Argo CD says what Ready, Reconciling and Stalled say (Healthy, Progressing,
Degraded; Suspended at a manual promotion gate). Needs the `lupa` Lua runtime."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import lupa  # a dev dependency (make setup): the checks run in a real Lua runtime
import pytest

from infergate.api.enums import CheckPhase, ConditionStatus
from infergate.plan import reasons
from infergate.plan.check.status import check_conditions, terminal_updates
from infergate.plan.conditions import ConditionUpdate
from tests.tools import REPO
from tests.unit.plan.deployment.world import World

DOC = REPO / "docs" / "day-2.md"
AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _scripts() -> dict[str, str]:
    """Kind -> the Lua block of the doc whose first line names it."""
    blocks = re.findall(r"```lua\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    return {block.splitlines()[0].removeprefix("-- "): block for block in blocks}


def _health(kind: str, obj: dict[str, Any]) -> str:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    as_lua = lua.eval("function(text) return load(text) end")
    script = as_lua(f"return function(obj)\n{_scripts()[kind]}\nend")()
    result = script(_to_lua(lua, obj))
    return f"{result['status']}"


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def _deployment(world: World) -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen", "generation": world.generation},
        "status": world.status.to_kube(),
    }


def test_the_doc_holds_a_script_per_kind() -> None:
    assert set(_scripts()) == {"InferenceDeployment", "ParityCheck"}


def test_a_deployment_reads_progressing_healthy_suspended_and_degraded() -> None:
    world = World()
    assert _health("InferenceDeployment", {"metadata": {"generation": 1}}) == "Progressing"
    world.reconcile()
    assert _health("InferenceDeployment", _deployment(world)) == "Progressing"
    world.make_available()
    world.reconcile()
    assert _health("InferenceDeployment", _deployment(world)) == "Healthy"
    # A spec the operator has not seen yet is not healthy, whatever Ready says.
    assert (
        _health("InferenceDeployment", {**_deployment(world), "metadata": {"generation": 9}})
        == "Progressing"
    )

    world.set("rollout.autoPromote", False)
    world.change(dtype="float16")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"qwen-{canary}", "Passed", passed=True)
    world.reconcile()
    assert world.condition("Progressing") == ("True", "AwaitingPromotion")
    assert _health("InferenceDeployment", _deployment(world)) == "Suspended"

    world.change(dtype="float32")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    world.make_available(canary)
    world.reconcile()
    world.set_check(f"qwen-{canary}", "Failed", passed=False)
    world.reconcile()
    assert world.condition("Stalled") == ("True", "RolledBack")
    assert _health("InferenceDeployment", _deployment(world)) == "Degraded"


@pytest.mark.parametrize(
    ("updates", "health"),
    [
        ([ConditionUpdate(reasons.CHECK_COMPLETE, ConditionStatus.FALSE,
                          reasons.CHECK_RUNNER_STARTED, "runner Job started")], "Progressing"),
        (terminal_updates(CheckPhase.PASSED, reasons.CHECK_PARITY_PASSED, "ok"), "Healthy"),
        (terminal_updates(CheckPhase.FAILED, reasons.CHECK_PARITY_FAILED, "kl"), "Degraded"),
        (terminal_updates(CheckPhase.ERROR, reasons.CHECK_DEADLINE_EXCEEDED, "late"), "Degraded"),
    ],
)  # fmt: skip
def test_a_check_reads_as_a_job_does(updates: list[ConditionUpdate], health: str) -> None:
    conditions = check_conditions({}, updates, generation=1, at=AT)
    check = {"metadata": {"generation": 1}, "status": {"conditions": conditions}}
    assert _health("ParityCheck", check) == health
    assert _health("ParityCheck", {"metadata": {"generation": 1}}) == "Progressing"
