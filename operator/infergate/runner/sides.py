"""Resolve the two sides of a check into what the runner calls (no API client here).

A side is a revision of an InferenceDeployment or an explicit endpoint:

- a revision answers on its Service `<name>-<revision>` (ready endpoints read from its
  EndpointSlices); its pinned configuration, written by the operator into the
  ConfigMap of the same name (`engine.json`, read by `plan.check.sides`, which the
  controller shares), says which engine and dtype run, and which numeric overrides
  were pinned;
- its hidden states come from the engine itself where our adapter serves it
  (MindFormers), or from the probe the controller started for it (vLLM: the same
  image and pinned config under the pooling runner, Service `<check>-probe-<side>`);
- an endpoint is taken as given; if it serves our adapter's `/v1/parity/config`, its
  hidden states and effective configuration come from there.

Nothing read by name is believed for its name alone: a revision's ConfigMap and Service
must be controlled by the InferenceDeployment (its uid, as read here), a probe Service
by the check itself (`plan.ownership`), only EndpointSlices the cluster published for
the Service are read (`runner.endpoints.trusted_slices`), and of those only addresses of
pods the side's own workload made are called (`runner.side_pods`): a revision's
Deployment, the one whose uid the operator recorded in the InferenceDeployment's status
(`status.revisions[].deploymentUid`), or the check's own probe pod. An object someone
else made is refused, for good (`SideObjectNotOurs`): waiting would not change who made
it.

Reads go through `ClusterReads` (implemented in `infergate.kube`), engine questions
through `EngineInfo`, so this module is tested without a cluster or a server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from infergate.api.base import INFERENCE_DEPLOYMENT_KIND, PARITY_CHECK_KIND
from infergate.api.parity_check import ParityCheckSpec, Side
from infergate.engines.client import ProbeKind
from infergate.jsontypes import JSON
from infergate.parity.layers import LAYER_PROBE_ENGINES
from infergate.plan import reasons
from infergate.plan.check.sides import (
    RevisionConfig,
    RevisionConfigError,
    choose_revision,
    needs_probe,
    parse_revision_config,
)
from infergate.plan.deployment.observed import ANNOTATION_REVISION_SPEC
from infergate.plan.ownership import Controller, not_controlled_by
from infergate.render.check_names import SideName, probe_name
from infergate.render.labels import revision_object_name
from infergate.render.layer_stand_in import (
    ANNOTATION_LAYER_STAND_IN,
    LAYERS_PORT_NAME,
    STAND_IN_RUNS,
)
from infergate.runner.endpoints import EndpointResolutionError
from infergate.runner.side_pods import (
    ForgedEndpointError,
    PodMaker,
    ProbePod,
    RevisionPods,
    own_pod_url,
)

UNKNOWN = "unknown"


class SideResolutionError(RuntimeError):
    """A side cannot be reached or described; the message names the side and the object.

    `transient` says whether waiting may help (a pod not ready yet) or not (an object
    that names a revision that does not exist is a spec problem, as is a missing probe
    where hidden states are required). `reason` is the check's Error reason when it is
    not the generic one (`InvalidCheck`).
    """

    def __init__(self, message: str, *, transient: bool, reason: str | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.reason = reason


def refuse_unless_controlled(obj: Mapping[str, Any], owner: Controller, what: str) -> None:
    """Raise, for good, unless `owner` controls `obj`: someone else made it."""
    refused = not_controlled_by(obj, owner)
    if refused is not None:
        raise SideResolutionError(
            f"{what}: {refused}; it is not read", transient=False,
            reason=reasons.CHECK_SIDE_OBJECT_NOT_OURS,
        )  # fmt: skip


class ClusterReads(Protocol):
    """The reads side resolution needs, in the check's namespace; None when absent."""

    def inference_deployment(self, name: str) -> JSON | None: ...

    def config_map(self, name: str) -> JSON | None: ...

    def service(self, name: str) -> JSON | None: ...

    def endpoint_slices(self, service: str) -> list[JSON]: ...

    def pod(self, name: str) -> JSON | None: ...

    def replica_set(self, name: str) -> JSON | None: ...

    def stateful_set(self, name: str) -> JSON | None: ...


