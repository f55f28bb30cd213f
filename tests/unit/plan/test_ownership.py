"""An object counts as the operator's only when its controller is exactly the owner expected."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.plan.ownership import (
    Controller,
    not_controlled_by,
    pod_not_made_by,
    replica_set_of,
    revision_deployment,
)

WEB = Controller("InferenceDeployment", "web", "uid-web")


def _config_map(*refs: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web-0123456789", "namespace": "llm"}
    if refs:
        metadata["ownerReferences"] = list(refs)
    return {"kind": "ConfigMap", "metadata": metadata}


def _ref(
    kind: str = "InferenceDeployment", name: str = "web", uid: str = "uid-web", **more: Any
) -> dict[str, Any]:
    return {"apiVersion": "infergate.io/v1alpha1", "kind": kind, "name": name, "uid": uid, **more}


@pytest.mark.parametrize(
    ("obj", "found"),
    [
        (_config_map(), "it has no controller"),
        (_config_map(_ref()), "it has no controller"),  # owner, not controller
        (_config_map(_ref(controller=False)), "it has no controller"),
        (
            _config_map(_ref(kind="Deployment", name="tenant", uid="u9", controller=True)),
            "its controller is Deployment tenant (uid u9)",
        ),
        (
            _config_map(_ref(name="other", uid="u2", controller=True)),
            "its controller is InferenceDeployment other (uid u2)",
        ),
        (
            _config_map(_ref(kind="ParityCheck", uid="uid-web", controller=True)),
            "its controller is ParityCheck web (uid uid-web)",
        ),
        (
            _config_map(_ref(uid="uid-old", controller=True)),
            "its controller is InferenceDeployment web (uid uid-old), another object of that name",
        ),
        (
            # The uid alone is not enough: kind and name must say the same owner.
            _config_map(_ref(name="web2", controller=True)),
            "its controller is InferenceDeployment web2 (uid uid-web)",
        ),
    ],
)
def test_anything_but_the_expected_controller_is_refused_and_said(
    obj: dict[str, Any], found: str
) -> None:
    message = not_controlled_by(obj, WEB)
    assert message is not None
    assert message.startswith(
        "ConfigMap llm/web-0123456789 is not controlled by InferenceDeployment web (uid uid-web)"
    )
    assert message.endswith(found)


@pytest.mark.parametrize(
    "refs",
    [
        [_ref(controller=True)],
        # Other, non-controlling owners do not matter.
        [_ref(kind="Tenant", name="x", uid="u1"), _ref(controller=True, blockOwnerDeletion=True)],
    ],
)
def test_the_expected_controller_is_accepted(refs: list[dict[str, Any]]) -> None:
    assert not_controlled_by(_config_map(*refs), WEB) is None


def test_a_list_item_is_named_by_the_kind_given() -> None:
    item = {"metadata": {"name": "web-abc", "namespace": "llm"}}
    message = not_controlled_by(item, Controller("Service", "web", "u"), kind="EndpointSlice")
    assert message is not None
    assert message.startswith("EndpointSlice llm/web-abc is not controlled by Service web (uid u)")


# -- a revision's pod: made by its recorded Deployment, through one of its ReplicaSets ----

DEPLOYMENT = revision_deployment("web", "0123456789", "uid-deploy")
_HASH = {"pod-template-hash": "7f9c"}
_SELECTOR = {"infergate.io/revision": "0123456789"}


def _replica_set(**meta: Any) -> dict[str, Any]:
    base = {
        "name": "web-0123456789-7f9c",
        "namespace": "llm",
        "uid": "uid-rs",
        "labels": {**_SELECTOR, **_HASH},
        "ownerReferences": [
            _ref("Deployment", "web-0123456789", "uid-deploy", controller=True),
        ],
    }
    return {"metadata": {**base, **meta}, "spec": {"selector": {"matchLabels": _SELECTOR}}}


def _pod(*refs: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-0123456789-7f9c-abcde",
            "namespace": "llm",
            "labels": {**_SELECTOR, **_HASH} if labels is None else labels,
            "ownerReferences": list(refs),
        }
    }


_RS_REF = _ref("ReplicaSet", "web-0123456789-7f9c", "uid-rs", controller=True)


def test_a_pod_its_deployments_replicaset_made_is_accepted() -> None:
    assert replica_set_of(_pod(_RS_REF)) == "web-0123456789-7f9c"
    assert pod_not_made_by(_pod(_RS_REF), _replica_set(), DEPLOYMENT) is None


@pytest.mark.parametrize(
    ("pod", "replica_set", "said"),
    [
        # Labels alone: no controller.
        (_pod(), _replica_set(), "it has no controller"),
        # A copied reference naming the ReplicaSet but another uid (an earlier one).
        (
            _pod({**_RS_REF, "uid": "uid-rs-old"}),
            _replica_set(),
            "(uid uid-rs-old), another object of that name",
        ),
        # The real ReplicaSet's reference copied, but not the labels it stamps.
        (
            _pod(_RS_REF, labels=_SELECTOR),
            _replica_set(),
            "does not carry its labels (pod-template-hash)",
        ),
        (
            _pod(_RS_REF, labels={**_HASH}),
            _replica_set(),
            "does not carry its labels (infergate.io/revision)",
        ),
        # A ReplicaSet that claims the revision's Deployment by name, with another uid.
        (
            _pod(_RS_REF),
            _replica_set(
                ownerReferences=[_ref("Deployment", "web-0123456789", "uid-x", controller=True)]
            ),
            "ReplicaSet llm/web-0123456789-7f9c is not controlled by Deployment web-0123456789",
        ),
        # A ReplicaSet claiming the InferenceDeployment itself (its uid copied).
        (
            _pod(_RS_REF),
            _replica_set(ownerReferences=[_ref(controller=True)]),
            "its controller is InferenceDeployment web (uid uid-web)",
        ),
        # A ReplicaSet without a template hash makes no pod of the Deployment.
        (_pod(_RS_REF), _replica_set(labels=_SELECTOR), "pod-template-hash"),
    ],
)
def test_a_pod_outside_the_recorded_chain_is_refused(
    pod: dict[str, Any], replica_set: dict[str, Any], said: str
) -> None:
    message = pod_not_made_by(pod, replica_set, DEPLOYMENT)
    assert message is not None
    assert "Pod llm/web-0123456789-7f9c-abcde" in message
    assert said in message


def test_a_pod_not_made_by_a_replicaset_names_none() -> None:
    assert replica_set_of(_pod()) is None
    assert replica_set_of(_pod(_ref(controller=True))) is None
