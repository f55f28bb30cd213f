"""The two sides of a ParityCheck: which revision each means, and whether it can be used.

Pure, and shared: the controller decides from its indexes whether a side is ready
(and whether it needs a probe), the runner resolves the same revision from the API to
find its endpoints; both read a revision's pinned `engine.json` through
`parse_revision_config` and choose a side's revision through `choose_revision`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infergate.jsontypes import JSONMap
from infergate.render.launch import CONFIG_KEY

ENGINE_VLLM = "vllm"
ENGINE_MINDFORMERS = "mindformers"


class RevisionConfigError(ValueError):
    """A revision's ConfigMap does not hold a pinned engine config; names the ConfigMap."""


@dataclass(frozen=True)
class RevisionConfig:
    """What a revision's pinned `engine.json` says about the engine."""

    engine: str
    dtype: str
    served_model_name: str
    overrides: dict[str, Any]
    image: str | None


def parse_revision_config(name: str, data: Mapping[str, Any] | None) -> RevisionConfig:
    """Read a revision ConfigMap's `engine.json` (its `data`)."""
    text = (data or {}).get(CONFIG_KEY)
    if not text:
        raise RevisionConfigError(
            f"ConfigMap {name}: no key {CONFIG_KEY!r} (the revision's pinned engine config)"
        )
    try:
        config = json.loads(text)
        engine = str(config["engine"])
        overrides: dict[str, Any]
        if engine == ENGINE_MINDFORMERS:
            overrides = dict(config.get("mindformers", {}).get("model_config") or {})
        else:
            overrides = dict(config.get("hfOverrides") or {})
        return RevisionConfig(
            engine=engine,
            dtype=str(config["dtype"]),
            served_model_name=str(config["servedModelName"]),
            overrides=overrides,
            image=config.get("image"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise RevisionConfigError(
            f"ConfigMap {name}: {CONFIG_KEY} is not a pinned engine config ({err})"
        ) from err


def needs_probe(engine: str, hidden_states: bool) -> bool:
    """Whether a revision of `engine` needs a separate probe for its hidden states (vLLM
    serves hidden states only under its pooling runner; our adapters serve them beside
    the completions)."""
    return hidden_states and engine == ENGINE_VLLM


def choose_revision(
    deployment: str, named: str | None, pinned: str | None, stable: str | None, *, exists: bool
) -> tuple[str | None, str | None]:
    """(revision, why not yet): the one named in the spec, else the one pinned in the check's
    status when it started, else the deployment's stable revision."""
    if named is not None:
        return named, None
    if pinned:
        return pinned, None
    if not exists:
        return None, f"InferenceDeployment {deployment} does not exist"
    if not stable:
        return None, (
            f"InferenceDeployment {deployment} has no stable revision yet (status.stableRevision)"
        )
    return stable, None


@dataclass(frozen=True)
class SideView:
    """One side as far as the controller can tell from what it watches."""

    deployment: str | None = None
    """InferenceDeployment name; None for an endpoint (the runner checks it can be reached)."""
    revision: str | None = None
    waiting: str | None = None
    """Why the side cannot be used yet (None: it can)."""
    invalid: str | None = None
    """Why the side can never be used (its pinned config is unreadable, say)."""
    needs_probe: bool = False
    probe_template: JSONMap | None = None
    """The revision Deployment, whose pod template a probe copies."""
    object_name: str | None = None
    """`<deployment>-<revision>`: its Service and ConfigMap, which the runner reads."""
