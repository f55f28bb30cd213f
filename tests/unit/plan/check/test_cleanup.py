"""The runner's objects in the runner namespace: whose they are (labels trusted there only),
and which outlived their check and are deleted (no owner reference can do it)."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.plan.check.cleanup import stale_runner_objects
from infergate.plan.check.observed import (
    CheckChild,
    child_key,
    observe_child,
    observe_parity_check,
)
from infergate.plan.metadata import OwnerKey
from infergate.render.check_names import child_labels, runner_account_name, runner_labels

RUNNERS = "infergate-system"
NAME = "qwen-bbbbbbbbbb"


def _check(uid: str) -> Any:
    return observe_parity_check(
        {"metadata": {"name": NAME, "namespace": "llm", "uid": uid}, "spec": {}}
    )


def _runner_body(kind: str, uid: str, namespace: str = RUNNERS) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {
            "name": runner_account_name(uid),
            "namespace": namespace,
            "uid": f"{kind}-{uid}",
            "labels": runner_labels("llm", NAME, uid),
        },
    }


def _runner_object(kind: str, uid: str) -> CheckChild:
    return observe_child(_runner_body(kind, uid), RUNNERS)


def test_runner_objects_are_keyed_and_owned_by_the_check_their_labels_name() -> None:
    body = _runner_body("Job", "u1")
    assert child_key(body, RUNNERS) == OwnerKey("llm", NAME)
    job = observe_child(body, RUNNERS)
    assert (job.namespace, job.owner_uid) == (RUNNERS, "u1")


def test_labels_naming_another_namespace_are_not_trusted_outside_the_runner_namespace() -> None:
    """A tenant of team-a labelling its own objects with team-b's check gets them indexed
    under its own namespace, never as team-b's, and owned by no check."""
    forged = _runner_body("Job", "u1", namespace="team-a")
    forged["metadata"]["labels"]["infergate.io/paritycheck-namespace"] = "team-b"
    assert child_key(forged, RUNNERS) == OwnerKey("team-a", NAME)
    assert observe_child(forged, RUNNERS).owner_uid is None


def test_a_child_of_the_checks_namespace_is_keyed_as_before() -> None:
    body = {
        "kind": "ConfigMap",
        "metadata": {"namespace": "llm", "labels": child_labels(NAME, "report")},
    }
    assert child_key(body, RUNNERS) == OwnerKey("llm", NAME)
    unlabelled = {
        "kind": "Job",
        "metadata": {"namespace": RUNNERS, "labels": child_labels(NAME, "runner")},
    }
    assert child_key(unlabelled, RUNNERS) is None  # no check namespace: no check's


@pytest.mark.parametrize("kind", ["Job", "ServiceAccount", "NetworkPolicy"])
def test_the_runner_objects_of_a_deleted_check_are_stale(kind: str) -> None:
    left = _runner_object(kind, "u1")
    assert stale_runner_objects(None, [left], runner_namespace=RUNNERS, listed=True) == [left]


def test_the_objects_of_a_check_made_again_under_its_name_are_stale_the_new_ones_are_not() -> None:
    old = [_runner_object(k, "u1") for k in ("Job", "ServiceAccount", "NetworkPolicy")]
    new = [_runner_object(k, "u2") for k in ("Job", "ServiceAccount", "NetworkPolicy")]
    stale = stale_runner_objects(_check("u2"), [*old, *new], runner_namespace=RUNNERS, listed=True)
    assert stale == old


def test_a_living_checks_runner_objects_stay() -> None:
    mine = [_runner_object(k, "u1") for k in ("Job", "ServiceAccount", "NetworkPolicy")]
    assert stale_runner_objects(_check("u1"), mine, runner_namespace=RUNNERS, listed=True) == []


def test_nothing_is_stale_before_every_watch_listed_its_objects() -> None:
    """At start-up the index of checks may still be filling: a check not yet seen is not a
    deleted one, and its running runner must not be removed."""
    left = _runner_object("Job", "u1")
    assert stale_runner_objects(None, [left], runner_namespace=RUNNERS, listed=False) == []


def test_only_runner_objects_of_the_runner_namespace_are_ever_stale() -> None:
    """The check's own children (owned, garbage-collected with it) and the runner's pods
    (which go with their Job) are never deleted here, nor anything in a tenant's
    namespace."""
    report = observe_child(
        {
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{NAME}-report",
                "namespace": "llm",
                "uid": "r",
                "labels": child_labels(NAME, "report"),
                "ownerReferences": [{"kind": "ParityCheck", "uid": "u1", "controller": True}],
            },
        },
        RUNNERS,
    )
    tenant_job = observe_child(_runner_body("Job", "u1", namespace="llm"), RUNNERS)
    pod = observe_child(_runner_body("Pod", "u1"), RUNNERS)
    children = [report, tenant_job, pod]
    assert stale_runner_objects(None, children, runner_namespace=RUNNERS, listed=True) == []
