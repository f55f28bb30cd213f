"""The runner's result -> ParityCheck status mapping: phases, reasons, metrics, conditions,
and the binding of a verdict to the spec and revisions it judged."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from infergate.api.check_status import ParityCheckStatus
from infergate.api.common import ConfigMapKeyReference
from infergate.api.enums import ConditionStatus
from infergate.parity.compare import compare_sources
from infergate.parity.metrics import ParityResult
from infergate.parity.profiles import PROFILES, resolve_thresholds, resolve_warnings
from infergate.parity.record import ParityRecord, PromptRecord
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import Verdict, decide
from infergate.plan import reasons
from infergate.plan.check import status as st
from infergate.plan.conditions import ConditionUpdate
from infergate.runner.summary import headline_metrics, judgement
from tests.unit.parity.builders import (
    candidate_of,
    replace,
    scored_record,
    scored_suite,
)

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
REPORT = ConfigMapKeyReference(name="qwen-abc-report", key="report.html")
BINDING = st.Binding(
    spec_digest=st.spec_digest({"suite": {"inline": []}}),
    generation=3,
    baseline_revision="aaaaaaaaaa",
    candidate_revision="bbbbbbbbbb",
)


_SUITE: list[PromptRecord] = []


def suite(n: int | None = None) -> list[PromptRecord]:
    """A suite that meets the profile's minimum evidence (32 short and 4 long prompts)."""
    if not _SUITE:
        _SUITE.extend(scored_suite())
    return list(_SUITE if n is None else _SUITE[:n])


def record(prompts: list[PromptRecord], **meta: Any) -> ParityRecord:
    return scored_record(prompts, **meta)


def judged(baseline: ParityRecord, candidate: ParityRecord) -> tuple[ParityResult, Verdict]:
    profile = ProfileName.DTYPE_CHANGE
    result = compare_sources(
        baseline,
        candidate,
        resolve_thresholds(profile),
        PROFILES[profile].allowed_config_differences,
    )
    return result, decide(result, resolve_warnings(profile))


def forced(prompts: list[PromptRecord]) -> list[PromptRecord]:
    return [candidate_of(p) for p in prompts]


