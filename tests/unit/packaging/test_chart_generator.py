"""The chart generator follows manifests/: an object added to the base appears in the
chart unchanged (a ValidatingAdmissionPolicy, say), and what it cannot template safely
it refuses by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate_dev.helmchart import ChartError, render_chart, strip_release
from tests.unit.packaging.kustomize import MANIFESTS, build, tenant_role
from tests.unit.packaging.test_helm_chart import helm

POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "infergate-no-auto-dtype", "labels": {"app.kubernetes.io/part-of": "infergate"}},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["infergate.io"], "apiVersions": ["*"],
                             "operations": ["CREATE", "UPDATE"], "resources": ["inferencedeployments"]}]},
        "validations": [{"expression": "object.spec.engine.dtype != 'auto'",
                         "messageExpression": "'dtype {{ must }} be explicit in ' + object.metadata.namespace"}],
    },
}  # fmt: skip
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "infergate-no-auto-dtype"},
    "spec": {"policyName": "infergate-no-auto-dtype", "validationActions": ["Deny"]},
}


def _write(files: dict[str, str], root: Path) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_object_added_to_the_base_renders_as_it_was_written(tmp_path: Path) -> None:
    base = [*build(MANIFESTS), copy.deepcopy(POLICY), copy.deepcopy(BINDING)]
    chart = _write(render_chart(base, [], version="0.1.0"), tmp_path / "chart")
    out = helm("template", "infergate", str(chart), "--namespace", "infergate-system").stdout
    rendered = {
        (d["kind"], d["metadata"]["name"]): d
        for d in strip_release(d for d in yaml.safe_load_all(out) if d)
    }
    policy = ("ValidatingAdmissionPolicy", POLICY["metadata"]["name"])
    assert json.dumps(rendered[policy], sort_keys=True) == json.dumps(POLICY, sort_keys=True)
    assert rendered[("ValidatingAdmissionPolicyBinding", BINDING["metadata"]["name"])] == BINDING
    moved = helm("template", "x", str(chart), "--set", "fullnameOverride=acme").stdout
    binding = next(
        d
        for d in yaml.safe_load_all(moved)
        if d
        and d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["spec"]["policyName"].endswith("no-auto-dtype")
    )
    assert binding["spec"]["policyName"] == "acme-no-auto-dtype"


def test_a_rule_on_a_resource_of_unknown_scope_is_refused_by_name() -> None:
    base: list[dict[str, Any]] = copy.deepcopy(build(MANIFESTS))  # build() shares its cache
    role = next(d for d in base if d["kind"] == "ClusterRole" and not tenant_role(d))
    role["rules"].append({"apiGroups": ["example.com"], "resources": ["gizmos"], "verbs": ["get"]})
    with pytest.raises(ChartError, match=r"\['gizmos'\]"):
        render_chart(base, [], version="0.1.0")
