"""Shared base of the custom resource models and the CEL rule helper.

Every model of a resource's `spec` or `status` derives from `KubeModel`:
camelCase on the wire, snake_case in Python, unknown fields refused (as the
API server refuses them under strict field validation), and the docstring
under each field is its description, so `kubectl explain` shows the same
text a reader of this code sees.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

GROUP = "infergate.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
# Kinds and plurals of the two resources: the CRDs, the API client, the kopf handlers and
# the rendered RBAC rules all name them from here.
INFERENCE_DEPLOYMENT_KIND = "InferenceDeployment"
INFERENCE_DEPLOYMENTS_PLURAL = "inferencedeployments"
PARITY_CHECK_KIND = "ParityCheck"
PARITY_CHECKS_PLURAL = "paritychecks"

# Upper bounds that keep the CEL cost estimate of every rule inside the API
# server's per-rule budget: a rule over an unbounded list or string is
# refused when the CRD is installed.
NAME_MAX = 253
DNS_LABEL_MAX = 63
SHORT_TEXT_MAX = 256
URI_MAX = 2048
MESSAGE_MAX = 32768


class KubeModel(BaseModel):
    """Base of every spec and status model: camelCase aliases, no unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    def to_kube(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def cel(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    message_expression: str | None = None,
    reason: str | None = None,
) -> dict[str, str]:
    """One `x-kubernetes-validations` entry.

    `message` must stand alone (the API server falls back to it when
    `message_expression` fails); `field_path` (e.g. ``.accelerator.kind``)
    makes the error name the offending field rather than the object holding
    the rule.
    """
    entry = {"rule": rule, "message": message}
    if message_expression is not None:
        entry["messageExpression"] = message_expression
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules, for a model config or a field."""
    return {"x-kubernetes-validations": list(rules)}
