"""The ClusterRoles are exactly what the operator's code uses.

What the code needs is derived from it (tests/unit/packaging/rbac_usage.py): the
KubeClient calls in `infergate.kube`, kopf's handlers, owner references and the
runner Role the operator grants. The InferenceDeployment controller must run under
manifests/operator's role alone (the integration tests run it so); with the
ParityCheck controller, manifests/runner's role comes on top. Every rule must be
needed: without it, something the code does is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.packaging.kustomize import MANIFESTS, build, kubectl_binary
from tests.unit.packaging.rbac_usage import (
    ApiUse,
    Permission,
    grants,
    iter_rule_permissions,
    operator_usage,
    rule_label,
)

if not kubectl_binary().exists():
    pytest.fail("no kubectl to build the manifests (make setup builds it)", pytrace=False)

FULL = operator_usage()
IDEP_ONLY = operator_usage(disabled=("paritycheck",))


def _rules(directory: str) -> list[dict[str, Any]]:
    documents = build(MANIFESTS / directory)
    # Roles: the operator's own namespace (its leader-election Lease).
    return [rule for d in documents if d["kind"] in ("ClusterRole", "Role") for rule in d["rules"]]


def _operator_rules() -> list[dict[str, Any]]:
    return _rules("operator")


def _all_rules() -> list[dict[str, Any]]:
    return [*_rules("operator"), *_rules("runner")]


def test_scanner_resolves_every_api_call() -> None:
    assert FULL.unresolved == []
    assert IDEP_ONLY.unresolved == []


def test_scanner_finds_what_the_operator_is_known_to_do() -> None:
    """Guards the derivation against finding nothing (and so passing everything)."""
    found = FULL.permissions()
    for expected in (
        Permission("infergate.io", "inferencedeployments/status", "update"),
        Permission("infergate.io", "inferencedeployments", "watch"),
        Permission("infergate.io", "paritychecks/status", "update"),
        Permission("infergate.io", "inferencedeployments/finalizers", "update"),
        Permission("events.k8s.io", "events", "create"),
        Permission("events.k8s.io", "events", "patch"),
        Permission("batch", "jobs", "watch"),
        Permission("rbac.authorization.k8s.io", "roles", "watch"),
        Permission("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ):
        assert expected in found, expected
    assert FULL.dynamic, "no call with a resource chosen at runtime (writer, children)"
    assert IDEP_ONLY.permissions() < FULL.permissions()


@pytest.mark.parametrize("permission", sorted(IDEP_ONLY.permissions()), ids=str)
def test_inference_deployment_controller_runs_under_the_operator_role(
    permission: Permission,
) -> None:
    assert grants(_operator_rules(), permission), IDEP_ONLY.why(permission)


@pytest.mark.parametrize("permission", sorted(FULL.permissions()), ids=str)
def test_operator_with_every_controller_runs_under_both_roles(permission: Permission) -> None:
    assert grants(_all_rules(), permission), FULL.why(permission)


@pytest.mark.parametrize("use", FULL.dynamic, ids=lambda u: f"{u.where} {u.verb}")
def test_calls_with_a_runtime_kind_may_address_some_kind(use: ApiUse) -> None:
    assert any(grants(_all_rules(), p) for p in use.permissions()), use


def _broken_without(
    rules: list[dict[str, Any]], rule: dict[str, Any], needed: set[Permission]
) -> list[Permission]:
    rest = [r for r in rules if r is not rule]
    return sorted(p for p in needed if grants(rules, p) and not grants(rest, p))


@pytest.mark.parametrize("label", [rule_label(r) for r in _operator_rules()])
def test_removing_any_operator_role_rule_refuses_something_the_controller_does(
    label: str,
) -> None:
    rules = _operator_rules()
    rule = next(r for r in rules if rule_label(r) == label)
    assert _broken_without(rules, rule, IDEP_ONLY.reachable()), f"nothing needs {label}"


@pytest.mark.parametrize("label", [rule_label(r) for r in _rules("runner")])
def test_removing_any_paritycheck_role_rule_refuses_something_the_controller_does(
    label: str,
) -> None:
    rules = _all_rules()
    rule = next(r for r in rules[len(_operator_rules()) :] if rule_label(r) == label)
    assert _broken_without(rules, rule, FULL.reachable()), f"nothing needs {label} alone"


def test_every_granted_verb_is_used() -> None:
    used = FULL.reachable()
    unused = sorted(
        {str(p) for rule in _all_rules() for p in iter_rule_permissions(rule)}
        - {str(p) for p in used}
    )
    assert unused == []
