"""The chart's values as a typed model: values.yaml, values.schema.json and the values
table of the chart's README are all written from it, so the three cannot disagree.

Defaults that manifests/ decides (the operator's image, arguments, environment,
resources and replica count) are filled in by the generator from the kustomize build;
the rest are the chart's own. Every value is read by a template: a test renders each
one and looks for its effect.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

JSON = dict[str, Any]


class _Strict(BaseModel):
    """A values object: keys in camelCase, and an unknown key is refused (a typo in
    `--set` would otherwise be ignored silently)."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Image(_Strict):
    repository: str = Field(min_length=1, description="The operator's image repository.")
    tag: str = Field(description="Its tag; empty: the chart's appVersion.")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        description="imagePullPolicy of the operator and of the CRD upgrade Job."
    )


class PullSecret(_Strict):
    name: str = Field(min_length=1, description="A Secret of type dockerconfigjson.")


class Runner(_Strict):
    image: str = Field(
        default="", description="The parity runner Jobs' image; empty: the operator's."
    )
    service_account_annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Annotations of every parity runner's ServiceAccount, in the release namespace "
            "(`--runner-service-account-annotation`): a cloud identity for a golden store "
            "with `credentials: Environment`, e.g. eks.amazonaws.com/role-arn "
            "(docs/golden-records.md)."
        ),
    )


class Rbac(_Strict):
    scope: Literal["cluster", "namespace"] = Field(
        default="cluster",
        description=(
            "cluster: ClusterRoles (every namespace, or the patterns of watchNamespaces); "
            "namespace: a Role and RoleBinding in each of watchNamespaces (exact names) "
            "and one in the release namespace for the parity runners' Jobs, ServiceAccounts "
            "and NetworkPolicies, no cluster-wide grant to the operator."
        ),
    )


class ServiceAccount(_Strict):
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Annotations of the operator's ServiceAccount (cloud identity: "
            "eks.amazonaws.com/role-arn, iam.gke.io/gcp-service-account, ...)."
        ),
    )


class Operator(_Strict):
    replicas: int = Field(
        ge=1,
        description=(
            "Operator pods; one acts (it holds the leader Lease), the others take over "
            "within the Lease's 15 seconds. Above 1, a PodDisruptionBudget keeps one "
            "running through a node drain."
        ),
    )
    args: list[str] = Field(description="The operator's arguments, as in manifests/.")
    extra_args: list[str] = Field(default_factory=list, description="Arguments appended.")
    env: list[JSON] = Field(description="The operator's environment, as in manifests/.")
    extra_env: list[JSON] = Field(
        default_factory=list,
        description="Environment appended (also given to the CRD upgrade Job: proxies, ...).",
    )
    resources: JSON = Field(description="The operator container's requests and limits.")
    pod_annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations added to the operator's pods."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector of the operator's and the hook's pods."
    )
    tolerations: list[JSON] = Field(
        default_factory=list, description="tolerations of the operator's and the hook's pods."
    )
    affinity: JSON = Field(
        default_factory=dict, description="affinity of the operator's and the hook's pods."
    )
    priority_class_name: str = Field(
        default="", description="priorityClassName of the operator's pods; empty: none."
    )


class Crds(_Strict):
    upgrade: bool = Field(
        default=True,
        description=(
            "A pre-upgrade hook Job (the new operator image, `infergate crds --apply`) "
            "replaces the CRDs with this version's; Helm itself installs crds/ on the "
            "first install only. false: you upgrade the CRDs yourself (crds/, GitOps)."
        ),
    )


class Admission(_Strict):
    enabled: bool = Field(
        default=True,
        description=(
            "The admission policies the API server enforces (manifests/admission, "
            "docs/admission.md). The MutatingAdmissionPolicy renders only where the cluster "
            "serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes "
            "1.36+; `helm template` decides by --kube-version/--api-versions)."
        ),
    )


class Switch(_Strict):
    enabled: bool = Field(description="Render it.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels added to its objects (they win over theirs)."
    )


class Monitoring(_Strict):
    enabled: bool = Field(
        default=True,
        description="false leaves out every monitoring object below, whatever their switches.",
    )
    dashboard: Switch = Field(
        default=Switch(enabled=True),
        description='The Grafana dashboard ConfigMap (label grafana_dashboard: "1").',
    )
    service_monitor: Switch = Field(
        default=Switch(enabled=False),
        description=(
            "A Prometheus Operator ServiceMonitor for the operator's metrics (needs the "
            "monitoring.coreos.com CRDs; set labels.release to what your Prometheus selects)."
        ),
    )
    prometheus_rule: Switch = Field(
        default=Switch(enabled=False),
        description="The alerting rules as a Prometheus Operator PrometheusRule.",
    )