@dataclass(frozen=True)
class EndpointDescription:
    """What a server says about itself (our adapters do; vLLM gives its version only)."""

    engine: str | None = None
    engine_version: str | None = None
    dtype: str | None = None
    effective_config: dict[str, Any] | None = None
    fingerprints: dict[str, Any] = field(default_factory=dict)
    """What it ran (parity.fingerprints keys): tokenizer, template, weights, config..."""

    @property
    def serves_probe(self) -> bool:
        """Our adapter: serves `/v1/parity/hidden_states` next to its config."""
        return self.effective_config is not None


class EngineInfo(Protocol):
    def describe(self, url: str) -> EndpointDescription: ...

    def fingerprints(self, url: str) -> dict[str, Any]:
        """A fingerprint server's answer (GET /v1/parity/fingerprints)."""
        ...

    def probe_ids(self, url: str, model: str) -> list[int]:
        """The ids the engine's own tokenizer gives the probe text, special tokens and all."""
        ...


@dataclass(frozen=True)
class SideTarget:
    """One side as the runner drives it."""

    side: SideName
    url: str
    model: str
    engine: str
    engine_version: str
    dtype: str
    description: str
    revision: str | None = None
    deployment: str | None = None
    deployment_uid: str | None = None
    """The uid of the InferenceDeployment read (what the mirror's Service must name)."""
    effective_config: dict[str, Any] = field(default_factory=dict)
    probe_url: str | None = None
    probe_kind: ProbeKind | None = None
    fingerprints: dict[str, Any] = field(default_factory=dict)
    """What this side ran, as it reports it (empty: it reports nothing)."""
    revision_spec: dict[str, Any] | None = None
    """The revision's model, engine and accelerator (what `infergate diff` compares)."""
    layer_url: str | None = None
    """Where the per-layer probe answers: our adapter itself, or for vLLM the transformers
    stand-in in its probe pod (None: nothing answers it)."""
    layer_missing: str | None = None
    """Why nothing answers the layer probe for this side (None: something does)."""


def side_revision(side: Side, deployment: Mapping[str, Any] | None, pinned: str | None) -> str:
    """The revision a side means: given, pinned in the check's status, or the stable one."""
    ref = side.inference_deployment_ref
    stable = (deployment or {}).get("status", {}).get("stableRevision")
    revision, waiting = choose_revision(
        ref.name if ref is not None else "?",
        side.revision,
        pinned,
        str(stable) if stable else None,
        exists=deployment is not None,
    )
    if revision is None:
        raise SideResolutionError(waiting or "no revision", transient=True)
    return revision


def recorded_deployment_uid(deployment: Mapping[str, Any], revision: str) -> str | None:
    """The uid of the revision's workload (its Deployment, or a multi-node revision's
    LeaderWorkerSet) as the operator recorded it when it created it
    (`status.revisions[].deploymentUid`); None while it has not."""
    for record in (deployment.get("status") or {}).get("revisions") or []:
        if record.get("hash") == revision and record.get("deploymentUid"):
            return str(record["deploymentUid"])
    return None


def service_url(
    reads: ClusterReads,
    service_name: str,
    what: str,
    *,
    owner: Controller,
    pods: PodMaker,
    port: str = "http",
    awaiting_check: bool = False,
) -> str:
    """The first ready endpoint of a Service on `port` whose pod `pods` made (with
    `awaiting_check`, a group leader held until it is re-checked comes first:
    `side_pods.own_pod_url`); transient errors while pods start. A Service `owner` does
    not control, or an endpoint of a pod someone else made, is refused, for good."""
    service = reads.service(service_name)
    if service is None:
        raise SideResolutionError(f"{what}: Service {service_name} does not exist", transient=True)
    refuse_unless_controlled(service, owner, what)
    try:
        return own_pod_url(
            reads, service, reads.endpoint_slices(service_name), pods, port,
            awaiting_check=awaiting_check,
        )  # fmt: skip
    except ForgedEndpointError as err:
        raise SideResolutionError(
            f"{what}: {err}", transient=False, reason=reasons.CHECK_SIDE_OBJECT_NOT_OURS
        ) from err
    except EndpointResolutionError as err:
        raise SideResolutionError(f"{what}: {err}", transient=True) from err


