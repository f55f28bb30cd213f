"""The generated CRDs are structural, documented, bounded, and declare every status field."""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from infergate.api import (
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
    ParityCheckSpec,
    ParityCheckStatus,
)
from infergate.api.check_status import FINAL_FIELDS
from infergate.api.crd import INFERENCE_DEPLOYMENT, PARITY_CHECK, RESOURCE_KINDS, crd_document
from infergate.api.parity_check import CHECK_PARAMETERS, SWITCHABLE_CHECKS
from infergate.plan.check.owned import observe_check
from tests.unit.api.manifests import full_check_status, full_deployment_status
from tests.unit.api.structural import (
    apply_defaults,
    nodes,
    prune,
    structural_problems,
    unbounded_nodes,
)

# A JSONPath filter on a list, as in `.status.conditions[?(@.type=="Drifted")].status`.
_FILTER = re.compile(r'\[\?\(@\.(\w+)=="[^"]*"\)\]')


def _read_paths(json_path: str) -> set[str]:
    """The schema nodes a column's JSONPath reads, in `nodes` notation: a filter reads the
    items and the field it tests."""
    paths = {_FILTER.sub("[]", json_path)}
    for found in _FILTER.finditer(json_path):
        paths.add(f"{_FILTER.sub('[]', json_path[: found.start()])}[].{found.group(1)}")
    return paths


