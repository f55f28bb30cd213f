"""The InferenceDeployment resource: one served model, pinned engine numerics, canary rollouts."""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from infergate.api.base import (
    DNS_LABEL_MAX,
    NAME_MAX,
    KubeModel,
    cel,
    cel_rules,
)
from infergate.api.common import (
    LocalObjectReference,
    ObjectName,
    ResourceRequirements,
    Toleration,
)
from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.drift import RolloutParity
from infergate.api.engine import SIZE_PER_POD_MAX, Accelerator, Engine, ModelSource
from infergate.api.enums import (
    ENGINE_ACCELERATOR,
    EngineKind,
)
from infergate.api.model_uri import UriScheme, parse_model_uri
from infergate.api.shadow import CheckSource, Mirror
from infergate.api.topology import ACCELERATORS_PER_NODE_MAX, Topology, topology_problem
from infergate.api.traffic import Traffic

LabelKey = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=NAME_MAX + 1 + DNS_LABEL_MAX,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    ),
]
# A day: longer keeps two full revisions' accelerators for no request.
SCALE_DOWN_DELAY_MAX = 86400
REPLICAS_MAX = 1000
LabelValue = Annotated[str, StringConstraints(max_length=DNS_LABEL_MAX)]
AnnotationValue = Annotated[str, StringConstraints(max_length=4096)]


class Placement(KubeModel):
    """Where engine pods may run, beyond the accelerator preset; not part of the revision."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    """Extra node labels to require, merged over the accelerator preset's."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Extra taints to tolerate, added to the accelerator preset's."""
    affinity: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """Pod affinity and anti-affinity, as in a Pod's spec.affinity."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of the engine pods (it must exist; the API server refuses the pods, and
    the Deployment shows why, otherwise)."""
    service_account_name: ObjectName | None = None
    """ServiceAccount of the engine pods (e.g. one allowed to read model storage: annotate it
    for your cloud's workload identity, such as eks.amazonaws.com/role-arn for IRSA). It must
    be listed in the namespace's infergate.io/engine-service-accounts annotation."""
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Secrets of type kubernetes.io/dockerconfigjson, in the same namespace, the kubelet pulls
    the engine image with (a private registry or mirror); added to those of the pods'
    ServiceAccount."""
    pod_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=32,
        json_schema_extra=cel_rules(
            cel(
                "self.all(k, !k.startsWith('infergate.io/') "
                "&& !k.startsWith('app.kubernetes.io/'))",
                "podLabels must not set infergate.io/* or app.kubernetes.io/* labels: "
                "infergate sets them to select its pods",
            )
        ),
    )
    """Extra labels on engine pods."""
    pod_annotations: dict[LabelKey, AnnotationValue] = Field(default_factory=dict, max_length=32)
    """Extra annotations on engine pods."""

    @field_validator("image_pull_secrets")
    @classmethod
    def _unique_pull_secrets(
        cls, secrets: list[LocalObjectReference]
    ) -> list[LocalObjectReference]:
        names = [ref.name for ref in secrets]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(
                    f"placement.imagePullSecrets: {name!r} appears twice; names must be unique"
                )
        return secrets

    @field_validator("pod_labels")
    @classmethod
    def _no_reserved_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:
            if key.startswith(("infergate.io/", "app.kubernetes.io/")):
                raise ValueError(
                    f"placement.podLabels: {key!r} is not allowed; infergate.io/* and "
                    "app.kubernetes.io/* labels are set by infergate"
                )
        return labels


class Rollout(KubeModel):
    """How a new revision goes out: canary size, parity gate, promotion and rollback."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "!self.autoPromote || has(self.parity)",
                "autoPromote needs parity (a suite to check the canary with); "
                "add rollout.parity or set autoPromote: false to promote by hand",
                field_path=".autoPromote",
            ),
            cel(
                "!has(self.parity) || !has(self.parity.source) || self.parity.source != 'shadow' "
                "|| has(self.mirror)",
                "parity.source shadow needs mirror: the shadow check scores requests the mirror "
                "copies from stable",
                field_path=".mirror",
            ),
        )
    )

    canary_replicas: int = Field(default=1, ge=1, le=64)
    """Replicas of a new revision while it is checked; at most spec.replicas. With traffic mode
    replicas its share of live requests is canaryReplicas / (replicas + canaryReplicas).
    """
    parity: RolloutParity | None = None
    """The parity check run against each canary (baseline: stable, candidate: canary), and the
    drift watch of the stable revision (watch, onDrift). Unset: no check, so no automatic
    promotion, and no drift watch.
    """
    auto_promote: bool = True
    """Promote the canary when its parity check passes."""
    auto_rollback: bool = True
    """Remove the canary and mark its revision rejected when its check fails or errs."""
    progress_deadline_seconds: int = Field(default=1800, ge=60, le=86400)
    """Seconds a canary may take to become Available before the rollout counts as failed."""
    scale_down_delay_seconds: int = Field(default=30, ge=0, le=SCALE_DOWN_DELAY_MAX)
    """Seconds the previous stable revision keeps its pods after the stable Service (and the
    HTTPRoute, in gateway mode) was seen moved to the new stable, so requests already on their
    way to it still find it; then it is scaled to 0 (0..86400, default 30, as Argo Rollouts'
    scaleDownDelaySeconds). A promotion first scales the new stable to `replicas` and waits
    for every pod to be available, then moves the traffic, then waits this long."""
    traffic: Traffic = Field(default_factory=Traffic, json_schema_extra={"default": {}})
    """Which live requests reach a canary before its check passes (dark by default: none), and how
    traffic moves after (promotion, or gateway steps)."""
    mirror: Mirror | None = None
    """A mirroring proxy in front of the stable Service (`<name>-mirror`), for shadow checks
    (parity.source shadow). Unset: no mirror."""

    @model_validator(mode="after")
    def _shadow_needs_mirror(self) -> Self:
        if (
            self.parity is not None
            and self.parity.source is CheckSource.SHADOW
            and self.mirror is None
        ):
            raise ValueError(
                "rollout.parity.source: 'shadow' is not allowed without rollout.mirror; the "
                "shadow check scores the requests the mirror copies from stable"
            )
        return self

    @model_validator(mode="after")
    def _promote_needs_parity(self) -> Self:
        if self.auto_promote and self.parity is None:
            raise ValueError(
                "rollout.autoPromote: true is not allowed without rollout.parity; add a parity "
                "template or set autoPromote: false to promote by hand"
            )
        return self


