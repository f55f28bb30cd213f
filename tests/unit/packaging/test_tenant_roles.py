"""What a namespace user gets on infergate's resources from the built-in roles (admin,
edit, view), through the ClusterRoles of manifests/tenant that aggregate into them: an
editor creates, changes and deletes InferenceDeployments and ParityChecks, a viewer reads
them, and neither writes a /status subresource (the operator's, and a runner's verdict)."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.api.base import GROUP, INFERENCE_DEPLOYMENTS_PLURAL, PARITY_CHECKS_PLURAL
from tests.unit.packaging.kustomize import MANIFESTS, build, tenant_role

NAMESPACED = MANIFESTS / "overlays" / "namespaced"
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
_RESOURCES = (INFERENCE_DEPLOYMENTS_PLURAL, PARITY_CHECKS_PLURAL)
_WRITES = ("create", "update", "patch", "delete")
_READS = ("get", "list", "watch")


def _aggregated(documents: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """The rules the build adds to the built-in ClusterRole `role` (admin, edit, view)."""
    return [
        rule
        for d in documents
        if tenant_role(d) and d["metadata"]["labels"].get(f"{_AGGREGATE}{role}") == "true"
        for rule in d["rules"]
    ]


def _allows(rules: list[dict[str, Any]], resource: str, verb: str) -> bool:
    """Whether RBAC would allow `verb` on `resource` (e.g. paritychecks/status) of our group."""
    return any(
        GROUP in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in rules
    )


@pytest.mark.parametrize("directory", [MANIFESTS, NAMESPACED], ids=["cluster", "namespaced"])
def test_editors_write_and_viewers_read_the_resources_in_both_installs(directory: Any) -> None:
    documents = build(directory)
    for role, verbs in (("admin", _READS + _WRITES), ("edit", _READS + _WRITES)):
        rules = _aggregated(documents, role)
        for resource in _RESOURCES:
            for verb in verbs:
                assert _allows(rules, resource, verb), (role, resource, verb)
    view = _aggregated(documents, "view")
    for resource in _RESOURCES:
        assert all(_allows(view, resource, verb) for verb in _READS), resource
        assert not any(_allows(view, resource, verb) for verb in _WRITES), resource


@pytest.mark.parametrize("role", ["admin", "edit", "view"])
def test_no_tenant_role_reaches_a_status_or_anything_beyond_the_two_resources(role: str) -> None:
    rules = _aggregated(build(MANIFESTS), role)
    assert rules, f"nothing aggregates into {role}"
    for resource in _RESOURCES:
        for verb in (*_READS, *_WRITES):
            assert not _allows(rules, f"{resource}/status", verb), (resource, verb)
    for rule in rules:
        assert rule["apiGroups"] == [GROUP], rule
        assert "*" not in rule["verbs"], rule
        assert "*" not in rule["resources"], rule
        assert set(rule["resources"]) <= {*_RESOURCES, f"{INFERENCE_DEPLOYMENTS_PLURAL}/scale"}
        assert "nonResourceURLs" not in rule, rule
