"""The pydantic-to-structural converter: what it rewrites and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from infergate.api.base import KubeModel
from infergate.api.schema import SchemaConversionError, to_structural
from tests.unit.api.structural import structural_problems


class _Inner(KubeModel):
    """Inner docstring."""

    size: int = Field(default=3, ge=1)
    """How big."""


class _Outer(KubeModel):
    """Outer."""

    inner: _Inner
    """The inner part, described at the field."""
    maybe: _Inner | None = None
    """Optional inner."""
    quantity: int | str = "1Gi"
    """Int or string."""
    free: dict[str, Any] = Field(default_factory=dict)
    """Anything."""
    ratio: float = Field(default=0.5, gt=0.0, lt=1.0)
    """Open interval."""
    items: list[_Inner] = Field(default_factory=list, max_length=4)
    """A list."""


def _convert(model: type[BaseModel]) -> dict[str, Any]:
    return to_structural(model.model_json_schema(by_alias=True))


def test_refs_are_inlined_with_the_field_description_winning() -> None:
    schema = _convert(_Outer)
    inner = schema["properties"]["inner"]
    assert inner["description"] == "The inner part, described at the field."
    assert inner["properties"]["size"] == {
        "description": "How big.",
        "type": "integer",
        "default": 3,
        "minimum": 1,
    }
    assert schema["properties"]["items"]["items"]["description"] == "Inner docstring."
    assert structural_problems(schema) == []


def test_optional_becomes_not_required_and_never_nullable() -> None:
    schema = _convert(_Outer)
    assert schema["required"] == ["inner"]
    maybe = schema["properties"]["maybe"]
    assert maybe["type"] == "object"
    assert "nullable" not in maybe
    assert "default" not in maybe


def test_int_or_string_and_free_form_and_exclusive_bounds() -> None:
    props = _convert(_Outer)["properties"]
    assert props["quantity"]["x-kubernetes-int-or-string"] is True
    assert props["quantity"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert props["free"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "additionalProperties" not in props["free"]
    assert props["ratio"]["minimum"] == 0.0
    assert props["ratio"]["exclusiveMinimum"] is True
    assert props["ratio"]["exclusiveMaximum"] is True


def test_cel_rules_of_model_and_field_both_apply() -> None:
    class Ruled(KubeModel):
        """Ruled."""

        model_config = ConfigDict(
            json_schema_extra={"x-kubernetes-validations": [{"rule": "model"}]}
        )

    class Holder(KubeModel):
        """Holder."""

        ruled: Ruled = Field(json_schema_extra={"x-kubernetes-validations": [{"rule": "field"}]})
        """Ruled field."""

    rules = _convert(Holder)["properties"]["ruled"]["x-kubernetes-validations"]
    assert rules == [{"rule": "model"}, {"rule": "field"}]


def test_a_field_without_description_is_refused() -> None:
    class Undocumented(BaseModel):
        count: int = 0

    with pytest.raises(SchemaConversionError, match=r"\.count: no description"):
        _convert(Undocumented)


def test_a_union_of_objects_is_refused() -> None:
    class A(KubeModel):
        """A."""

        a: int = 0
        """a."""

    class B(KubeModel):
        """B."""

        b: str = ""
        """b."""

    class Either(KubeModel):
        """Either."""

        value: A | B
        """A or B."""

    with pytest.raises(SchemaConversionError, match=r"\.value: anyOf"):
        _convert(Either)


def test_a_recursive_model_is_refused() -> None:
    class Node(KubeModel):
        """A tree."""

        children: list[Node] = Field(default_factory=list)
        """Sub-trees."""

    Node.model_rebuild()
    with pytest.raises(SchemaConversionError, match="recursive model"):
        _convert(Node)


def test_an_untyped_value_is_refused() -> None:
    class Loose(KubeModel):
        """Loose."""

        anything: Any = None
        """Anything at all."""

    with pytest.raises(SchemaConversionError, match=r"\.anything: no type"):
        _convert(Loose)