_WORLD = (
    "self.accelerator.count * self.engine.tensorParallelSize"
    " * self.topology.pipelineParallelSize * self.topology.dataParallelSize"
)


def _topology_rules() -> list[dict[str, str]]:
    """The CEL form of `api.topology.topology_problem` (the same rules, in order)."""
    return [
        cel(
            "!has(self.topology) || self.topology.nodes == 1 "
            "|| has(self.topology.acceleratorsPerNode)",
            "topology.acceleratorsPerNode is required when topology.nodes is above 1: each pod "
            "of the group requests that many devices",
            field_path=".topology.acceleratorsPerNode",
        ),
        cel(
            "!has(self.topology) || !has(self.topology.acceleratorsPerNode) || "
            f"{_WORLD} == self.topology.nodes * self.topology.acceleratorsPerNode",
            "topology: nodes x acceleratorsPerNode must equal accelerator.count x "
            "engine.tensorParallelSize x pipelineParallelSize x dataParallelSize: every device "
            "of the group holds one rank",
            field_path=".topology",
        ),
        cel(
            "!has(self.topology) || has(self.topology.acceleratorsPerNode) || "
            f"{_WORLD} <= {ACCELERATORS_PER_NODE_MAX}",
            "topology: accelerator.count x engine.tensorParallelSize x pipelineParallelSize x "
            f"dataParallelSize must be at most {ACCELERATORS_PER_NODE_MAX} devices in one pod; "
            "set topology.nodes and topology.acceleratorsPerNode",
            field_path=".topology",
        ),
        cel(
            "!has(self.topology) || !self.topology.expertParallel || ("
            "self.engine.kind == 'vllm' "
            "? self.engine.tensorParallelSize * self.topology.dataParallelSize > 1 "
            ": self.topology.dataParallelSize > 1)",
            "topology.expertParallel needs more than one rank to spread experts over: "
            "tensorParallelSize x dataParallelSize above 1 for vllm, dataParallelSize above 1 "
            "for mindformers",
            field_path=".topology.expertParallel",
        ),
    ]


