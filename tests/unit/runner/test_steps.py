"""The runner's steps one at a time, on a state built by hand and an in-memory API.

Each step reads what earlier steps filled in and fills in its own part; these tests
give a step exactly that and check what it decided, with no engine or mode around it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from infergate.api.parity_check import ParityCheckSpec
from infergate.errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from infergate.parity import profiles
from infergate.parity.compare import ParityComparison
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import VerdictStatus
from infergate.render.check_names import SideName
from infergate.runner.context import (
    CheckEndedError,
    Connector,
    RetryableRunError,
    RunContext,
    RunOptions,
)
from infergate.runner.modes import GOLDEN_BASELINE, SUITE_CHECK, steps_for
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState
from infergate.runner.status_writer import api_failure
from infergate.runner.steps.gate import SETTLED_PROMPTS, plan_gate, plan_limits
from infergate.runner.steps.golden import start_recording, use_golden_baseline
from infergate.runner.steps.judge import judge
from infergate.runner.steps.load import measure_load
from infergate.runner.steps.resolve import resolve_sides
from infergate.runner.steps.start import load_suite
from infergate.runner.steps.write import write
from tests.unit.parity.builders import meta, suite
from tests.unit.runner.fakes import FakeApi, ToyConnector, ToyEngine, controller_ref

STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"
BASE_IP, CAND_IP = "127.64.0.10", "127.64.0.11"
FAST = RunOptions(concurrency=2, wait_for_sides=0.2, progress_interval=0.0)
AT = datetime(2025, 1, 1, tzinfo=UTC)


def spec_fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": STABLE},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": CANARY},
        "suite": {"inline": [{"id": f"p{i}", "tokenIds": [i + 1, i + 2]} for i in range(32)]},
        "sampling": {"maxTokens": 16, "topLogprobs": 5},
        "profile": "dtype-change",
    }
    fields.update(overrides)
    return fields


def run_on(api: FakeApi, connector: Connector | None = None) -> RunContext:
    return RunContext(api, "check", FAST, connector or Connector(), lambda: AT)


def side(name: SideName, revision: str, **fields: Any) -> SideTarget:
    return SideTarget(
        side=name,
        url=f"http://{name}",
        model="tiny-qwen",
        engine="vllm",
        engine_version="0.32.0",
        dtype="bfloat16",
        description=f"{name} revision {revision}",
        revision=revision,
        deployment="qwen",
        **fields,
    )


def test_resolve_refuses_a_side_whose_configmap_someone_else_made() -> None:
    """Given the check as read, the resolve step alone ends the check: the candidate's
    ConfigMap is the tenant's, so its pinned config is never read."""
    api = FakeApi()
    api.add_deployment("qwen", {"stableRevision": STABLE})
    api.add_revision("qwen", STABLE, engine="mindformers", dtype="float16", ip=BASE_IP)
    api.add_revision("qwen", CANARY, engine="mindformers", dtype="float16", ip=CAND_IP)
    api.add_check("check", spec_fields())
    api.config_maps[f"qwen-{CANARY}"]["metadata"]["ownerReferences"] = [
        controller_ref("Deployment", "tenant-app")
    ]
    engines = ToyConnector(
        {f"http://{BASE_IP}:8000": ToyEngine(), f"http://{CAND_IP}:8000": ToyEngine()}
    )
    state = RunState(
        check=api.get_check("check"), spec=ParityCheckSpec.model_validate(spec_fields())
    )
    with pytest.raises(CheckEndedError) as ended:
        resolve_sides(run_on(api, engines.connector()), state)
    assert ended.value.reason == "SideObjectNotOurs"
    assert f"ConfigMap llm/qwen-{CANARY} is not controlled by InferenceDeployment qwen" in str(
        ended.value
    )
    assert state.sides is None


def test_the_gate_settles_the_suite_when_the_fingerprints_already_fail() -> None:
    """Sides whose weights differ fail before any prompt: the gate step keeps a few
    prompts, for the report's figures, and says why (once its limits are set)."""
    spec = ParityCheckSpec.model_validate(spec_fields())
    state = RunState(
        spec=spec,
        sides=(
            side("baseline", STABLE, fingerprints={"weights.digest": "w-1"}),
            side("candidate", CANARY, fingerprints={"weights.digest": "w-2"}),
        ),
    )
    load_suite(run_on(FakeApi()), state)
    plan_gate(run_on(FakeApi()), state)
    plan_limits(run_on(FakeApi()), state)
    assert state.gate is not None
    assert state.gate.profile is ProfileName.DTYPE_CHANGE
    assert state.suite is not None
    assert len(state.suite.prompts) == SETTLED_PROMPTS
    assert state.stopped_early is not None
    assert f"{SETTLED_PROMPTS} of 32 prompts measured" in state.stopped_early
    assert state.metas is not None
    assert state.metas[1].fingerprints["weights.digest"] == "w-2"


