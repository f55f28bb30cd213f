"""The InferenceDeployment resource: one served model, pinned engine numerics, canary rollouts."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from infergate.api.base import (
    DNS_LABEL_MAX,
    NAME_MAX,
    SHORT_TEXT_MAX,
    URI_MAX,
    KubeModel,
    cel,
    cel_rules,
)
from infergate.api.common import Condition, ObjectName, ResourceRequirements, Toleration
from infergate.api.enums import (
    ENGINE_ACCELERATOR,
    AcceleratorKind,
    CheckPhase,
    DeploymentPhase,
    DType,
    EngineKind,
    VerdictOutcome,
)
from infergate.api.model_uri import MODEL_URI_FORMS, MODEL_URI_PATTERN, UriScheme, parse_model_uri
from infergate.api.parity_check import ParityCheckTemplate

# An image must be pinned by a tag other than latest, or by digest: the
# revision hash covers the image reference, so a moving reference would let
# what runs change under an unchanged revision.
_IMAGE_NAME = r"([A-Za-z0-9.-]+(:[0-9]+)?/)?([a-z0-9._-]+/)*[a-z0-9._-]+"
_IMAGE_TAG = r":[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_IMAGE_DIGEST = r"@sha256:[a-f0-9]{64}"
IMAGE_PINNED_PATTERN = f"^{_IMAGE_NAME}({_IMAGE_TAG}({_IMAGE_DIGEST})?|{_IMAGE_DIGEST})$"
_IMAGE_PINNED = re.compile(IMAGE_PINNED_PATTERN)
_IMAGE_MESSAGE = (
    "image must be pinned: name:tag (not latest) or name@sha256:<digest>, "
    "e.g. vllm/vllm-openai:v0.32.0"
)

# Flags the renderer sets from typed fields; setting them again in args would
# bypass the pinned value (or, for --config, load unpinned flags from a file).
PINNED_FLAGS: tuple[str, ...] = (
    "--model",
    "--served-model-name",
    "--dtype",
    "--max-model-len",
    "--tensor-parallel-size",
    "-tp",
    "--seed",
    "--host",
    "--port",
    "--generation-config",
    "--hf-overrides",
    "--revision",
    "--engine",
    "--config",
)
_PINNED_FLAGS_CEL = "[" + ", ".join(f"'{flag}'" for flag in PINNED_FLAGS) + "]"
_ARGS_MESSAGE = (
    "args must not set " + ", ".join(PINNED_FLAGS) + ": they are pinned from spec.model and "
    "spec.engine (dtype, maxModelLen, tensorParallelSize, seed, config); set those fields instead"
)

_RESERVED_ENV_PREFIX = "INFERGATE_"
_RESERVED_ENV = ("POD_IP",)
_SIZE_PER_POD_MAX = 16

ArgString = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
LabelKey = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=NAME_MAX + 1 + DNS_LABEL_MAX,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    ),
]
LabelValue = Annotated[str, StringConstraints(max_length=DNS_LABEL_MAX)]
AnnotationValue = Annotated[str, StringConstraints(max_length=4096)]


class ModelSource(KubeModel):
    """The model served: its name for clients and where its weights live."""

    name: str = Field(min_length=1, max_length=SHORT_TEXT_MAX)
    """Model name clients send in requests (served model name), e.g. Qwen/Qwen2.5-7B-Instruct."""
    uri: str = Field(
        min_length=1,
        max_length=URI_MAX,
        json_schema_extra=cel_rules(
            cel(f"self.matches(r'{MODEL_URI_PATTERN}')", f"uri must be one of {MODEL_URI_FORMS}")
        ),
    )
    """Where the weights live: pvc://<claim>/<path>, hf://<org>/<model>[@<revision>],
    s3://<bucket>/<key> (vllm only) or file:///<absolute path>.
    """

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        parse_model_uri(uri)
        return uri


class EnvVar(KubeModel):
    """An environment variable of the engine container."""

    name: str = Field(
        min_length=1, max_length=SHORT_TEXT_MAX, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
    )
    """Variable name; POD_IP and INFERGATE_* are set by infergate."""
    value: str = Field(default="", max_length=4096)
    """Variable value."""


class Engine(KubeModel):
    """The engine and every setting that changes its numerics; all of it is part of the revision."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "self.kind == 'mindformers' || !has(self.paramsDtype) "
                "|| self.paramsDtype == self.dtype",
                "paramsDtype applies to mindformers only: vllm loads weights in dtype; "
                "leave paramsDtype unset or equal to dtype",
                field_path=".paramsDtype",
            ),
        )
    )

    kind: EngineKind
    """Inference engine: vllm (runs on nvidia-gpu) or mindformers (runs on ascend-npu)."""
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches(r'{IMAGE_PINNED_PATTERN}') && !self.endsWith(':latest')",
                _IMAGE_MESSAGE,
            )
        ),
    )
    """Engine image, pinned by tag or digest. Unset: infergate's default for the engine kind."""
    dtype: DType
    """Compute dtype, required and explicit: float32, float16 or bfloat16 (never auto)."""
    params_dtype: DType | None = None
    """Dtype weights are loaded in (MindFormers param_init_type): float32, float16 or bfloat16.
    Unset: same as dtype.
    """
    max_model_len: int = Field(ge=16, le=1048576)
    """Longest sequence (prompt plus output) in tokens; pinned instead of taken from the model
    config.
    """
    tensor_parallel_size: int = Field(default=1, ge=1, le=_SIZE_PER_POD_MAX)
    """Devices one model replica is split across (tensor parallelism)."""
    seed: int = Field(default=42, ge=0, le=2**32 - 1)
    """Engine random seed."""
    deterministic: bool = True
    """Deterministic kernels: vLLM batch invariance (VLLM_BATCH_INVARIANT=1); MindSpore
    deterministic mode with deterministic HCCL/LCCL reductions.
    """
    config: dict[str, Any] = Field(
        default_factory=dict,
        max_length=128,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    """Pinned model-config overrides in the engine's own names, e.g. {rms_norm_eps: 1.0e-6}: vLLM
    passes them as --hf-overrides, MindFormers merges them into model_config.
    """
    args: list[ArgString] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra=cel_rules(
            cel(
                f"self.all(a, !(a in {_PINNED_FLAGS_CEL}) && "
                f"!{_PINNED_FLAGS_CEL}.exists(f, a.startsWith(f + '=')))",
                _ARGS_MESSAGE,
            )
        ),
    )
    """Extra engine command-line arguments, e.g. [--enforce-eager]; flags pinned by other fields are
    refused.
    """
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            **cel_rules(
                cel(
                    "self.all(e, e.name != 'POD_IP' && !e.name.startsWith('INFERGATE_'))",
                    "env must not set POD_IP or INFERGATE_* variables: infergate sets them",
                )
            ),
        },
    )
    """Extra environment of the engine container, e.g. an attention backend; part of the revision.
    """

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, image: str | None) -> str | None:
        if image is not None and (not _IMAGE_PINNED.match(image) or image.endswith(":latest")):
            raise ValueError(f"engine.image: {image!r} is not allowed; {_IMAGE_MESSAGE}")
        return image

    @field_validator("args")
    @classmethod
    def _no_pinned_flags(cls, args: list[str]) -> list[str]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in PINNED_FLAGS:
                raise ValueError(f"engine.args: {arg!r} is not allowed; {_ARGS_MESSAGE}")
        return args

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        names: set[str] = set()
        for var in env:
            if var.name in _RESERVED_ENV or var.name.startswith(_RESERVED_ENV_PREFIX):
                raise ValueError(
                    f"engine.env: {var.name!r} is not allowed; POD_IP and INFERGATE_* are set "
                    "by infergate"
                )
            if var.name in names:
                raise ValueError(f"engine.env: {var.name!r} appears twice; names must be unique")
            names.add(var.name)
        return env

    @model_validator(mode="after")
    def _params_dtype(self) -> Self:
        if (
            self.kind is EngineKind.VLLM
            and self.params_dtype is not None
            and self.params_dtype != self.dtype
        ):
            raise ValueError(
                f"engine.paramsDtype: {self.params_dtype.value!r} is not allowed with vllm, "
                f"which loads weights in dtype ({self.dtype.value}); leave it unset or equal "
                "to dtype"
            )
        return self

    @property
    def effective_params_dtype(self) -> DType:
        """Dtype the weights are loaded in."""
        return self.params_dtype or self.dtype


