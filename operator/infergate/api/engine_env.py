"""The engine container's extra environment: tuning knobs by value, anything else from a Secret.

A value written in `spec.engine.env` is part of the revision, so it is copied
wherever the revision is recorded and shown (the pinned config, status, the
engine's own logs). That is fine for a tuning knob and wrong for a credential.
So a plain `value` is allowed only for names that are engine tuning variables
(`PLAIN_VALUE_PATTERN`: VLLM_*, MS_*, HCCL_* ...) and do not read like a
credential (`SECRET_NAME_PATTERN`: a TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL or
AUTH word); everything else is given by reference, `valueFrom.secretKeyRef`,
and the revision hashes the reference (Secret name and key), never the secret.
ConfigMap references are not offered: their content would change what runs
without changing the revision.
"""

from __future__ import annotations

import re
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from infergate.api.base import NAME_MAX, SHORT_TEXT_MAX, KubeModel, cel, cel_rules
from infergate.api.common import ObjectName

# Prefixes of the engines' and their libraries' tuning variables.
PLAIN_VALUE_PREFIXES: tuple[str, ...] = (
    "VLLM",
    "MS",
    "MINDSPORE",
    "HCCL",
    "LCCL",
    "ASCEND",
    "GLOG",
    "OMP",
    "MKL",
    "CUDA",
    "NCCL",
    "PYTORCH",
    "TORCH",
    "TOKENIZERS",
)
# Words (between underscores) that make a name read like a credential, e.g. VLLM_API_KEY.
SECRET_NAME_WORDS: tuple[str, ...] = (
    "TOKEN",
    "KEY",
    "APIKEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
)
PLAIN_VALUE_PATTERN = "^(" + "|".join(PLAIN_VALUE_PREFIXES) + ")_[A-Z0-9_]*$"
SECRET_NAME_PATTERN = "(^|_)(" + "|".join(SECRET_NAME_WORDS) + ")(_|$)"
_PLAIN = re.compile(PLAIN_VALUE_PATTERN)
_SECRET = re.compile(SECRET_NAME_PATTERN)

RESERVED_ENV = ("POD_IP",)
RESERVED_ENV_PREFIX = "INFERGATE_"

ENV_VALUE_MESSAGE = (
    "a plain value is allowed only for engine tuning variables ("
    + ", ".join(f"{p}_*" for p in PLAIN_VALUE_PREFIXES)
    + ") whose name has no TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL or AUTH word; "
    "give any other value as valueFrom.secretKeyRef {name, key}"
)


def plain_value_allowed(name: str) -> bool:
    """Whether `name` may carry a plain value (a tuning knob, not a credential)."""
    return bool(_PLAIN.fullmatch(name)) and not _SECRET.search(name)


class SecretKeySelector(KubeModel):
    """One key of a Secret in the InferenceDeployment's namespace."""

    name: ObjectName
    """Name of the Secret, in the same namespace."""
    key: str = Field(min_length=1, max_length=NAME_MAX, pattern=r"^[-._a-zA-Z0-9]+$")
    """Key of the Secret whose value the variable gets."""


class EnvVarSource(KubeModel):
    """Where a variable's value comes from: a Secret key (nothing else is offered)."""

    secret_key_ref: SecretKeySelector
    """The Secret key holding the value; the revision hashes this reference, not the value."""


class EnvVar(KubeModel):
    """An environment variable of the engine container."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "has(self.valueFrom) ? self.value == '' : "
                f"(self.name.matches(r'{PLAIN_VALUE_PATTERN}') "
                f"&& !self.name.matches(r'{SECRET_NAME_PATTERN}'))",
                f"env: {ENV_VALUE_MESSAGE}; value and valueFrom are exclusive",
                message_expression=(
                    "has(self.valueFrom) ? 'env ' + self.name + ': value and valueFrom are "
                    "exclusive; leave value empty' : 'env ' + self.name + ': "
                    + ENV_VALUE_MESSAGE
                    + "'"
                ),
            )
        )
    )

    name: str = Field(
        min_length=1, max_length=SHORT_TEXT_MAX, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
    )
    """Variable name; POD_IP and INFERGATE_* are set by infergate."""
    value: str = Field(default="", max_length=4096)
    """Plain value, only for engine tuning variables (VLLM_*, MS_*, HCCL_*, ...) whose name has no
    TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL or AUTH word. Part of the revision.
    """
    value_from: EnvVarSource | None = None
    """The value from a Secret key: the only form for anything that is not a tuning knob. The
    revision covers the reference, never the secret.
    """

    @model_validator(mode="after")
    def _value_or_secret(self) -> Self:
        if self.value_from is not None:
            if self.value:
                raise ValueError(
                    f"engine.env: {self.name!r} sets both value and valueFrom; they are exclusive"
                )
        elif not plain_value_allowed(self.name):
            raise ValueError(f"engine.env: {self.name!r} is not allowed; {ENV_VALUE_MESSAGE}")
        return self

    def container_env(self) -> dict[str, Any]:
        """The entry of a container's `env`: `{name, value}` or `{name, valueFrom}`."""
        if self.value_from is None:
            return {"name": self.name, "value": self.value}
        return {"name": self.name, "valueFrom": self.value_from.to_kube()}

    def revision_value(self) -> str | dict[str, Any]:
        """What the revision hash covers: the plain value, or the Secret reference."""
        return self.value if self.value_from is None else self.value_from.to_kube()