def resolve_side(
    side_name: SideName,
    check: str,
    spec: ParityCheckSpec,
    *,
    reads: ClusterReads,
    info: EngineInfo,
    check_uid: str,
    pinned_revision: str | None = None,
) -> SideTarget:
    """Everything the runner needs to drive one side, or an error saying what is missing.

    `check` and `check_uid` name the ParityCheck, which controls the probe Services.
    """
    side: Side = getattr(spec, side_name)
    hidden = spec.hidden_states.enabled
    if side.endpoint is not None:
        return _endpoint_side(side_name, side.endpoint.url, side.endpoint.model, hidden, info)
    ref = side.inference_deployment_ref
    assert ref is not None  # noqa: S101 - Side guarantees exactly one of the two
    deployment = reads.inference_deployment(ref.name)
    revision = side_revision(side, deployment, pinned_revision)
    object_name = revision_object_name(ref.name, revision)
    what = f"{side_name} (InferenceDeployment {ref.name} revision {revision})"
    deployment_uid = str(((deployment or {}).get("metadata") or {}).get("uid") or "")
    if not deployment_uid:
        raise SideResolutionError(
            f"{what}: InferenceDeployment {ref.name} was not read", transient=True
        )
    owner = Controller(INFERENCE_DEPLOYMENT_KIND, ref.name, deployment_uid)
    probe_owner = Controller(PARITY_CHECK_KIND, check, check_uid)
    made_by = recorded_deployment_uid(deployment or {}, revision)
    if made_by is None:
        raise SideResolutionError(
            f"{what}: the operator has not recorded the uid of its Deployment (or "
            f"LeaderWorkerSet) in InferenceDeployment {ref.name}'s status.revisions yet; "
            "only pods of that workload are called",
            transient=True,
        )
    config_map = reads.config_map(object_name)
    if config_map is None:
        raise SideResolutionError(
            f"{what}: ConfigMap {object_name} does not exist; is {revision} a revision of "
            f"{ref.name}? (see its status.revisions)",
            transient=True,
        )
    refuse_unless_controlled(config_map, owner, what)
    try:
        pinned = parse_revision_config(object_name, config_map.get("data"))
    except RevisionConfigError as err:
        raise SideResolutionError(str(err), transient=False) from err
    pods = RevisionPods.of(ref.name, revision, made_by)
    # The candidate of a check against a golden record (a drift run) is the one a held
    # group awaits: it calls that group's leader first.
    awaiting = side_name == "candidate" and spec.baseline.golden is not None
    url = service_url(reads, object_name, what, owner=owner, pods=pods, awaiting_check=awaiting)
    described = info.describe(url)
    effective = described.effective_config or _pinned_effective(pinned)
    probe_url: str | None = None
    probe_kind: ProbeKind | None = None
    fingerprints = dict(described.fingerprints)
    if not described.serves_probe and needs_probe(pinned.engine):
        # vLLM: the fingerprint server in the probe reads the files it loaded; the ids
        # its own tokenizer gives come from the serving engine itself.
        probe = probe_name(check, side_name)
        served = service_url(
            reads, probe, f"{what} probe", owner=probe_owner,
            pods=ProbePod(probe, probe_owner), port="fingerprints",
        )  # fmt: skip
        fingerprints = {
            **info.fingerprints(served),
            "tokenizer.probe_ids": info.probe_ids(url, pinned.served_model_name),
        }
    layer_url, layer_missing = _layer_probe(
        reads, (check, probe_owner), side_name, pinned.engine, what
    )
    if described.serves_probe and pinned.engine in LAYER_PROBE_ENGINES:
        layer_url, layer_missing = url, None
    if hidden:
        if described.serves_probe:
            probe_url, probe_kind = url, "adapter"
        elif needs_probe(pinned.engine):
            probe = probe_name(check, side_name)
            probe_url = service_url(
                reads, probe, f"{what} probe", owner=probe_owner, pods=ProbePod(probe, probe_owner)
            )
            probe_kind = "vllm-pooling"
        else:
            raise SideResolutionError(
                f"{what}: engine {pinned.engine} at {url} serves no hidden states and has no "
                "probe; set hiddenStates.enabled: false to compare tokens and logprobs only",
                transient=False,
            )
    return SideTarget(
        side=side_name,
        url=url,
        model=pinned.served_model_name,
        engine=pinned.engine,
        engine_version=described.engine_version or UNKNOWN,
        dtype=pinned.dtype,
        description=f"{ref.name} revision {revision} ({pinned.engine}, {pinned.dtype})",
        revision=revision,
        deployment=ref.name,
        deployment_uid=deployment_uid,
        effective_config=effective,
        probe_url=probe_url,
        probe_kind=probe_kind,
        fingerprints=fingerprints,
        revision_spec=_revision_spec(config_map),
        layer_url=layer_url,
        layer_missing=layer_missing,
    )


