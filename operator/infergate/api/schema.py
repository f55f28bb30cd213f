"""Pydantic JSON schema -> Kubernetes structural OpenAPI v3 schema.

The API server accepts only *structural* schemas in a CustomResourceDefinition:
every node has a type (or says it is free-form or int-or-string), no `$ref`,
no `anyOf`/`oneOf` except the int-or-string pattern, no
`additionalProperties: false`. Pydantic emits JSON Schema 2020-12 with `$defs`,
`anyOf [X, null]` for optionals and numeric `exclusiveMinimum`. This module
rewrites one into the other and refuses, naming the path, anything it does
not know how to translate, so nothing non-structural or undocumented reaches
the cluster:

- `$ref` / single `allOf`: inlined; the referring field's keys (description,
  default, CEL rules) win over the definition's, and CEL rules of both apply;
- `anyOf [X, {type: null}]`: X, not required and not nullable (a null sent by
  a user is pruned, which means "unset", as `kubectl apply` treats it anyway);
- `anyOf [integer, string]`: `x-kubernetes-int-or-string`;
- `additionalProperties: true`: `x-kubernetes-preserve-unknown-fields`;
- `const`: a one-value enum; numeric `exclusiveMinimum/Maximum`: the OpenAPI v3 form;
- `patternProperties` of a map with constrained keys: `additionalProperties`;
- `title`, `additionalProperties: false` and `propertyNames` are dropped
  (the server refuses unknown fields by itself; label-key syntax is checked
  by the Python models and by the API server when pods are created).

Every property must carry a description: `kubectl explain` shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COPIED_KEYS = (
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
)
_DROPPED_KEYS = frozenset({"title", "propertyNames", "$defs"})
_HANDLED_KEYS = frozenset(
    {"properties", "required", "items", "additionalProperties", "patternProperties", "const"}
    | {"exclusiveMinimum", "exclusiveMaximum"}
)
_FORMATS = frozenset({"date-time", "date", "int32", "int64", "float", "double", "byte"})


class SchemaConversionError(ValueError):
    """A pydantic schema construct with no structural equivalent (the message names its path)."""


def to_structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Convert a pydantic `model_json_schema(by_alias=True)` into a structural schema."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    return _convert(schema, defs, path="", refs=())


def _resolve(
    node: Mapping[str, Any], defs: Mapping[str, Any], path: str, refs: tuple[str, ...]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Inline `$ref` and single-element `allOf`, local keys overriding the definition's."""
    current = dict(node)
    while True:
        if "$ref" in current:
            ref = current.pop("$ref")
            prefix = "#/$defs/"
            if not isinstance(ref, str) or not ref.startswith(prefix):
                raise SchemaConversionError(f"{path or '<root>'}: unsupported $ref {ref!r}")
            name = ref[len(prefix) :]
            if name in refs:
                chain = " -> ".join((*refs, name))
                raise SchemaConversionError(
                    f"{path}: recursive model {chain}; a structural schema cannot recurse"
                )
            if name not in defs:
                raise SchemaConversionError(f"{path}: $ref to unknown definition {name!r}")
            refs = (*refs, name)
            current = _merge(defs[name], current)
        elif "allOf" in current:
            parts = current.pop("allOf")
            if len(parts) != 1:
                raise SchemaConversionError(
                    f"{path}: allOf with {len(parts)} parts is not supported"
                )
            current = _merge(parts[0], current)
        else:
            return current, refs


def _merge(base: Mapping[str, Any], local: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**base, **local}
    rules = [*base.get("x-kubernetes-validations", []), *local.get("x-kubernetes-validations", [])]
    if rules:
        merged["x-kubernetes-validations"] = rules
    return merged