class Values(_Strict):
    fullname_override: str = Field(
        default="",
        max_length=40,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
        description="Prefix of every object name (default infergate); two releases need two.",
    )
    image: Image = Field(description="The operator's image; the runner Jobs use it too.")
    image_pull_secrets: list[PullSecret] = Field(
        default_factory=list,
        description=(
            "Pull secrets of every pod of infergate's image: the operator's, the CRD upgrade "
            "Job's, the parity runners' and their ServiceAccounts' (all in the release "
            "namespace), and the probe and mirror pods' in the served namespaces "
            "(`--image-pull-secret`; a Secret missing there is skipped by the kubelet). "
            "Engine pods take theirs from placement.imagePullSecrets."
        ),
    )
    runner: Runner = Field(default_factory=Runner, description="The parity runner Jobs.")
    rbac: Rbac = Field(default_factory=Rbac, description="What the operator is granted.")
    watch_namespaces: list[str] = Field(
        default_factory=list,
        description=(
            "Namespaces the operator watches (empty: all; needs rbac.scope=cluster); never "
            "the release namespace, where the parity runners run (the chart refuses it)."
        ),
    )
    service_account: ServiceAccount = Field(
        default_factory=ServiceAccount, description="The operator's ServiceAccount."
    )
    operator: Operator = Field(description="The operator Deployment.")
    crds: Crds = Field(default_factory=Crds, description="The CustomResourceDefinitions.")
    admission: Admission = Field(default_factory=Admission, description="Admission policies.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="Monitoring objects.")
    network_policy: Switch = Field(
        default=Switch(enabled=False),
        description="A NetworkPolicy around the operator's pods.",
    )


# Kustomize components under manifests/, by directory name: where their switch lives.
COMPONENT_VALUES = {
    "servicemonitor": "monitoring.serviceMonitor",
    "prometheusrule": "monitoring.prometheusRule",
    "networkpolicy": "networkPolicy",
}
# Base objects with this app.kubernetes.io/component label are switched by this value
# (path, and whether it has `labels` to add to them).
BASE_SWITCHES = {"dashboard": ("monitoring.dashboard", True), "admission": ("admission", False)}


def switch_condition(path: str) -> str:
    """The template condition of a switch under `path` (a parent `enabled` counts too)."""
    parts = path.split(".")
    conditions = [f"$.Values.{'.'.join(parts[:i])}.enabled" for i in range(1, len(parts) + 1)]
    return conditions[0] if len(conditions) == 1 else f"and {' '.join(conditions)}"


# -- the three files --------------------------------------------------------------------------


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=1000)


def values_yaml(values: Values, header: str) -> str:
    """values.yaml: every key with its description as a comment above it."""
    lines: list[str] = []
    _write_model(values, 0, lines)
    return header + "\n".join(lines) + "\n"


def _write_model(model: BaseModel, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        value = getattr(model, name)
        if field.description:
            lines.extend(f"{pad}# {line}" for line in _wrap(field.description, 96 - indent))
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{key}:")
            _write_model(value, indent + 2, lines)
            continue
        dumped = _dump(value if not isinstance(value, list) else [_plain(v) for v in value])
        if isinstance(value, dict | list) and value:
            lines.append(f"{pad}{key}:")
            lines.extend(f"{pad}  {line}" for line in dumped.rstrip("\n").splitlines())
        else:
            scalar = dumped.removesuffix("\n...\n").rstrip("\n")
            lines.append(f"{pad}{key}: {scalar}")


def _plain(value: Any) -> Any:
    return value.model_dump(by_alias=True) if isinstance(value, BaseModel) else value


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


def values_schema(values: Values) -> str:
    """values.schema.json: the model's JSON schema with this install's defaults."""
    schema = Values.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "infergate chart values"
    defaults = values.model_dump(by_alias=True)
    for key, prop in schema["properties"].items():
        prop.setdefault("default", defaults[key])
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def values_table(values: Values) -> str:
    """The README's table: every leaf value, its default and what it does."""
    rows = ["| value | default | what |", "|---|---|---|"]
    _table_rows(values, "", "", rows)
    return "\n".join(rows) + "\n"


def _table_rows(model: BaseModel, prefix: str, parent: str, rows: list[str]) -> None:
    for name, field in type(model).model_fields.items():
        key = prefix + (field.alias or name)
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _table_rows(value, key + ".", field.description or "", rows)
            continue
        shown = json.dumps([_plain(v) for v in value] if isinstance(value, list) else value)
        shown = "as in manifests/ (values.yaml)" if len(shown) > 60 else f"`{shown}`"
        description = field.description or ""
        if isinstance(model, Switch) and parent:
            description = f"{description} {parent}"
        description = description.replace("|", "\\|")
        rows.append(f"| `{key}` | {shown} | {description} |")


def leaf_paths(values: Values) -> list[str]:
    """Dotted paths of every value that is not an object of the model."""
    paths: list[str] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            key = prefix + (field.alias or name)
            if isinstance(value, BaseModel):
                walk(value, key + ".")
            else:
                paths.append(key)

    walk(values, "")
    return paths