class Accelerator(KubeModel):
    """Accelerator preset: device resource, node selection and tolerations."""

    kind: AcceleratorKind
    """nvidia-gpu (resource nvidia.com/gpu, node label nvidia.com/gpu.present=true) or ascend-npu
    (resource huawei.com/Ascend910, node label accelerator=huawei-Ascend910).
    """
    count: int = Field(default=1, ge=1, le=_SIZE_PER_POD_MAX)
    """Devices per tensor-parallel rank (normally 1); a pod requests count x
    engine.tensorParallelSize devices.
    """


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
    """PriorityClass of the engine pods."""
    service_account_name: ObjectName | None = None
    """ServiceAccount of the engine pods (e.g. one allowed to read model storage)."""
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
        )
    )

    canary_replicas: int = Field(default=1, ge=1, le=64)
    """Replicas of a new revision while it is checked; at most spec.replicas. Its traffic share is
    canaryReplicas / (replicas + canaryReplicas).
    """
    parity: ParityCheckTemplate | None = None
    """The parity check run against each canary (baseline: stable, candidate: canary). Unset: no
    check, so no automatic promotion.
    """
    auto_promote: bool = True
    """Promote the canary when its parity check passes."""
    auto_rollback: bool = True
    """Remove the canary and mark its revision rejected when its check fails or errs."""
    progress_deadline_seconds: int = Field(default=1800, ge=60, le=86400)
    """Seconds a canary may take to become Available before the rollout counts as failed."""

    @model_validator(mode="after")
    def _promote_needs_parity(self) -> Self:
        if self.auto_promote and self.parity is None:
            raise ValueError(
                "rollout.autoPromote: true is not allowed without rollout.parity; add a parity "
                "template or set autoPromote: false to promote by hand"
            )
        return self


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
            f"self.accelerator.count * self.engine.tensorParallelSize <= {_SIZE_PER_POD_MAX}",
            f"accelerator.count x engine.tensorParallelSize must be at most {_SIZE_PER_POD_MAX} "
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
    replicas: int = Field(default=1, ge=0, le=1000)
    """Engine pods of the stable revision."""
    rollout: Rollout
    """Canary size, parity gate, promotion and rollback. Required: automatic promotion needs a
    parity template, so the policy is always stated (at least `autoPromote: false`)."""
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
        if devices > _SIZE_PER_POD_MAX:
            raise ValueError(
                f"accelerator.count x engine.tensorParallelSize is {devices}; at most "
                f"{_SIZE_PER_POD_MAX} devices fit one pod"
            )
        scheme = parse_model_uri(self.model.uri).scheme
        if scheme is UriScheme.S3 and self.engine.kind is not EngineKind.VLLM:
            raise ValueError(
                f"model.uri: {self.model.uri!r} is not allowed with {self.engine.kind.value}: "
                "s3:// is streamed by vllm only; use pvc://, hf:// or file://"
            )
        parity = self.rollout.parity
        if parity is not None and parity.sampling.max_tokens >= self.engine.max_model_len:
            raise ValueError(
                f"rollout.parity.sampling.maxTokens ({parity.sampling.max_tokens}) must be "
                f"below engine.maxModelLen ({self.engine.max_model_len})"
            )
        return self


