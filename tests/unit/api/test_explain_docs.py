"""What `kubectl explain` shows: every field described, every number with its unit or
range, every default stated; and the generated API reference lists every field."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from infergate.api.crd import RESOURCE_KINDS, crd_document, states_default
from infergate.api.reference import render_reference

# Words that give a number its unit or its range: a count of something, a time, an
# information measure, a bounded share, or an explicit "no unit".
_UNIT = re.compile(
    r"\b(seconds?|tokens?|nats|devices?|pods?|replicas?|revisions?|positions?|prompts?|"
    r"retries|port|generation|ratio|share|percentile|characters?|no unit|"
    r"hidden states' own units)\b|\(-?\d+(\.\d+)?\.\.\d+",
    re.IGNORECASE,
)


def _fields() -> Iterator[tuple[str, dict[str, Any]]]:
    def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, child in (node.get("properties") or {}).items():
            yield f"{path}.{name}", child
            yield from walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], f"{path}[]")

    for resource in RESOURCE_KINDS:
        schema = crd_document(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            yield from walk(schema["properties"][part], f"{resource.kind}.{part}")


FIELDS = list(_fields())


@pytest.mark.parametrize(("path", "node"), FIELDS, ids=[p for p, _ in FIELDS])
def test_every_field_says_what_it_is_its_unit_and_its_default(
    path: str, node: dict[str, Any]
) -> None:
    description = node.get("description", "")
    assert description, f"{path}: no description for kubectl explain"
    if node.get("type") in ("integer", "number"):
        assert _UNIT.search(description), f"{path}: no unit or range in {description!r}"
    default = node.get("default")
    if default is not None and default not in ({}, []):
        assert states_default(description, default), f"{path}: default {default!r} not stated"


def test_the_api_reference_lists_every_field() -> None:
    text = render_reference()
    for path, _ in FIELDS:
        rest = path.partition(".")[2]
        assert f"| `{rest}` |" in text, f"{path} missing from docs/api-reference.md"
