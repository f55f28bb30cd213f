"""The controller's decisions for a check, as tables: pending, probes, runner, deadline, end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from infergate.api.parity_check import ParityCheck
from infergate.runner.lifecycle import (
    COND_RELEASED,
    CheckActions,
    CheckObservation,
    SideState,
    decide,
)

CREATED = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
TEMPLATE = {"metadata": {"name": "qwen-aaaaaaaaaa"}, "spec": {"template": {"spec": {}}}}


def check(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {
            "name": "qwen-bbbbbbbbbb",
            "namespace": "llm",
            "uid": "u1",
            "generation": 1,
            "creationTimestamp": "2026-12-02T12:00:00Z",
        },
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
            "suite": {"inline": [{"id": "p", "text": "hello"}]},
            "deadlineSeconds": 600,
            "runner": {"activeDeadlineSeconds": 300},
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def observe(body: dict[str, Any], *, minutes: float = 1, **fields: Any) -> CheckObservation:
    return CheckObservation(
        check=body,
        spec=ParityCheck.model_validate(body).spec,
        invalid=None,
        now=CREATED + timedelta(minutes=minutes),
        **fields,
    )


READY_SIDES = {
    "baseline": SideState(revision="aaaaaaaaaa", needs_probe=True, probe_template=TEMPLATE),
    "candidate": SideState(revision="bbbbbbbbbb"),
}


def pod(
    name: str, *, ready: bool = False, restarts: int = 0, phase: str = "Running"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "engine",
                    "restartCount": restarts,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
                    if restarts
                    else {},
                }
            ],
        },
    }


def job(condition: str | None = None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = (
        [{"type": condition, "status": "True", "reason": reason, "message": message}]
        if condition
        else []
    )
    return {"metadata": {"name": "qwen-bbbbbbbbbb-runner"}, "status": {"conditions": conditions}}


def by_type(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in fields["conditions"]}


def test_a_side_not_ready_keeps_the_check_pending_saying_why_and_pins_revisions() -> None:
    sides = {
        "baseline": SideState(revision="aaaaaaaaaa"),
        "candidate": SideState(
            revision="bbbbbbbbbb", waiting="Service qwen-bbbbbbbbbb has no ready endpoint"
        ),
    }
    actions = decide(observe(check(), sides=sides))
    assert actions.status is not None
    assert actions.status["phase"] == "Pending"
    assert actions.status["baselineRevision"] == "aaaaaaaaaa"
    assert (
        "candidate: Service qwen-bbbbbbbbbb has no ready endpoint"
        in by_type(actions.status)["Complete"]["message"]
    )
    assert not actions.start_runner
    assert actions.terminal is None


def test_unchanged_pending_status_is_not_written_again() -> None:
    sides = {"baseline": SideState(waiting="x"), "candidate": SideState()}
    first = decide(observe(check(), sides=sides))
    assert first.status is not None
    again = decide(observe(check(status=first.status), minutes=2, sides=sides))
    assert again.status is None


def test_a_vllm_side_gets_a_probe_and_the_runner_waits_for_it() -> None:
    actions = decide(observe(check(), sides=READY_SIDES))
    assert actions.create_probes == ["baseline"]
    assert not actions.start_runner
    waiting = decide(observe(check(), sides=READY_SIDES, probe_pods={"baseline": pod("p")}))
    assert waiting.create_probes == []
    assert not waiting.start_runner
    assert waiting.status is not None
    assert "baseline probe p not ready yet" in by_type(waiting.status)["Complete"]["message"]


def test_the_runner_starts_once_every_probe_is_ready() -> None:
    actions = decide(
        observe(check(), sides=READY_SIDES, probe_pods={"baseline": pod("p", ready=True)})
    )
    assert actions.start_runner
    assert actions.terminal is None


def test_a_crash_looping_probe_ends_the_check_in_error() -> None:
    actions = decide(
        observe(check(), sides=READY_SIDES, probe_pods={"baseline": pod("p", restarts=3)})
    )
    assert actions.terminal is not None
    assert actions.terminal["phase"] == "Error"
    assert (
        "probe pod p restarted 3 times (last exit code 1, Error)"
        in actions.terminal["verdict"]["reasons"][0]["message"]
    )
    assert actions.release


def test_a_failed_runner_job_is_error_with_the_runner_reason() -> None:
    failed_attempt = {
        "type": "RunnerError",
        "status": "True",
        "reason": "SideUnreachable",
        "message": "candidate (http://127.64.0.3:8000) completion of 'p': ConnectError: refused",
        "lastTransitionTime": "2026-12-02T12:01:00Z",
    }
    body = check(status={"phase": "Running", "conditions": [failed_attempt]})
    runner_pod = {
        "metadata": {"name": "r-1"},
        "status": {
            "containerStatuses": [{"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]
        },
    }
    actions = decide(
        observe(
            body,
            job=job(
                "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            ),
            runner_pods=[runner_pod],
        )
    )
    assert actions.terminal is not None
    assert actions.terminal["phase"] == "Error"
    assert actions.terminal["verdict"]["passed"] is False
    message = actions.terminal["verdict"]["reasons"][0]["message"]
    assert "BackoffLimitExceeded" in message
    assert "ConnectError: refused" in message
    assert "r-1 exited 3" in message
    assert actions.release


def test_a_runner_killed_at_its_deadline_is_error() -> None:
    actions = decide(
        observe(
            check(status={"phase": "Running"}),
            job=job("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"),
        )
    )
    assert actions.terminal is not None
    assert "DeadlineExceeded" in actions.terminal["verdict"]["reasons"][0]["message"]


def test_a_runner_that_completes_without_a_verdict_is_error() -> None:
    actions = decide(observe(check(status={"phase": "Running"}), job=job("Complete")))
    assert actions.terminal is not None
    assert (
        "completed without writing a verdict"
        in actions.terminal["verdict"]["reasons"][0]["message"]
    )


def test_a_running_job_is_left_alone() -> None:
    assert decide(observe(check(status={"phase": "Running"}), job=job())) == CheckActions()


def test_the_check_deadline_counts_from_creation_and_waiting_included() -> None:
    body = check(status={"phase": "Running", "progress": {"done": 3, "total": 8}})
    assert decide(observe(body, minutes=9.9, job=job())).terminal is None
    actions = decide(observe(body, minutes=10, job=job()))
    assert actions.terminal is not None
    assert actions.terminal["phase"] == "Error"
    message = actions.terminal["verdict"]["reasons"][0]["message"]
    assert "no verdict within deadlineSeconds=600" in message
    assert "3/8 prompts done" in message
    assert by_type(actions.terminal)["Error"]["reason"] == "DeadlineExceeded"
    assert actions.release


def test_an_ended_check_releases_its_children_once_and_says_so() -> None:
    body = check(
        status={"phase": "Passed", "verdict": {"passed": True, "summary": "Passed under profile x"}}
    )
    actions = decide(
        CheckObservation(check=body, spec=None, invalid=None, now=CREATED, children=True)
    )
    assert actions.release
    assert actions.status is not None
    assert by_type(actions.status)[COND_RELEASED]["status"] == "True"
    assert actions.events == [("Normal", "CheckPassed", "Passed under profile x")]
    released = check(status={"phase": "Passed", "conditions": actions.status["conditions"]})
    assert (
        decide(CheckObservation(check=released, spec=None, invalid=None, now=CREATED))
        == CheckActions()
    )


def test_an_invalid_check_is_error_never_pending_forever() -> None:
    body = check()
    actions = decide(
        CheckObservation(
            check=body, spec=None, invalid="spec is invalid: suite: field required", now=CREATED
        )
    )
    assert actions.terminal is not None
    assert actions.terminal["phase"] == "Error"
    assert "suite: field required" in actions.terminal["verdict"]["reasons"][0]["message"]
