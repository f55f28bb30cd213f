"""Which watch events wake a reconcile and how soon, and how long the resync loop sleeps
after a reconcile (plan/deployment/wake.py), on plain data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infergate.plan.deployment.control import ABORT, PROMOTE, REQUESTED_BY
from infergate.plan.deployment.observed import ObservedObject
from infergate.plan.deployment.wake import (
    DEBOUNCE_SECONDS,
    Wake,
    again_in,
    child_wake,
    delay_seconds,
    deployment_mark,
    deployment_wake,
    essence,
)
from infergate.plan.leadership import election_pause

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _idep(
    *,
    uid: str = "u1",
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    version: str = "1",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "qwen",
            "namespace": "llm",
            "uid": uid,
            "generation": generation,
            "resourceVersion": version,
            "annotations": annotations or {},
            "labels": labels or {},
            "managedFields": [{"manager": "kubectl", "time": version}],
        },
        "spec": {"replicas": generation},
        "status": status or {},
    }


BEFORE = _idep()


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # What the rollout acts on: at once.
        (_idep(generation=2, version="2"), Wake.NOW),
        (_idep(uid="u2", version="2"), Wake.NOW),
        (_idep(annotations={PROMOTE: "true"}, version="2"), Wake.NOW),
        (_idep(annotations={ABORT: "", REQUESTED_BY: "alice"}, version="2"), Wake.NOW),
        # What a decision reads besides: after the debounce (often the operator's own write).
        (_idep(status={"phase": "Progressing"}, version="2"), Wake.SOON),
        (_idep(labels={"team": "search"}, version="2"), Wake.SOON),
        (_idep(annotations={"note": "x"}, version="2"), Wake.SOON),
        # Bookkeeping only: nobody.
        (_idep(version="2"), Wake.NO),
        (_idep(annotations={"kopf.infergate.io/last-handled-configuration": "{}"}, version="2"),
         Wake.NO),
    ],
    ids=[
        "spec", "recreated", "promote", "abort", "status", "labels", "other-annotation",
        "resource-version", "kopf-annotation",
    ],
)  # fmt: skip
def test_a_deployment_event_wakes_its_reconcile(after: dict[str, Any], expected: Wake) -> None:
    assert deployment_wake(deployment_mark(BEFORE), deployment_mark(after)) is expected


def test_a_deployment_seen_first_is_reconciled_at_once_and_a_deleted_one_not_at_all() -> None:
    assert deployment_wake(None, deployment_mark(BEFORE)) is Wake.NOW
    assert deployment_wake(deployment_mark(BEFORE), None) is Wake.NO


def test_the_operator_removing_a_handled_control_annotation_is_no_new_request() -> None:
    asked = deployment_mark(_idep(annotations={PROMOTE: "true", REQUESTED_BY: "alice"}))
    handled = deployment_mark(_idep(version="3", status={"phase": "Promoting"}))
    assert deployment_wake(asked, handled) is Wake.SOON


def _child(version: str, annotations: dict[str, str] | None = None) -> object:
    return essence(
        ObservedObject(
            kind="Service",
            name="qwen",
            revision=None,
            owner_uid="u1",
            resource_version=version,
            annotations=annotations or {},
            labels={},
            content={"spec": {"selector": {"app": "qwen"}}},
        )
    )


@pytest.mark.parametrize(
    ("previous", "current", "deleted", "expected"),
    [
        (None, _child("1"), False, Wake.SOON),
        (_child("1"), _child("2"), False, Wake.NO),
        (_child("1"), _child("2", {"infergate.io/role": "stable"}), False, Wake.SOON),
        (_child("1"), None, False, Wake.SOON),
        (_child("1"), None, True, Wake.SOON),
    ],
    ids=["new", "only-resource-version", "changed", "unreadable", "deleted"],
)
def test_a_child_event_wakes_its_owner(
    previous: object, current: object, deleted: bool, expected: Wake
) -> None:
    assert child_wake(previous, current, deleted=deleted) is expected


def test_wake_delays() -> None:
    assert delay_seconds(Wake.NOW) == 0.0
    assert delay_seconds(Wake.SOON) == DEBOUNCE_SECONDS
    assert delay_seconds(Wake.NO) is None


@pytest.mark.parametrize(
    ("due", "expected"),
    [
        (None, None),
        (T0 + timedelta(seconds=601), 601.0),
        (T0 + timedelta(milliseconds=250), 0.25),
        (T0, 0.0),
        (T0 - timedelta(seconds=5), 0.0),  # overdue: at once, never a negative sleep
    ],
)
def test_again_in(due: datetime | None, expected: float | None) -> None:
    assert again_in(due, T0) == expected


@pytest.mark.parametrize(
    ("leading", "renewed", "expected"),
    [(True, True, 5.0), (True, False, 2.0), (False, False, 2.0)],
    ids=["holder-renewed", "holder-renewal-failed", "candidate"],
)
def test_election_pause(leading: bool, renewed: bool, expected: float) -> None:
    pause = election_pause(leading=leading, renewed=renewed, renew_seconds=5.0, retry_seconds=2.0)
    assert pause == expected