def _spec_rules() -> dict[str, Any]:
    pairs = " || ".join(
        f"(self.engine.kind == '{engine.value}' && self.accelerator.kind == '{accel.value}')"
        for engine, accel in ENGINE_ACCELERATOR.items()
    )
    return cel_rules(
        cel(
            pairs,
            "engine.kind and accelerator.kind must agree: vllm runs on nvidia-gpu, "
            "mindformers on ascend-npu",
            field_path=".accelerator.kind",
            message_expression=(
                "'engine.kind ' + self.engine.kind + ' cannot run on accelerator.kind ' + "
                "self.accelerator.kind + ': vllm runs on nvidia-gpu, mindformers on ascend-npu'"
            ),
        ),
        cel(
            "self.replicas == 0 || self.rollout.canaryReplicas <= self.replicas",
            # No messageExpression: string(int) is estimated at an unbounded size and
            # pushes the CRD past the API server's CEL cost budget.
            "rollout.canaryReplicas must not exceed replicas (unless replicas is 0)",
            field_path=".rollout.canaryReplicas",
        ),
        cel(
            f"self.accelerator.count * self.engine.tensorParallelSize <= {SIZE_PER_POD_MAX}",
            f"accelerator.count x engine.tensorParallelSize must be at most {SIZE_PER_POD_MAX} "
            "devices: one pod runs on one node",
            field_path=".accelerator.count",
        ),
        cel(
            "self.engine.kind == 'vllm' || !self.model.uri.startsWith('s3://')",
            "s3:// is streamed by vllm only; mindformers loads from pvc://, hf:// or file://",
            field_path=".model.uri",
        ),
        cel(
            "!has(self.rollout.parity) || "
            "self.rollout.parity.sampling.maxTokens < self.engine.maxModelLen",
            "rollout.parity.sampling.maxTokens must be below engine.maxModelLen",
            field_path=".rollout.parity.sampling.maxTokens",
        ),
        *_topology_rules(),
    )


class InferenceDeploymentSpec(KubeModel):
    """Desired state: model, engine numerics, accelerator, size and rollout policy."""

    model_config = ConfigDict(json_schema_extra=_spec_rules())

    model: ModelSource
    """The model served and where its weights live."""
    engine: Engine
    """Engine and its pinned numerics."""
    accelerator: Accelerator
    """Accelerator preset the engine runs on."""
    replicas: int = Field(default=1, ge=0, le=REPLICAS_MAX)
    """Engine pods of the stable revision."""
    rollout: Rollout
    """Canary size, parity gate, promotion and rollback. Required: automatic promotion needs a
    parity template, so the policy is always stated (at least `autoPromote: false`)."""
    topology: Topology | None = None
    """Nodes per replica and the engine's parallel layout (pipeline, data, expert parallel);
    part of the revision. Unset: one pod per replica."""
    revision_history_limit: int = Field(default=5, ge=1, le=50)
    """Old revisions kept (scaled to zero) for rollback."""
    placement: Placement = Field(default_factory=Placement, json_schema_extra={"default": {}})
    """Extra node selection, tolerations, affinity and pod metadata; not part of the revision."""
    resources: ResourceRequirements | None = None
    """CPU and memory of the engine container (accelerators come from accelerator); not part of the
    revision.
    """

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        expected = ENGINE_ACCELERATOR[self.engine.kind]
        if self.accelerator.kind is not expected:
            raise ValueError(
                f"accelerator.kind: {self.accelerator.kind.value!r} is not allowed with "
                f"engine.kind {self.engine.kind.value!r}: vllm runs on nvidia-gpu, "
                "mindformers on ascend-npu"
            )
        if self.replicas != 0 and self.rollout.canary_replicas > self.replicas:
            raise ValueError(
                f"rollout.canaryReplicas ({self.rollout.canary_replicas}) must not exceed "
                f"replicas ({self.replicas})"
            )
        devices = self.accelerator.count * self.engine.tensor_parallel_size
        if devices > SIZE_PER_POD_MAX:
            raise ValueError(
                f"accelerator.count x engine.tensorParallelSize is {devices}; at most "
                f"{SIZE_PER_POD_MAX} devices fit one pod"
            )
        scheme = parse_model_uri(self.model.uri).scheme
        if scheme is UriScheme.S3 and self.engine.kind is not EngineKind.VLLM:
            raise ValueError(
                f"model.uri: {self.model.uri!r} is not allowed with {self.engine.kind.value}: "
                "s3:// is streamed by vllm only; use pvc://, hf:// or file://"
            )
        problem = topology_problem(
            self.layout,
            engine=self.engine.kind,
            accelerator_count=self.accelerator.count,
            tensor_parallel_size=self.engine.tensor_parallel_size,
        )
        if problem is not None:
            raise ValueError(problem)
        parity = self.rollout.parity
        if parity is not None and parity.sampling.max_tokens >= self.engine.max_model_len:
            raise ValueError(
                f"rollout.parity.sampling.maxTokens ({parity.sampling.max_tokens}) must be "
                f"below engine.maxModelLen ({self.engine.max_model_len})"
            )
        return self

    @property
    def layout(self) -> Topology:
        """The topology, the one-node default when unset."""
        return self.topology if self.topology is not None else Topology()


