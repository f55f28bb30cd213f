"""What runs: the model, the engine with its pinned numerics, and the accelerator.

Every field here is part of the revision hash (see `infergate.render.revision`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from infergate.api.base import SHORT_TEXT_MAX, URI_MAX, KubeModel, cel, cel_rules
from infergate.api.engine_env import RESERVED_ENV, RESERVED_ENV_PREFIX, EnvVar
from infergate.api.enums import AcceleratorKind, DType, EngineKind
from infergate.api.model_uri import (
    MODEL_URI_FORMS,
    MODEL_URI_PATTERN,
    MODEL_URI_TRAVERSAL_MESSAGE,
    MODEL_URI_TRAVERSAL_PATTERN,
    parse_model_uri,
)
from infergate.api.pinned import (
    ARGS_MESSAGE,
    CONFIG_MESSAGE,
    CONTROL_CHARACTER_PATTERN,
    CONTROL_MESSAGE,
    MINDFORMERS_PINNED_CONFIG_KEYS,
    PINNED_ARG_PATTERN,
    has_control_character,
    pinned_config_keys,
    pinned_flag,
)

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

SIZE_PER_POD_MAX = 16
CONFIG_KEYS_MAX = 128

ArgString = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class ModelSource(KubeModel):
    """The model served: its name for clients and where its weights live."""

    name: str = Field(min_length=1, max_length=SHORT_TEXT_MAX)
    """Model name clients send in requests (served model name), e.g. Qwen/Qwen2.5-7B-Instruct."""
    uri: str = Field(
        min_length=1,
        max_length=URI_MAX,
        json_schema_extra=cel_rules(
            cel(f"self.matches(r'{MODEL_URI_PATTERN}')", f"uri must be one of {MODEL_URI_FORMS}"),
            cel(f"!self.matches(r'{MODEL_URI_TRAVERSAL_PATTERN}')", MODEL_URI_TRAVERSAL_MESSAGE),
        ),
    )
    """Where the weights live: pvc://<claim>/<path>, hf://<org>/<model>[@<revision>],
    s3://<bucket>/<key> (vllm only) or file:///<absolute path> (only under a directory the
    cluster admin allows). No '.' or '..' segments, percent-encoding or backslashes.
    """

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        parse_model_uri(uri)
        return uri


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
            cel(
                "self.kind != 'mindformers' || !has(self.config) || !("
                + " || ".join(f"has(self.config.{key})" for key in MINDFORMERS_PINNED_CONFIG_KEYS)
                + ")",
                CONFIG_MESSAGE,
                field_path=".config",
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
    tensor_parallel_size: int = Field(default=1, ge=1, le=SIZE_PER_POD_MAX)
    """Devices one model replica is split across (tensor parallelism)."""
    seed: int = Field(default=42, ge=0, le=2**32 - 1)
    """Engine random seed (an integer, no unit)."""
    deterministic: bool = True
    """Deterministic kernels: vLLM batch invariance (VLLM_BATCH_INVARIANT=1); MindSpore
    deterministic mode with deterministic HCCL/LCCL reductions.
    """
    config: dict[str, Any] = Field(
        default_factory=dict,
        max_length=CONFIG_KEYS_MAX,
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            # Free-form, but the keys MindFormers pins are declared so that CEL can see them
            # (it cannot see into preserved unknown fields); int-or-string is CEL's `dyn`.
            "properties": {
                key: {
                    "description": f"Pinned by infergate for mindformers ({key}); refused there, "
                    "passed to vllm as an hf override.",
                    "x-kubernetes-int-or-string": True,
                }
                for key in MINDFORMERS_PINNED_CONFIG_KEYS
            },
        },
    )
    """Pinned model-config overrides in the engine's own names, e.g. {rms_norm_eps: 1.0e-6}: vLLM
    passes them as --hf-overrides, MindFormers merges them into model_config (where the dtypes,
    seq_length, use_past and checkpoint_name_or_path are pinned and may not be set here).
    """
    args: list[ArgString] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra=cel_rules(
            cel(f"self.all(a, !a.matches(r'{PINNED_ARG_PATTERN}'))", ARGS_MESSAGE),
            cel(f"self.all(a, !a.matches(r'{CONTROL_CHARACTER_PATTERN}'))", CONTROL_MESSAGE),
        ),
    )
    """Extra engine command-line arguments, e.g. [--enforce-eager]; flags pinned by other fields,
    and flags that would load weights, config, tokenizer, generation settings or code from
    elsewhere than model.uri (--tokenizer, --hf-config-path, --trust-remote-code, ...), are
    refused in every spelling the engine's parser accepts (underscores, --flag=value, --flag.key,
    abbreviations). Each argument is one printable token (no control characters).
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
    """Extra environment of the engine container: tuning variables by value (e.g. an attention
    backend), anything else from a Secret (valueFrom.secretKeyRef); part of the revision.
    """

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, image: str | None) -> str | None:
        # fullmatch, as RE2 matches the CRD's pattern: Python's `$` also passes a final newline.
        if image is not None and (not _IMAGE_PINNED.fullmatch(image) or image.endswith(":latest")):
            raise ValueError(f"engine.image: {image!r} is not allowed; {_IMAGE_MESSAGE}")
        return image

    @field_validator("args")
    @classmethod
    def _no_pinned_flags(cls, args: list[str]) -> list[str]:
        for arg in args:
            if has_control_character(arg):
                raise ValueError(f"engine.args: {arg!r} is not allowed; {CONTROL_MESSAGE}")
            flag = pinned_flag(arg)
            if flag is not None:
                raise ValueError(
                    f"engine.args: {arg!r} is not allowed (it sets {flag}); {ARGS_MESSAGE}"
                )
        return args

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        names: set[str] = set()
        for var in env:
            if var.name in RESERVED_ENV or var.name.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(
                    f"engine.env: {var.name!r} is not allowed; POD_IP and INFERGATE_* are set "
                    "by infergate"
                )
            if var.name in names:
                raise ValueError(f"engine.env: {var.name!r} appears twice; names must be unique")
            names.add(var.name)
        return env

    @model_validator(mode="after")
    def _no_pinned_config(self) -> Self:
        pinned = pinned_config_keys(self.config) if self.kind is EngineKind.MINDFORMERS else []
        if pinned:
            raise ValueError(f"engine.config: {', '.join(pinned)} is not allowed; {CONFIG_MESSAGE}")
        return self

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
    count: int = Field(default=1, ge=1, le=SIZE_PER_POD_MAX)
    """Devices per tensor-parallel rank (normally 1); a pod requests count x
    engine.tensorParallelSize devices.
    """