class RevisionRecord(KubeModel):
    """A revision this deployment has run or tried."""

    hash: str = Field(max_length=64)
    """Revision hash (10 hex digits), the infergate.io/revision label of its objects."""
    engine: EngineKind
    """Engine kind of the revision."""
    dtype: DType
    """Compute dtype of the revision."""
    accelerator: AcceleratorKind | None = None
    """Accelerator kind of the revision."""
    image: str | None = Field(default=None, max_length=512)
    """Engine image of the revision."""
    verdict: VerdictOutcome | None = None
    """Outcome of its parity check: Passed, Failed, Error, Inconclusive or Pending."""
    metrics: dict[str, float] | None = Field(default=None, max_length=512)
    """Suite-level metrics of its parity check."""
    parity_check: ObjectName | None = None
    """Name of its ParityCheck."""
    rejected: bool = False
    """True when its check failed or erred: not retried until the spec changes."""
    message: str | None = Field(default=None, max_length=4096)
    """Why it was rejected or rolled back, for people."""
    created_at: datetime | None = None
    """When the revision was first rendered."""
    promoted_at: datetime | None = None
    """When it became stable."""


class LastParityCheck(KubeModel):
    """The most recent parity check of this deployment."""

    name: ObjectName
    """Name of the ParityCheck."""
    revision: str | None = Field(default=None, max_length=64)
    """Candidate revision it checked."""
    phase: CheckPhase | None = None
    """Pending, Running, Passed, Failed or Error."""
    verdict: VerdictOutcome | None = None
    """Passed, Failed, Error, Inconclusive, or Pending while it runs."""
    completion_time: datetime | None = None
    """When it finished."""