def _gated(records: int) -> RunState:
    """A state as the drive leaves it: `records` identical prompt pairs compared."""
    base, cand = meta(), meta(config_hash="rev-b")
    gate = profiles.plan_gate(base, cand, profile=ProfileName.DTYPE_CHANGE, hidden_states=False)
    comparison = ParityComparison(
        base, cand, gate.thresholds, gate.expected_differences, disabled=gate.disabled
    )
    for record in suite(records, hidden=None):
        comparison.add(record, record)
    return RunState(
        spec=ParityCheckSpec.model_validate(spec_fields()),
        gate=gate,
        comparison=comparison,
        stopped_early="measured a few prompts only",
        started=time.monotonic(),
    )


@pytest.mark.parametrize(
    ("records", "expected"),
    [(0, VerdictStatus.ERROR), (6, VerdictStatus.INCONCLUSIVE)],
)
def test_the_judge_step_decides_on_a_fixed_comparison(
    records: int, expected: VerdictStatus
) -> None:
    """No prompt measured is an Error (nothing was measured), six agreeing prompts are
    Inconclusive (below the profile's evidence floor); neither passes. The result carries
    the note of how it was measured, ahead of its own."""
    state = _gated(records)
    judge(run_on(FakeApi()), state)
    assert state.verdict is not None
    assert state.verdict.status is expected
    assert state.result is not None
    assert state.result.notes[0] == "measured a few prompts only"
    assert state.result.metrics.prompts == records


def test_the_write_step_ends_the_check_with_the_judged_verdict() -> None:
    """Given a judged state, the write step stores the report under the check and writes
    the verdict with the run's progress, once."""
    api = FakeApi()
    api.add_check("check", spec_fields())
    state = _gated(6)
    state.check = api.get_check("check")
    load_suite(run_on(api), state)
    state.sides = (side("baseline", STABLE), side("candidate", CANARY))
    judge(run_on(api), state)
    write(run_on(api), state)
    status = api.checks["check"]["status"]
    assert status["phase"] == "Inconclusive"
    assert status["progress"] == {"done": 6, "total": 32}
    assert state.report is not None
    assert state.report.name == "check-report"
    assert "check-report" in api.config_maps


def test_a_step_run_before_what_it_needs_names_what_is_missing() -> None:
    with pytest.raises(RuntimeError, match="the sides is not known yet"):
        start_recording(run_on(FakeApi()), RunState())


def test_modes_are_their_steps_in_order() -> None:
    """A golden baseline opens its record after the candidate and records nothing; load
    levels run after the suite is judged and before anything is written."""
    plain = steps_for(ParityCheckSpec.model_validate(spec_fields()))
    assert plain[: len(SUITE_CHECK)] == SUITE_CHECK
    assert plain[-1] is write
    assert measure_load not in plain
    golden = steps_for(
        ParityCheckSpec.model_validate(spec_fields(baseline={"golden": {"revision": STABLE}}))
    )
    assert golden[: len(GOLDEN_BASELINE)] == GOLDEN_BASELINE
    assert use_golden_baseline in golden
    assert start_recording not in golden
    loaded = steps_for(ParityCheckSpec.model_validate(spec_fields(load={"concurrency": [2]})))
    assert loaded[-2:] == (measure_load, write)


@pytest.mark.parametrize(
    ("error", "ends", "reason"),
    [
        (ConflictError("busy", status=409), False, "ApiUnavailable"),
        (ForbiddenError("no", status=403), True, "Forbidden"),
        (KubeError("who", status=401), True, "Forbidden"),
        (NotFoundError("gone", status=404), True, "NotFound"),
        (KubeError("bad", status=422), True, "ApiRefused"),
    ],
)
def test_api_errors_are_sorted_fail_closed(error: KubeError, ends: bool, reason: str) -> None:
    """What the API server may answer differently later retries; a refusal ends the check."""
    sorted_as = api_failure(error)
    assert isinstance(sorted_as, CheckEndedError if ends else RetryableRunError)
    assert sorted_as.reason == reason