def _convert(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    path: str,
    refs: tuple[str, ...],
) -> dict[str, Any]:
    current, refs = _resolve(node, defs, path, refs)
    if "anyOf" in current:
        return _convert_any_of(current, defs, path, refs)

    unknown = set(current) - set(_COPIED_KEYS) - _DROPPED_KEYS - _HANDLED_KEYS
    if unknown:
        raise SchemaConversionError(f"{path or '<root>'}: unsupported keys {sorted(unknown)}")

    out: dict[str, Any] = {key: current[key] for key in _COPIED_KEYS if key in current}
    if "description" in out:
        # Docstrings may wrap; kubectl explain re-wraps to the terminal.
        out["description"] = " ".join(str(out["description"]).split())
    if out.get("default", 0) is None:
        del out["default"]
    if "const" in current:
        out["enum"] = [current["const"]]
    _exclusive_bounds(current, out)
    fmt = out.get("format")
    if fmt is not None and fmt not in _FORMATS:
        raise SchemaConversionError(f"{path}: format {fmt!r} is not one the API server knows")

    if "properties" in current:
        out["properties"] = {
            name: _property(child, defs, f"{path}.{name}", refs)
            for name, child in current["properties"].items()
        }
        if current.get("required"):
            out["required"] = list(current["required"])
    if "items" in current:
        out["items"] = _convert(current["items"], defs, f"{path}[]", refs)

    extra = current.get("additionalProperties")
    patterned = current.get("patternProperties")
    if patterned is not None:
        # dict[ConstrainedKey, V]: the key constraint has no structural form.
        if len(patterned) != 1 or extra is not None:
            raise SchemaConversionError(f"{path}: patternProperties beyond a typed map")
        extra = next(iter(patterned.values()))
    if extra is True:
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, Mapping):
        if "properties" in current:
            raise SchemaConversionError(
                f"{path}: properties and additionalProperties cannot both be set"
            )
        out["additionalProperties"] = _convert(extra, defs, f"{path}{{}}", refs)

    _require_type(out, path)
    return _ordered(out)


def _property(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    path: str,
    refs: tuple[str, ...],
) -> dict[str, Any]:
    converted = _convert(node, defs, path, refs)
    if not converted.get("description", "").strip():
        raise SchemaConversionError(
            f"{path}: no description; every field needs one (kubectl explain shows it)"
        )
    return converted


def _convert_any_of(
    current: dict[str, Any],
    defs: Mapping[str, Any],
    path: str,
    refs: tuple[str, ...],
) -> dict[str, Any]:
    branches = list(current.pop("anyOf"))
    concrete = [b for b in branches if b != {"type": "null"}]
    if current.get("default", 0) is None:
        del current["default"]
    if len(concrete) == 1:
        return _convert(_merge(concrete[0], current), defs, path, refs)
    resolved = [_resolve(b, defs, path, refs)[0] for b in concrete]
    types = sorted(str(b.get("type")) for b in resolved)
    if types != ["integer", "string"]:
        raise SchemaConversionError(
            f"{path}: anyOf of {types} has no structural form (only optional X and int-or-string)"
        )
    out: dict[str, Any] = {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    }
    for branch in resolved:
        if branch["type"] == "string" and "pattern" in branch:
            out["pattern"] = branch["pattern"]
    for key in ("description", "default", "x-kubernetes-validations"):
        if key in current:
            out[key] = current[key]
    return _ordered(out)


def _exclusive_bounds(current: Mapping[str, Any], out: dict[str, Any]) -> None:
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in current:
            value = current[bound]
            if isinstance(value, bool):
                raise SchemaConversionError(f"boolean {bound} is not produced by pydantic")
            out[inclusive] = value
            out[bound] = True


def _require_type(out: Mapping[str, Any], path: str) -> None:
    if "type" in out or True in (
        out.get("x-kubernetes-preserve-unknown-fields"),
        out.get("x-kubernetes-int-or-string"),
    ):
        return
    raise SchemaConversionError(
        f"{path or '<root>'}: no type; a structural schema needs one on every node "
        "(use a concrete type, or a dict[str, Any] for free-form data)"
    )


_ORDER = {key: index for index, key in enumerate(("description", "type", "format", "nullable"))}


def _ordered(out: dict[str, Any]) -> dict[str, Any]:
    """Stable, readable key order: description and type first, then the rest sorted."""
    return dict(sorted(out.items(), key=lambda item: (_ORDER.get(item[0], len(_ORDER)), item[0])))
