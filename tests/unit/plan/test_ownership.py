"""An object counts as the operator's only when its controller is exactly the owner expected."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.plan.ownership import Controller, not_controlled_by

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
