"""Small shapes shared by both resources: conditions, references, resources, tolerations."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from infergate.api.base import DNS_LABEL_MAX, MESSAGE_MAX, NAME_MAX, KubeModel, cel, cel_rules
from infergate.api.enums import ConditionStatus

# Kubernetes resource quantity, e.g. 500m, 16Gi, 2 (as a number or a string), never
# negative: the API server's own quantity syntax allows a leading `-`, which means
# nothing for an amount of CPU, memory or bytes. Negative integers are refused by
# `NON_NEGATIVE_QUANTITY_RULE` and `check_non_negative` (a pattern sees strings only).
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = int | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)]
QUANTITY_MESSAGE = (
    "every quantity must be non-negative, e.g. 500m, 2Gi or 2: a negative amount of a "
    "resource is not a resource"
)
# int-or-string is `dyn` in CEL: the type is checked before each comparison.
NON_NEGATIVE_QUANTITY_RULE = cel(
    "self.all(k, type(self[k]) == int ? self[k] >= 0 : !string(self[k]).startsWith('-'))",
    QUANTITY_MESSAGE,
)


def check_non_negative(field: str, quantities: dict[str, int | str] | None) -> None:
    """Refuse a negative quantity, naming the field and the resource."""
    for resource, value in (quantities or {}).items():
        negative = value < 0 if isinstance(value, int) else value.startswith("-")
        if negative:
            raise ValueError(f"{field}.{resource}: {value!r} is not allowed; {QUANTITY_MESSAGE}")


DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ObjectName = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX, pattern=DNS_SUBDOMAIN_PATTERN)
]
ShortHash = Annotated[str, StringConstraints(max_length=10, pattern=r"^[0-9a-f]{10}$")]

_CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(KubeModel):
    """One observation of the object's state, shaped like metav1.Condition."""

    type: str = Field(max_length=316, pattern=_CONDITION_TYPE_PATTERN)
    """Condition type in CamelCase, e.g. Available, Progressing, ParityPassed, ConfigDrifted,
    Degraded.
    """
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation of the object this condition was set for."""
    last_transition_time: datetime
    """When status last changed (not when the condition was last written)."""
    reason: str = Field(min_length=1, max_length=1024, pattern=_CONDITION_REASON_PATTERN)
    """One CamelCase word, for machines: why the condition has this status."""
    message: str = Field(max_length=MESSAGE_MAX)
    """For people: what happened, naming objects, fields and values."""


class LocalObjectReference(KubeModel):
    """A reference to an object in the same namespace."""

    name: ObjectName
    """Name of the object, in the same namespace."""


class ConfigMapKeyReference(KubeModel):
    """A key of a ConfigMap in the same namespace."""

    name: ObjectName
    """Name of the ConfigMap, in the same namespace."""
    key: str = Field(min_length=1, max_length=NAME_MAX, pattern=r"^[-._a-zA-Z0-9]+$")
    """Key of the ConfigMap holding the data, e.g. prompts.jsonl."""


class ResourceRequirements(KubeModel):
    """CPU and memory of a container, as in a Pod's resources."""

    limits: dict[str, Quantity] | None = Field(
        default=None, max_length=16, json_schema_extra=cel_rules(NON_NEGATIVE_QUANTITY_RULE)
    )
    """Most of each resource the container may use, e.g. {cpu: "2", memory: 8Gi}; never
    negative."""
    requests: dict[str, Quantity] | None = Field(
        default=None, max_length=16, json_schema_extra=cel_rules(NON_NEGATIVE_QUANTITY_RULE)
    )
    """Resources the scheduler reserves for the container, e.g. {cpu: 500m, memory: 2Gi}; never
    negative."""

    @field_validator("limits", "requests")
    @classmethod
    def _non_negative(
        cls, quantities: dict[str, int | str] | None, info: ValidationInfo
    ) -> dict[str, int | str] | None:
        check_non_negative(f"resources.{info.field_name}", quantities)
        return quantities


class TolerationOperator(StrEnum):
    """Exists (any value) or Equal (the given value)."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """NoSchedule, PreferNoSchedule or NoExecute."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(KubeModel):
    """A taint the engine pods tolerate, as in a Pod's tolerations."""

    key: str | None = Field(default=None, max_length=NAME_MAX)
    """Taint key; empty with operator Exists matches every taint."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    """Exists or Equal."""
    value: str | None = Field(default=None, max_length=DNS_LABEL_MAX)
    """Taint value to match when operator is Equal."""
    effect: TaintEffect | None = None
    """Taint effect to match; empty matches every effect."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """With effect NoExecute: how long the pod stays bound after the taint appears."""