def status_of(
    result: ParityResult, verdict: Verdict, conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    fields = st.verdict_status(
        judgement(result, verdict, "dtype-change"),
        BINDING,
        status={"conditions": conditions or []},
        report=REPORT,
        at=T0,
    )
    # Every field must survive the CRD schema: the models are the schema's source.
    ParityCheckStatus.model_validate(fields)
    return fields


def conditions_by_type(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in fields["conditions"]}


def test_identical_sides_pass_with_their_metrics_and_report() -> None:
    prompts = suite()
    result, verdict = judged(record(prompts), record(forced(prompts)))
    fields = status_of(result, verdict)
    assert fields["phase"] == "Passed"
    assert fields["verdict"]["passed"] is True
    assert fields["verdict"]["outcome"] == "Passed"
    assert fields["verdict"].get("reasons", []) == []
    assert fields["metrics"]["tokenMatchRate"] == 1.0
    assert fields["metrics"]["meanKl"] == 0.0
    assert math.isclose(fields["metrics"]["hiddenCosineP1"], 1.0, abs_tol=1e-6)
    assert fields["reportRef"] == {"name": "qwen-abc-report", "key": "report.html"}
    assert fields["completionTime"] == "2026-12-02T12:00:00Z"
    # The verdict names what it judged, so the operator can tell it from any other.
    assert fields["verdict"]["specDigest"] == BINDING.spec_digest
    assert fields["verdict"]["generation"] == 3
    assert (fields["baselineRevision"], fields["candidateRevision"]) == ("aaaaaaaaaa", "bbbbbbbbbb")
    conds = conditions_by_type(fields)
    assert conds["Complete"]["status"] == "True"
    assert conds["Passed"]["status"] == "True"
    assert conds["Failed"]["status"] == "False"
    assert conds["Error"]["status"] == "False"
    assert conds["Complete"]["observedGeneration"] == 3


def test_hidden_state_drift_fails_naming_metric_value_limit_and_prompts() -> None:
    prompts = suite()
    rng = np.random.default_rng(7)
    drifted = []
    for p in forced(prompts):
        assert p.hidden_states is not None
        noise = rng.standard_normal(p.hidden_states.shape).astype(np.float32)
        drifted.append(replace(p, hidden_states=p.hidden_states + noise))
    result, verdict = judged(record(prompts), record(drifted))
    fields = status_of(result, verdict)
    assert fields["phase"] == "Failed"
    assert fields["verdict"]["passed"] is False
    reasons = {r["metric"]: r for r in fields["verdict"]["reasons"]}
    cosine = reasons["minHiddenCosineP1"]
    assert cosine["comparison"] == ">="
    assert cosine["threshold"] == 0.9995
    assert cosine["value"] < 0.9995
    assert cosine["prompts"]
    assert set(cosine["prompts"]) <= {p.prompt_id for p in prompts}
    assert "hidden cosine P1" in cosine["message"]
    assert conditions_by_type(fields)["Failed"]["status"] == "True"
    assert "minHiddenCosineP1" in conditions_by_type(fields)["Complete"]["message"]


def test_differing_norm_epsilon_is_a_hygiene_failure_a_person_can_read() -> None:
    prompts = suite()
    base = record(prompts, effective_config={"dtype": "bfloat16", "rms_norm_eps": 1e-6})
    cand = record(
        forced(prompts), dtype="float16", effective_config={"dtype": "float16", "rms_norm_eps": 0.1}
    )
    result, verdict = judged(base, cand)
    fields = status_of(result, verdict)
    assert fields["phase"] == "Failed"
    [hygiene] = [r for r in fields["verdict"]["reasons"] if r["metric"] == "hygiene.ConfigDiffers"]
    assert "rms_norm_eps: 1e-06 -> 0.1" in hygiene["message"]
    # The dtype change itself is what the profile allows.
    assert "dtype" not in hygiene["message"].split("rms_norm_eps")[0]


def test_a_prompt_missing_from_one_side_is_error_never_passed() -> None:
    prompts = suite(3)
    result, verdict = judged(record(prompts), record(forced(prompts[:2])))  # p2 missing
    fields = status_of(result, verdict)
    assert fields["phase"] == "Error"
    assert fields["verdict"]["passed"] is False
    assert fields["verdict"]["outcome"] == "Error"
    [reason] = fields["verdict"]["reasons"]
    assert reason["metric"] == "measurement"
    assert "'p2' is missing from the candidate record" in reason["message"]
    assert conditions_by_type(fields)["Error"]["status"] == "True"


def test_a_threshold_that_cannot_be_measured_is_error() -> None:
    prompts = [replace(p, hidden_states=None) for p in suite(3)]
    result, verdict = judged(record(prompts), record(forced(prompts)))
    fields = status_of(result, verdict)
    assert fields["phase"] == "Error"
    metrics = {r["metric"] for r in fields["verdict"]["reasons"]}
    assert "minHiddenCosineP1" in metrics
    assert all("was not measured" in r["message"] for r in fields["verdict"]["reasons"])


def test_error_status_is_never_passed_and_names_the_reason() -> None:
    fields = st.error_status(
        "candidate (http://127.64.0.7:8000) completion of 'p3': ConnectError: refused",
        reasons.CHECK_SIDE_UNREACHABLE, status={}, generation=1, at=T0,
    )  # fmt: skip
    ParityCheckStatus.model_validate(fields)
    assert fields["phase"] == "Error"
    assert fields["verdict"]["passed"] is False
    assert "ConnectError" in fields["verdict"]["reasons"][0]["message"]
    conds = conditions_by_type(fields)
    assert conds["Error"]["reason"] == "SideUnreachable"
    assert conds["Passed"]["status"] == "False"


def test_non_finite_metrics_are_left_out_of_status() -> None:
    prompts = suite(2)
    result, _ = judged(record(prompts), record(forced(prompts)))
    hidden = result.metrics.hidden
    assert hidden is not None
    broken = result.metrics.model_copy(
        update={"hidden": hidden.model_copy(update={"max_abs_err": float("nan")})}
    )
    metrics = headline_metrics(broken)
    assert "hiddenMaxAbsErr" not in metrics
    assert all(math.isfinite(v) for v in metrics.values())


def test_transition_time_moves_only_when_status_flips() -> None:
    def setting(status: str, reason: str, message: str) -> ConditionUpdate:
        return ConditionUpdate("Error", ConditionStatus(status), reason, message)

    first = st.check_conditions({}, [setting("False", "Running", "a")], generation=1, at=T0)
    later = T0 + timedelta(minutes=5)
    same = st.check_conditions(
        {"conditions": first}, [setting("False", "Running", "b")], generation=1, at=later
    )
    flipped = st.check_conditions(
        {"conditions": same}, [setting("True", "Boom", "c")], generation=1, at=later
    )
    assert same[0]["lastTransitionTime"] == "2026-12-02T12:00:00Z"
    assert same[0]["message"] == "b"
    assert flipped[0]["lastTransitionTime"] == "2026-12-02T12:05:00Z"


def test_a_runner_error_is_marked_recovered_when_a_later_attempt_passes() -> None:
    prompts = suite()
    result, verdict = judged(record(prompts), record(forced(prompts)))
    failed_once = st.runner_error_conditions({}, "SideUnreachable", "refused", generation=1, at=T0)
    fields = status_of(result, verdict, failed_once)
    runner = conditions_by_type(fields)["RunnerError"]
    assert runner["status"] == "False"
    assert runner["reason"] == "Recovered"


def test_not_enough_evidence_is_inconclusive_never_passed() -> None:
    prompts = suite(6)
    result, verdict = judged(record(prompts), record(forced(prompts)))
    fields = status_of(result, verdict)
    assert fields["verdict"]["passed"] is False
    assert fields["verdict"]["outcome"] == "Inconclusive"
    assert fields["phase"] == "Inconclusive"
    assert "6 of 32 prompts needed" in fields["verdict"]["reasons"][0]["message"]
