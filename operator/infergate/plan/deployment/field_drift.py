"""Drift: where an owned object differs from what its revision says it should be.

Pure. The API server fills in defaults the renderer never wrote, so a field
counts only where the desired object sets it: maps are compared key by key
over the desired keys, lists element by element and by length (an added env
var or argument is drift), scalars by value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.api.golden import quantity_bytes

_VALUE_SHOWN = 120


@dataclass(frozen=True)
class FieldDrift:
    """One field whose observed value contradicts the desired one."""

    path: str
    desired: Any
    observed: Any

    def describe(self) -> str:
        """`path: observed -> desired`, values cut short for an Event."""
        return f"{self.path} was {_shown(self.observed)}, reverted to {_shown(self.desired)}"


def _shown(value: Any) -> str:
    text = "<unset>" if value is _MISSING else repr(value)
    return text if len(text) <= _VALUE_SHOWN else text[: _VALUE_SHOWN - 3] + "..."


class _Missing:
    def __repr__(self) -> str:
        return "<unset>"


_MISSING: Any = _Missing()


def _same_scalar(desired: Any, observed: Any) -> bool:
    # Ports come back as written; only int/float spelling may differ. A quantity may come
    # back in canonical form (1024Gi as 1Ti) where a webhook decoded and re-encoded the
    # object (the LeaderWorkerSet controller's does): the same amount is no drift.
    if isinstance(desired, bool) or isinstance(observed, bool):
        return bool(desired is observed)
    if isinstance(desired, int | float) and isinstance(observed, int | float):
        return float(desired) == float(observed)
    if isinstance(desired, str) and isinstance(observed, str) and desired != observed:
        return _same_amount(desired, observed)
    return bool(desired == observed)


def _same_amount(desired: str, observed: str) -> bool:
    try:
        return quantity_bytes("", desired) == quantity_bytes("", observed)
    except ValueError:
        return False


def field_drift(desired: Any, observed: Any, path: str) -> list[FieldDrift]:
    """Every field set in `desired` whose value in `observed` differs, by path."""
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return [FieldDrift(path, desired, observed)]
        drifts: list[FieldDrift] = []
        for key, value in desired.items():
            drifts += field_drift(value, observed.get(key, _MISSING), f"{path}.{key}")
        return drifts
    if isinstance(desired, Sequence) and not isinstance(desired, str):
        if not isinstance(observed, Sequence) or isinstance(observed, str):
            return [FieldDrift(path, desired, observed)]
        if len(desired) != len(observed):
            return [FieldDrift(path, desired, observed)]
        drifts = []
        for index, (want, have) in enumerate(zip(desired, observed, strict=True)):
            label = want.get("name") if isinstance(want, Mapping) else None
            drifts += field_drift(want, have, f"{path}[{label or index}]")
        return drifts
    if observed is _MISSING or not _same_scalar(desired, observed):
        return [FieldDrift(path, desired, observed)]
    return []


def deployment_drift(
    desired: Mapping[str, Any], observed_spec: Mapping[str, Any]
) -> list[FieldDrift]:
    """Drift of a Deployment's spec (replicas, image, command, args, env, volumes, ...)."""
    return field_drift(desired["spec"], observed_spec, "spec")


def service_drift(desired: Mapping[str, Any], observed_spec: Mapping[str, Any]) -> list[FieldDrift]:
    """Drift of a Service's selector and ports."""
    wanted = {key: desired["spec"][key] for key in ("selector", "ports")}
    return field_drift(wanted, observed_spec, "spec")


def config_map_drift(
    desired: Mapping[str, Any], observed_data: Mapping[str, Any]
) -> list[FieldDrift]:
    """Drift of a ConfigMap's data: every key, and no extra ones."""
    want = desired.get("data") or {}
    drifts = field_drift(want, observed_data, "data")
    drifts += [
        FieldDrift(f"data.{key}", _MISSING, value)
        for key, value in observed_data.items()
        if key not in want
    ]
    return drifts
