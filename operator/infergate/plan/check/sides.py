"""The two sides of a ParityCheck: which revision each means, and whether it can be used.

Pure, and shared: the controller decides from its indexes whether a side is ready
(and whether it needs a probe), the runner resolves the same revision from the API to
find its endpoints; both read a revision's pinned `engine.json` through
`parse_revision_config` and choose a side's revision through `choose_revision`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from infergate.jsontypes import JSONMap
from infergate.plan.check.observed import CheckSpecView
from infergate.render.check_names import SideName
from infergate.render.group import LWS_KIND
from infergate.render.labels import revision_object_name
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


def needs_probe(engine: str) -> bool:
    """Whether a revision of `engine` needs a probe beside it: vLLM says neither what it
    loaded (our fingerprint server in the probe does) nor, but under its pooling runner,
    its hidden states; our adapters serve both themselves."""
    return engine == ENGINE_VLLM


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
    """The revision Deployment, whose pod template a probe copies (of a group: its leader's
    template, as `probe_source` gives it)."""
    group: bool = False
    """The revision is a multi-node group (a LeaderWorkerSet): its probe serves fingerprints
    only, and a check that asks for hidden states ends Inconclusive (`group_hidden_states`)."""
    object_name: str | None = None
    """`<deployment>-<revision>`: its Service and ConfigMap, which the runner reads."""


@dataclass(frozen=True)
class RevisionSeen:
    """What the indexes hold of one revision of an InferenceDeployment."""

    config: RevisionConfig | str | None = None
    """Its pinned config; why it cannot be read (str); None while its ConfigMap is missing."""
    available: int | None = None
    """Available pods of its Deployment; None while the Deployment is missing."""
    template: JSONMap | None = None
    """Its Deployment (a probe copies the pod template), as `probe_source` gives it."""
    group: bool = False
    """Its workload is a LeaderWorkerSet (a multi-node revision)."""
    service: bool = False
    """Whether its Service exists: the runner reaches the side through it, and the operator
    creates it without waiting (`kube.background`), so it may come after the pods."""


def side_view(
    spec: CheckSpecView,
    side: SideName,
    *,
    pinned: str | None,
    deployment_exists: bool,
    stable: str | None,
    seen: Callable[[str], RevisionSeen],
) -> SideView:
    """One side, from what is seen of its InferenceDeployment and of the revision it means."""
    ref = spec.side(side)
    if ref.deployment is None:
        return SideView()
    revision, waiting = choose_revision(
        ref.deployment, ref.revision, pinned, stable, exists=deployment_exists
    )
    if revision is None:
        return SideView(deployment=ref.deployment, waiting=waiting)
    name = revision_object_name(ref.deployment, revision)
    base = SideView(deployment=ref.deployment, revision=revision, object_name=name)
    found = seen(revision)
    if isinstance(found.config, str):
        return replace(base, invalid=found.config)
    if found.config is None:
        return replace(
            base, waiting=f"ConfigMap {name} of revision {revision} does not exist (yet)"
        )
    if not found.available:
        pods = "its Deployment does not exist (yet)" if found.available is None else "no pod ready"
        return replace(base, waiting=f"Service {name} has no ready endpoint: {pods}")
    if not found.service:
        return replace(base, waiting=f"Service {name} does not exist (yet)")
    probe = needs_probe(found.config.engine)
    if probe and found.template is None:
        return replace(base, waiting=f"Deployment {name} does not exist (yet)")
    return replace(
        base,
        needs_probe=probe,
        probe_template=found.template if probe else None,
        group=found.group,
    )


def probe_source(name: str, kind: str, spec: JSONMap) -> JSONMap:
    """What a probe copies its pod template from, shaped as a Deployment
    (`{"metadata": {"name"}, "spec": {"template"}}`): a Deployment's own template; for a
    LeaderWorkerSet (a multi-node revision), its leader's template (the worker template
    where no leader template is set, as the LWS controller does). The probe of a group
    runs the fingerprint server on the leader's volumes (what it loaded) and no engine:
    one pod of a group cannot start its engine alone."""
    if kind != LWS_KIND:
        return {"metadata": {"name": name}, "spec": spec}
    group = spec.get("leaderWorkerTemplate") or {}
    template = group.get("leaderTemplate") or group.get("workerTemplate") or {}
    return {"metadata": {"name": name}, "spec": {"template": template}}


def group_hidden_states(sides: Mapping[SideName, SideView], hidden_states: bool) -> str | None:
    """Why a check cannot compare hidden states (None: it can, or does not ask to).

    The hidden states of a vLLM side come from a probe that runs the revision's engine
    under vLLM's pooling runner. A multi-node revision's engine runs only as a whole group
    (a Ray cluster of `nodes` pods): its probe would be a second group holding as many
    accelerators as the revision, so none is made and its hidden states are not compared.
    A check that asks for them (hiddenStates.enabled, the default) lacks evidence it asked
    for: Inconclusive, never Passed. With hiddenStates.enabled false it compares tokens and
    logprobs, and the probe gives fingerprints only."""
    if not hidden_states:
        return None
    grouped = sorted(side for side, view in sides.items() if view.group and view.needs_probe)
    if not grouped:
        return None
    which = ", ".join(f"{side} (revision {sides[side].revision})" for side in grouped)
    return (
        f"{which}: a multi-node group (LeaderWorkerSet) whose hidden states are not probed "
        "(a probe would be a second group as large as the revision); set "
        "hiddenStates.enabled: false to compare tokens and logprobs only"
    )