# Revision objects are named `<name>-<revision>` (10 hex digits) and a Service
# name is a DNS-1035 label of at most 63 characters.
DEPLOYMENT_NAME_MAX = 63 - 11
DEPLOYMENT_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DEPLOYMENT_NAME_MESSAGE = (
    f"metadata.name must be a DNS-1035 label of at most {DEPLOYMENT_NAME_MAX} characters "
    "(lower-case letters, digits and '-', starting with a letter): the revision Service is "
    "named <name>-<revision>"
)


# A multi-node revision's LeaderWorkerSet is `<name>-<revision>-group` (render.labels
# .group_set_name: not `<name>-<revision>`, which its headless Service would then share
# with the revision Service). The LWS controller names each group's worker StatefulSet
# `<lws>-<group index>` (an index below REPLICAS_MAX: at most 3 digits), and the StatefulSet
# controller labels every pod it makes `controller-revision-hash: <statefulset>-<hash>`
# (the hash up to 10 characters), a label value of at most 63 characters: a StatefulSet
# named longer than 52 gets no pods (kubernetes/kubernetes#64023). So:
# len(name) + 11 + 6 + 1 + 3 <= 52. Leader and worker pods (`<lws>-<group>`,
# `<lws>-<group>-<worker>`) are then valid hostnames too.
STATEFUL_SET_NAME_MAX = 63 - 11
GROUP_DEPLOYMENT_NAME_MAX = (
    STATEFUL_SET_NAME_MAX - 11 - len("-group") - 1 - len(str(REPLICAS_MAX - 1))
)
GROUP_DEPLOYMENT_NAME_MESSAGE = (
    f"metadata.name must be at most {GROUP_DEPLOYMENT_NAME_MAX} characters when "
    "spec.topology.nodes is above 1: each group's worker StatefulSet is named "
    "<name>-<revision>-group-<group index>, and a StatefulSet's pods are created only while "
    f"its name has at most {STATEFUL_SET_NAME_MAX} characters"
)


def check_deployment_name(name: str, *, multi_node: bool = False) -> str:
    """Refuse names whose revision objects (with `multi_node`, a group's) could not be
    created."""
    # fullmatch, as RE2 matches the CRD's rule: Python's `$` also passes a final newline.
    if len(name) > DEPLOYMENT_NAME_MAX or not re.fullmatch(DEPLOYMENT_NAME_PATTERN, name):
        raise ValueError(f"metadata.name: {name!r} is not allowed; {DEPLOYMENT_NAME_MESSAGE}")
    if multi_node and len(name) > GROUP_DEPLOYMENT_NAME_MAX:
        raise ValueError(f"metadata.name: {name!r} is not allowed; {GROUP_DEPLOYMENT_NAME_MESSAGE}")
    return name


class InferenceDeployment(KubeModel):
    """An InferenceDeployment as stored by the API server."""

    api_version: str = "infergate.io/v1alpha1"
    """infergate.io/v1alpha1."""
    kind: str = "InferenceDeployment"
    """InferenceDeployment."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Standard object metadata."""
    spec: InferenceDeploymentSpec
    """Desired state."""
    status: InferenceDeploymentStatus | None = None
    """Observed state, written by the operator."""

    @model_validator(mode="after")
    def _name(self) -> Self:
        name = self.metadata.get("name")
        if isinstance(name, str):
            check_deployment_name(name, multi_node=self.spec.layout.multi_node)
        return self