class ServiceEndpoint(KubeModel):
    """A Service clients or the runner can call."""

    service: ObjectName
    """Service name, in the deployment's namespace."""
    port: int = Field(ge=1, le=65535)
    """Service port of the OpenAI-compatible API."""
    revision: str | None = Field(default=None, max_length=64)
    """Revision behind it; unset for the stable Service, which selects every revision's pods."""


class Endpoints(KubeModel):
    """Where the deployment answers."""

    stable: ServiceEndpoint | None = None
    """The stable Service (clients call this one)."""
    canary: ServiceEndpoint | None = None
    """The canary revision's own Service (the runner calls this one)."""


class InferenceDeploymentStatus(KubeModel):
    """Observed state of an InferenceDeployment, written by the operator."""

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation last acted on."""
    phase: DeploymentPhase | None = None
    """Stable, Progressing, Verifying, Promoting, RolledBack or Failed (derived from conditions)."""
    stable_revision: str | None = Field(default=None, max_length=64)
    """Revision serving as stable."""
    canary_revision: str | None = Field(default=None, max_length=64)
    """Revision being rolled out, if any."""
    revisions: list[RevisionRecord] = Field(default_factory=list, max_length=64)
    """Revisions run or tried, newest last."""
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Available, Progressing, ParityPassed, ConfigDrifted, Degraded."""
    last_parity_check: LastParityCheck | None = None
    """The most recent parity check."""
    traffic_mechanism: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """How traffic is split between stable and canary, e.g. ReplicaRatio (the stable Service selects
    both revisions' pods).
    """
    endpoints: Endpoints | None = None
    """Services of the stable and canary revisions."""
    replicas: int | None = Field(default=None, ge=0)
    """Engine pods of all revisions."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Ready engine pods of all revisions."""
    selector: str | None = Field(default=None, max_length=1024)
    """Label selector of the pods, for the scale subresource."""


# Revision objects are named `<name>-<revision>` (10 hex digits) and a Service
# name is a DNS-1035 label of at most 63 characters.
DEPLOYMENT_NAME_MAX = 63 - 11
DEPLOYMENT_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DEPLOYMENT_NAME_MESSAGE = (
    f"metadata.name must be a DNS-1035 label of at most {DEPLOYMENT_NAME_MAX} characters "
    "(lower-case letters, digits and '-', starting with a letter): the revision Service is "
    "named <name>-<revision>"
)


def check_deployment_name(name: str) -> str:
    """Refuse names whose revision objects could not be created."""
    if len(name) > DEPLOYMENT_NAME_MAX or not re.match(DEPLOYMENT_NAME_PATTERN, name):
        raise ValueError(f"metadata.name: {name!r} is not allowed; {DEPLOYMENT_NAME_MESSAGE}")
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
            check_deployment_name(name)
        return self