def _schema(resource: Any) -> dict[str, Any]:
    version = crd_document(resource)["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("resource", RESOURCE_KINDS, ids=lambda r: r.kind)
def test_schema_is_structural(resource: Any) -> None:
    assert structural_problems(_schema(resource)) == []


@pytest.mark.parametrize("resource", RESOURCE_KINDS, ids=lambda r: r.kind)
def test_every_property_has_a_description(resource: Any) -> None:
    missing = [
        f"{path}.{name}"
        for path, node in nodes(_schema(resource))
        for name, child in node.get("properties", {}).items()
        if not str(child.get("description", "")).strip()
    ]
    # metadata is the standard ObjectMeta: the API server forbids anything but its type.
    assert missing == [".metadata"]


@pytest.mark.parametrize("resource", RESOURCE_KINDS, ids=lambda r: r.kind)
def test_spec_strings_lists_and_maps_are_bounded_for_cel_cost(resource: Any) -> None:
    assert unbounded_nodes(_schema(resource)["properties"]["spec"]) == []


@pytest.mark.parametrize("resource", RESOURCE_KINDS, ids=lambda r: r.kind)
def test_rule_field_paths_name_existing_fields(resource: Any) -> None:
    schema_paths = {path for path, _ in nodes(_schema(resource))}
    for path, node in nodes(_schema(resource)):
        for rule in node.get("x-kubernetes-validations", []):
            if "fieldPath" in rule:
                assert f"{path}{rule['fieldPath']}" in schema_paths, rule


def _field_paths(model: type[BaseModel], prefix: str) -> set[str]:
    """Every field path of a model, through optionals, lists and maps, by wire name."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        paths.add(path)
        paths |= _type_paths(field.annotation, path)
    return paths


def _type_paths(annotation: Any, path: str) -> set[str]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_paths(args[0], path)
    if origin in (typing.Union, types.UnionType):
        concrete = [arg for arg in args if arg is not type(None)]
        return set().union(*(_type_paths(arg, path) for arg in concrete))
    if origin is list:
        return {f"{path}[]"} | _type_paths(args[0], f"{path}[]")
    if origin is dict:
        if args[1] is Any:
            return set()
        return {f"{path}{{}}"} | _type_paths(args[1], f"{path}{{}}")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _field_paths(annotation, path)
    return set()


@pytest.mark.parametrize(
    ("resource", "model", "part"),
    [
        (INFERENCE_DEPLOYMENT, InferenceDeploymentStatus, "status"),
        (PARITY_CHECK, ParityCheckStatus, "status"),
        (INFERENCE_DEPLOYMENT, InferenceDeploymentSpec, "spec"),
        (PARITY_CHECK, ParityCheckSpec, "spec"),
    ],
    ids=lambda v: getattr(v, "kind", getattr(v, "__name__", v)),
)
def test_every_model_field_is_declared(resource: Any, model: type[BaseModel], part: str) -> None:
    # An undeclared status field is pruned by the API server without a word.
    schema_paths = {path for path, _ in nodes(_schema(resource)["properties"][part])}
    model_paths = {path for path in _field_paths(model, "") if path}
    assert model_paths - schema_paths == set()


def test_a_full_status_survives_pruning() -> None:
    status = InferenceDeploymentStatus.model_validate(full_deployment_status()).to_kube()
    schema = _schema(INFERENCE_DEPLOYMENT)["properties"]["status"]
    assert prune(status, schema) == status
    check_status = ParityCheckStatus.model_validate(full_check_status()).to_kube()
    schema = _schema(PARITY_CHECK)["properties"]["status"]
    assert prune(check_status, schema) == check_status


def _minimal_spec() -> dict[str, Any]:
    return {
        "model": {"name": "tiny", "uri": "pvc://models/tiny"},
        "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096},
        "accelerator": {"kind": "nvidia-gpu"},
        "rollout": {"parity": {"suite": {"configMapRef": {"name": "p", "key": "p.jsonl"}}}},
    }


def test_server_defaults_agree_with_model_defaults() -> None:
    spec_schema = _schema(INFERENCE_DEPLOYMENT)["properties"]["spec"]
    defaulted = apply_defaults(_minimal_spec(), spec_schema)
    # What the server fills in is what the models assume...
    assert defaulted["replicas"] == 1
    assert defaulted["rollout"]["canaryReplicas"] == 1
    assert defaulted["rollout"]["scaleDownDelaySeconds"] == 30
    assert defaulted["rollout"]["parity"]["sampling"]["temperature"] == 0
    assert defaulted["rollout"]["parity"]["runner"]["activeDeadlineSeconds"] == 3600
    # ...so reading a stored object back gives the same spec as the manifest applied.
    from_server = InferenceDeploymentSpec.model_validate(defaulted)
    from_manifest = InferenceDeploymentSpec.model_validate(_minimal_spec())
    assert from_server == from_manifest
    wire = from_manifest.to_kube()

    def is_subset(part: Any, whole: Any) -> bool:
        if isinstance(part, Mapping):
            return all(key in whole and is_subset(v, whole[key]) for key, v in part.items())
        return bool(part == whole)

    assert is_subset(defaulted, wire)


def test_nothing_is_nullable_so_apply_and_server_agree_on_null() -> None:
    # kubectl apply drops nulls; a nullable field would mean something else via the API.
    for resource in RESOURCE_KINDS:
        assert [path for path, node in nodes(_schema(resource)) if node.get("nullable")] == []


def test_disabled_checks_offer_exactly_the_switchable_checks() -> None:
    spec = _schema(PARITY_CHECK)["properties"]["spec"]
    disabled = spec["properties"]["disabledChecks"]
    assert disabled["x-kubernetes-list-type"] == "set"
    assert set(disabled["items"]["enum"]) == set(SWITCHABLE_CHECKS)
    thresholds = set(spec["properties"]["thresholds"]["properties"])
    regression = set(spec["properties"]["regression"]["properties"])
    # Every threshold and regression key is a check or a named parameter of one.
    assert (thresholds | regression) - CHECK_PARAMETERS == set(SWITCHABLE_CHECKS)


def test_names_subresources_and_printer_columns() -> None:
    idep = crd_document(INFERENCE_DEPLOYMENT)
    assert idep["metadata"]["name"] == "inferencedeployments.infergate.io"
    assert idep["spec"]["names"]["shortNames"] == ["idep", "infdep"]
    version = idep["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Phase", "Stable", "Canary", "Parity", "Drifted", "Age"]
    status_paths = {path for path, _ in nodes(_schema(INFERENCE_DEPLOYMENT))}
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"].startswith((".status", ".spec")):
            assert _read_paths(column["jsonPath"]) <= status_paths, column

    pc = crd_document(PARITY_CHECK)
    assert pc["spec"]["names"]["shortNames"] == ["pcheck"]
    assert pc["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_an_ended_checks_verdict_is_final_in_the_crd() -> None:
    """Once status.phase is terminal, the API server refuses any change of what a rollout or
    the drift watch reads of the check: every status field `observe_check` reads is frozen
    by the transition rule (a field it reads that the rule left out could be rewritten by
    anyone with status rights after the end)."""
    schema = _schema(PARITY_CHECK)["properties"]["status"]
    [rule] = [r for r in schema.get("x-kubernetes-validations", []) if "oldSelf" in r["rule"]]
    assert rule["rule"].startswith("!has(oldSelf.phase) || !(oldSelf.phase in ['Passed', ")
    assert rule["reason"] == "FieldValueForbidden"
    for field in FINAL_FIELDS:
        assert f"self.{field} == oldSelf.{field}" in rule["rule"]
    ended = {**full_check_status(), "golden": {"stored": True, "entries": ["a/b/c"]}}
    body = {"metadata": {"name": "c", "generation": 1}, "spec": {}, "status": ended}
    seen = observe_check(body)
    read = set()
    for key in ended:
        changed = copy.deepcopy(body)
        del changed["status"][key]
        if observe_check(changed) != seen:
            read.add(key)
    assert read
    assert read <= set(FINAL_FIELDS)
    # What may still follow an end is not frozen: the released condition, progress.
    assert not {"conditions", "progress", "runnerServiceAccount"} & set(FINAL_FIELDS)
