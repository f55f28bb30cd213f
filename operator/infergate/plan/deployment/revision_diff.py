"""What changed between two revisions, in the order a person reads it (pure).

A revision is made of the model, the engine with its pinned numerics and the
accelerator (`plan.deployment.desired.revision_spec_annotation`); this module lists the fields
that differ between two of them, most telling first: what runs (engine kind, image,
dtype, weights), then the numerics pinned in config, then sizes and extras. The same
list appears in `infergate diff`, in the canary's Progressing message and in the
ParityCheck's report, so "what changed?" has one answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Field paths in reading order; anything else (a new field) follows, alphabetically.
_ORDER = (
    "engine.kind",
    "engine.image",
    "engine.dtype",
    "engine.paramsDtype",
    "model.uri",
    "model.name",
    "engine.config",
    "engine.maxModelLen",
    "engine.tensorParallelSize",
    "engine.seed",
    "engine.deterministic",
    "engine.args",
    "engine.env",
    "accelerator.kind",
    "accelerator.count",
)
_ABSENT = object()


@dataclass(frozen=True)
class FieldChange:
    """One field that differs: its path and both values (None: not set on that side)."""

    path: str
    before: Any
    after: Any

    def describe(self) -> str:
        return f"{self.path}: {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    if value is None or value is _ABSENT:
        return "(unset)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _flatten(revision: Mapping[str, Any]) -> dict[str, Any]:
    """Leaf fields by dotted path; config keys and env variables one by one."""
    flat: dict[str, Any] = {}
    for part in ("model", "engine", "accelerator"):
        for key, value in (revision.get(part) or {}).items():
            path = f"{part}.{key}"
            if path == "engine.config" and isinstance(value, Mapping):
                for name, item in value.items():
                    flat[f"{path}.{name}"] = item
            elif path == "engine.env" and isinstance(value, list):
                for item in value:
                    if isinstance(item, Mapping) and "name" in item:
                        rest = {k: v for k, v in item.items() if k != "name"}
                        flat[f"{path}.{item['name']}"] = rest.get("value", rest)
            else:
                flat[path] = value
    return flat


def _rank(path: str) -> tuple[int, str]:
    for index, prefix in enumerate(_ORDER):
        if path == prefix or path.startswith(prefix + "."):
            return index, path
    return len(_ORDER), path


def revision_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[FieldChange]:
    """Fields of two revisions (model, engine, accelerator as JSON) that differ, in order."""
    old, new = _flatten(before), _flatten(after)
    changed = [
        FieldChange(path, old.get(path), new.get(path))
        for path in set(old) | set(new)
        if old.get(path, _ABSENT) != new.get(path, _ABSENT)
    ]
    return sorted(changed, key=lambda c: _rank(c.path))


def summary(changes: list[FieldChange], *, limit: int = 6) -> str:
    """One line for a condition message: the first changes, and how many more."""
    if not changes:
        return "no field of the revision differs"
    shown = "; ".join(c.describe() for c in changes[:limit])
    more = len(changes) - limit
    return shown + (f"; and {more} more (infergate diff)" if more > 0 else "")
