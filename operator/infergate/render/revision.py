"""The revision hash: the identity of everything that changes numerics or serving.

sha256 over canonical JSON (sorted keys, no whitespace, finite numbers only)
of the model, the engine (with its image resolved to the default when unset),
the accelerator, and the topology when it is not the one-node default (so every
revision made before topology existed keeps its hash). Replicas, rollout policy,
placement, CPU/memory and the resource's labels and annotations are not part of it:
changing them never starts a canary. Values that cannot be written as canonical JSON are refused
with the field's path rather than hashed partially.

`HASH_SCHEMA` is hashed too; bump it when rendering of hashed fields changes
meaning (a new default image, a new pinned flag), so that running revisions
are rolled out again through the parity gate rather than changing in place.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.api.topology import DEFAULT_TOPOLOGY
from infergate.render.images import resolved_image

HASH_SCHEMA = "infergate.io/revision/v1"
SHORT_LENGTH = 10


class RevisionHashError(ValueError):
    """A field value that has no canonical JSON form (the message names the field)."""


def revision_identity(spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """Every input of the revision hash, by name, as JSON values."""
    engine = spec.engine
    identity: dict[str, Any] = {
        "schema": HASH_SCHEMA,
        "model": {"name": spec.model.name, "uri": spec.model.uri},
        "engine": {
            "kind": engine.kind.value,
            "image": resolved_image(engine),
            "dtype": engine.dtype.value,
            "paramsDtype": engine.effective_params_dtype.value,
            "maxModelLen": engine.max_model_len,
            "tensorParallelSize": engine.tensor_parallel_size,
            "seed": engine.seed,
            "deterministic": engine.deterministic,
            "config": engine.config,
            "args": list(engine.args),
            "env": {var.name: var.revision_value() for var in engine.env},
        },
        "accelerator": {"kind": spec.accelerator.kind.value, "count": spec.accelerator.count},
    }
    if spec.layout != DEFAULT_TOPOLOGY:
        identity["topology"] = spec.layout.to_kube()
    return identity


def canonical_json(value: Any, path: str = "spec") -> str:
    """Sorted-key, whitespace-free JSON; refuses what JSON cannot carry exactly."""
    return json.dumps(
        _canonical(value, path),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def revision_hash(spec: InferenceDeploymentSpec) -> str:
    """Full sha256 hex digest of the revision identity."""
    text = canonical_json(revision_identity(spec))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def short_revision(full_hash: str) -> str:
    """The short form used in labels and object names (first 10 hex digits)."""
    return full_hash[:SHORT_LENGTH]


def _canonical(value: Any, path: str) -> Any:
    # bool before int: bool is an int subclass, and true must not hash like 1.
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RevisionHashError(
                f"{path}: {value!r} cannot be hashed; only finite numbers are allowed"
            )
        # The API server stores 1.0 as 1: hash both alike so a spec read back
        # from the cluster has the same revision as the one applied.
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise RevisionHashError(
                    f"{path}: key {key!r} ({type(key).__name__}) cannot be hashed; "
                    "keys must be strings"
                )
            result[key] = _canonical(item, f"{path}.{key}")
        return result
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_canonical(item, f"{path}[{index}]") for index, item in enumerate(value)]
    raise RevisionHashError(
        f"{path}: {value!r} ({type(value).__name__}) cannot be hashed; allowed are strings, "
        "numbers, booleans, null, lists and string-keyed maps"
    )
