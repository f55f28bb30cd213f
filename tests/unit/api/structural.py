"""An independent reading of the API server's rules for CRD schemas, for tests.

Written from the Kubernetes documentation ("Specifying a structural schema",
"Validation rules", "Defaulting"), not from the converter, so that the
converter's output is checked against the rules rather than against itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

ALLOWED_KEYS = frozenset(
    {
        "description", "type", "format", "nullable", "default", "enum",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern", "minItems", "maxItems",
        "minProperties", "maxProperties", "properties", "required", "items",
        "additionalProperties", "anyOf",
        "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
    }
)  # fmt: skip
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def nodes(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema node with its path (`.field`, `[]` for items, `{}` for map values)."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse this schema as non-structural (empty when fine)."""
    problems = []
    for path, node in nodes(schema):
        where = path or "<root>"
        unknown = set(node) - ALLOWED_KEYS
        if unknown:
            problems.append(f"{where}: keys the API server does not know: {sorted(unknown)}")
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        free_form = node.get("x-kubernetes-preserve-unknown-fields") is True
        if "type" not in node and not (int_or_string or free_form):
            problems.append(f"{where}: no type")
        if "anyOf" in node and not (
            int_or_string and node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
        ):
            problems.append(f"{where}: anyOf outside the int-or-string pattern")
        if node.get("additionalProperties") is False:
            problems.append(f"{where}: additionalProperties: false")
        if "additionalProperties" in node and "properties" in node:
            problems.append(f"{where}: both properties and additionalProperties")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array without items")
        if (
            node.get("type") == "object"
            and not {"properties", "additionalProperties"} & set(node)
            and not free_form
            and path != ".metadata"
        ):
            problems.append(f"{where}: object without properties would be pruned to {{}}")
        if "default" in node and not _value_fits(node["default"], node):
            problems.append(f"{where}: default {node['default']!r} does not fit the schema")
        for value in node.get("enum", []):
            if not _value_fits(value, {"type": node.get("type")}):
                problems.append(f"{where}: enum value {value!r} is not a {node.get('type')}")
        if path == ".metadata" and set(node) != {"type"}:
            problems.append(f"{where}: only the type may be given for metadata")
        problems.extend(_list_map_problems(where, node))
    return problems


def _list_map_problems(where: str, node: Mapping[str, Any]) -> list[str]:
    if node.get("x-kubernetes-list-type") != "map":
        return []
    items = node.get("items", {})
    keys = node.get("x-kubernetes-list-map-keys", [])
    problems = []
    if not keys:
        problems.append(f"{where}: list-type map without list-map-keys")
    for key in keys:
        prop = items.get("properties", {}).get(key)
        if prop is None:
            problems.append(f"{where}: list-map key {key} is not a property of the items")
        elif key not in items.get("required", []) and "default" not in prop:
            problems.append(f"{where}: list-map key {key} is neither required nor defaulted")
    return problems


def _value_fits(value: Any, node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    if kind is None:
        return True
    if value is None:
        return bool(node.get("nullable"))
    if isinstance(value, bool) and kind != "boolean":
        return False
    if not isinstance(value, _PY_TYPES[kind]):
        return False
    if isinstance(value, dict):
        props = node.get("properties", {})
        return all(key in props and _value_fits(item, props[key]) for key, item in value.items())
    if isinstance(value, list):
        return all(_value_fits(item, node.get("items", {})) for item in value)
    return True


def unbounded_nodes(schema: Mapping[str, Any]) -> list[str]:
    """Strings, lists and maps without a size bound: CEL rules over them can blow the cost budget."""
    found = []
    for path, node in nodes(schema):
        kind = node.get("type")
        if (
            (kind == "string" and not ({"maxLength", "enum"} & set(node) or "format" in node))
            or (kind == "array" and "maxItems" not in node)
            or (
                isinstance(node.get("additionalProperties"), Mapping)
                and "maxProperties" not in node
            )
        ):
            found.append(path)
    return found


def apply_defaults(value: Any, node: Mapping[str, Any]) -> Any:
    """The API server's structural defaulting: fill missing fields, then recurse into them."""
    if isinstance(value, dict):
        result = dict(value)
        for name, child in node.get("properties", {}).items():
            if name not in result and "default" in child:
                result[name] = child["default"]
            if name in result:
                result[name] = apply_defaults(result[name], child)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            result = {key: apply_defaults(item, extra) for key, item in result.items()}
        return result
    if isinstance(value, list) and isinstance(node.get("items"), Mapping):
        return [apply_defaults(item, node["items"]) for item in value]
    return value


def prune(value: Any, node: Mapping[str, Any]) -> Any:
    """The API server's pruning: drop every field the schema does not declare."""
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if props is not None:
            kept = {k: prune(v, props[k]) for k, v in value.items() if k in props}
            if node.get("x-kubernetes-preserve-unknown-fields") is True:
                kept = {**value, **kept}
            return kept
        if isinstance(extra, Mapping):
            return {k: prune(v, extra) for k, v in value.items()}
        return value if node.get("x-kubernetes-preserve-unknown-fields") is True else {}
    if isinstance(value, list) and isinstance(node.get("items"), Mapping):
        return [prune(item, node["items"]) for item in value]
    return value