def _layer_probe(
    reads: ClusterReads,
    check: tuple[str, Controller],
    side_name: SideName,
    engine: str,
    what: str,
) -> tuple[str | None, str | None]:
    """(where the side's layer probe answers, why none does) as its probe Service says.

    A vLLM side's probe Service names the transformers stand-in's port when it runs, and
    says in an annotation why it does not otherwise. Only a failed check asks, so a
    stand-in that cannot be reached is a note in the report, never a failed resolution;
    a probe Service the check does not control is refused, as everywhere.
    """
    if not needs_probe(engine):
        return None, f"engine {engine} does not serve our adapter's layer probe"
    name, owner = check
    probe = probe_name(name, side_name)
    service = reads.service(probe)
    if service is not None:
        refuse_unless_controlled(service, owner, f"{what} probe")
    annotations = ((service or {}).get("metadata") or {}).get("annotations") or {}
    said = annotations.get(ANNOTATION_LAYER_STAND_IN)
    if said is None:
        return None, f"its probe {probe} runs no transformers stand-in"
    if said != STAND_IN_RUNS:
        why = said.removeprefix("none: ")
        return None, f"its probe {probe} runs no transformers stand-in: {why}"
    try:
        url = service_url(
            reads, probe, f"{what} layer stand-in", owner=owner,
            pods=ProbePod(probe, owner), port=LAYERS_PORT_NAME,
        )  # fmt: skip
    except SideResolutionError as err:
        if err.reason == reasons.CHECK_SIDE_OBJECT_NOT_OURS:
            raise
        return None, str(err)
    return url, None


def _revision_spec(config_map: Mapping[str, Any]) -> dict[str, Any] | None:
    text = ((config_map.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_REVISION_SPEC
    )
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _endpoint_side(
    side_name: SideName, url: str, model: str, hidden: bool, info: EngineInfo
) -> SideTarget:
    described = info.describe(url)
    if hidden and not described.serves_probe:
        raise SideResolutionError(
            f"{side_name} endpoint {url} serves no hidden states (/v1/parity/hidden_states); "
            "set hiddenStates.enabled: false to compare tokens and logprobs only",
            transient=False,
        )
    engine = described.engine or UNKNOWN
    dtype = described.dtype or UNKNOWN
    layers = described.serves_probe and engine in LAYER_PROBE_ENGINES
    return SideTarget(
        side=side_name,
        url=url.rstrip("/"),
        model=model,
        engine=engine,
        engine_version=described.engine_version or UNKNOWN,
        dtype=dtype,
        description=f"endpoint {url} ({engine}, {dtype})",
        effective_config=dict(described.effective_config or {}),
        probe_url=url.rstrip("/") if hidden else None,
        probe_kind="adapter" if hidden else None,
        fingerprints=dict(described.fingerprints),
        layer_url=url.rstrip("/") if layers else None,
        layer_missing=None if layers else f"{url} does not serve our adapter's layer probe",
    )


def _pinned_effective(pinned: RevisionConfig) -> dict[str, Any]:
    """The numerics a revision pinned: its dtype and overrides (the model's own defaults
    are not visible from here, so only pinned keys can be compared)."""
    overrides = {k: v for k, v in pinned.overrides.items() if not isinstance(v, Mapping)}
    return {"dtype": pinned.dtype, **overrides}
