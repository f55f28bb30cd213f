"""Every object the mirror is made of is seen again by the operator: a kopf index on its
kind and labels, read into the reconcile's snapshot, so it is patched back when edited and
deleted with the mirror, never created twice nor left behind."""

from __future__ import annotations

import ast
import inspect

import pytest

from infergate.api.shadow import Mirror
from infergate.controllers import children, inference_deployment
from infergate.kube.client import BY_KIND
from infergate.render.mirror import render_mirror

_MIRROR_KINDS = sorted(
    {
        o["kind"]
        for o in render_mirror(
            "qwen", "llm", Mirror(), image="infergate:1", runner_namespace="infergate-system"
        )
    }
    - {"Service"}
)  # the mirror's Service is kept among the deployment's Services


def _indexes() -> dict[str, tuple[str, str]]:
    """Index function -> (plural, name of its labels filter), from children.py."""
    tree = ast.parse(inspect.getsource(children))
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (
                isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "kopf.index"
            ):
                continue
            labels = next((k.value for k in decorator.keywords if k.arg == "labels"), None)
            if len(decorator.args) != 3 or not isinstance(
                plural := decorator.args[2], ast.Constant
            ):
                continue  # a resource given otherwise (the ParityChecks, by a tuple)
            found[node.name] = (str(plural.value), ast.unparse(labels) if labels else "")
    return found


def _snapshot_indexes() -> set[str]:
    tree = ast.parse(inspect.getsource(inference_deployment._snapshot))
    return {
        str(call.args[0].value)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and ast.unparse(call.func) == "values"
        and isinstance(call.args[0], ast.Constant)
    }


def test_the_mirror_has_more_than_its_service_and_deployment() -> None:
    assert {"Deployment", "NetworkPolicy", "Role"} <= set(_MIRROR_KINDS)


@pytest.mark.parametrize("kind", _MIRROR_KINDS)
def test_every_mirror_kind_is_indexed_and_read_into_the_snapshot(kind: str) -> None:
    plural = BY_KIND[kind].plural
    indexes = [
        name for name, (p, labels) in _indexes().items() if p == plural and labels == "MIRROR"
    ]
    assert indexes, f"no kopf index on {plural} with the mirror's labels"
    assert set(indexes) <= _snapshot_indexes(), indexes
    assert kind in children._OBSERVERS
