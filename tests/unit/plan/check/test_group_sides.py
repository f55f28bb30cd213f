"""A check whose side is a multi-node group (a LeaderWorkerSet): its probe copies the
leader's template and gives fingerprints only; a check that asks for hidden states ends
Inconclusive saying why, before any runner or probe starts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from infergate.plan.check.lifecycle import decide
from infergate.plan.check.sides import SideView, group_hidden_states, probe_source

from .test_lifecycle import READY_SIDES, check, kinds, state

LEADER = {"metadata": {"labels": {"role": "leader"}},
          "spec": {"containers": [{"name": "engine", "args": ["ray", "head"]}]}}  # fmt: skip
WORKER = {"metadata": {"labels": {"role": "worker"}},
          "spec": {"containers": [{"name": "engine", "args": ["ray", "worker"]}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "spec", "template"),
    [
        pytest.param("Deployment", {"template": WORKER}, WORKER, id="deployment: its template"),
        pytest.param(
            "LeaderWorkerSet",
            {
                "leaderWorkerTemplate": {
                    "size": 2,
                    "leaderTemplate": LEADER,
                    "workerTemplate": WORKER,
                }
            },
            LEADER,
            id="group: the leader's template",
        ),
        pytest.param(
            "LeaderWorkerSet",
            {"leaderWorkerTemplate": {"size": 2, "workerTemplate": WORKER}},
            WORKER,
            id="group without a leader template: the worker's, as the LWS controller does",
        ),
    ],
)
def test_a_probe_copies_the_template_the_revisions_serving_pod_runs(
    kind: str, spec: dict[str, Any], template: dict[str, Any]
) -> None:
    source = probe_source("qwen-aaaaaaaaaa", kind, spec)
    assert source["metadata"]["name"] == "qwen-aaaaaaaaaa"
    assert source["spec"]["template"] == template


GROUP_SIDES = {
    **READY_SIDES,
    "baseline": replace(
        READY_SIDES["baseline"],
        group=True,
        probe_template=probe_source(
            "qwen-aaaaaaaaaa",
            "LeaderWorkerSet",
            {
                "leaderWorkerTemplate": {
                    "size": 2,
                    "leaderTemplate": LEADER,
                    "workerTemplate": WORKER,
                }
            },
        ),
    ),
}


@pytest.mark.parametrize(
    ("sides", "hidden", "unprobed"),
    [
        pytest.param(GROUP_SIDES, True, True, id="group side, hidden states asked: refused"),
        pytest.param(GROUP_SIDES, False, False, id="group side, tokens only: fine"),
        pytest.param(READY_SIDES, True, False, id="one-node sides: probed as ever"),
        pytest.param(
            {**GROUP_SIDES, "baseline": replace(GROUP_SIDES["baseline"], needs_probe=False)},
            True,
            False,
            id="group side whose engine serves hidden states itself",
        ),
    ],
)
def test_hidden_states_of_a_group_are_not_probed(
    sides: dict[str, SideView], hidden: bool, unprobed: bool
) -> None:
    why = group_hidden_states(sides, hidden)  # type: ignore[arg-type]
    assert (why is not None) is unprobed
    if why is not None:
        assert "baseline (revision aaaaaaaaaa)" in why
        assert "hiddenStates.enabled: false" in why


def test_a_check_asking_for_a_groups_hidden_states_is_inconclusive_before_it_starts() -> None:
    plan = decide(state(check(), sides=GROUP_SIDES))
    assert plan.create == []
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Inconclusive"
    verdict = plan.terminal["verdict"]
    assert (verdict["passed"], verdict["outcome"]) == (False, "Inconclusive")
    assert "multi-node group" in verdict["summary"]
    assert [reason for _, reason, _ in plan.events] == ["HiddenStatesUnavailable"]


def test_a_groups_probe_without_hidden_states_serves_fingerprints_from_the_leaders_volumes() -> (
    None
):
    plan = decide(state(check(hiddenStates={"enabled": False}), sides=GROUP_SIDES))
    assert plan.terminal is None
    assert kinds(plan.create) == ["Service", "Pod"]
    pod = plan.create[1]
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert "engine" not in names  # no engine: one pod of a group cannot start it alone
    assert pod["metadata"]["annotations"]["infergate.io/probe-of"] == "qwen-aaaaaaaaaa"
