"""The objects a reconcile wants to exist: revision objects with ownership and bookkeeping
annotations, and the ParityCheck of a canary.

Pure. A revision's numerics live in its objects' `infergate.io/revision-spec`
annotation (the model, engine and accelerator it was rendered from), so an
old revision can be rendered again after `spec` moved on; placement, resources
and replicas always come from the current spec.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from infergate.api.base import API_VERSION
from infergate.api.engine import Accelerator, Engine, ModelSource
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.api.parity_check import ParityCheckSpec
from infergate.api.topology import DEFAULT_TOPOLOGY, Topology
from infergate.api.traffic import TrafficMode
from infergate.errors import SpecError
from infergate.parity.thresholds import ProfileName
from infergate.plan.deployment.observed import (
    ANNOTATION_DESIRED_HASH,
    ANNOTATION_REVISION_SPEC,
    ANNOTATION_ROLE,
)
from infergate.render.disruption import stable_disruption_budget
from infergate.render.labels import (
    LABEL_CHECK_PURPOSE,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    MANAGED_BY,
    PURPOSE_DRIFT,
)
from infergate.render.mirror import render_mirror
from infergate.render.objects import RevisionObjects, render_revision
from infergate.render.revision import canonical_json, revision_hash, short_revision
from infergate.render.traffic import http_route, stable_service

KIND = "InferenceDeployment"
LABEL_BASELINE_REVISION = "infergate.io/baseline-revision"
COMPONENT_PARITY = "parity"


@dataclass(frozen=True)
class Owner:
    """The InferenceDeployment that owns every object it renders."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """Controller owner reference: children go with the deployment (garbage collection)."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def revision_of(spec: InferenceDeploymentSpec) -> str:
    """The short revision hash of a spec; a value that cannot be hashed is a SpecError."""
    try:
        return short_revision(revision_hash(spec))
    except ValueError as error:
        raise SpecError(f"spec cannot be hashed into a revision: {error}") from error


def revision_json(spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """The part of a spec that makes a revision: model, engine, accelerator, and the
    topology when it is not the one-node default (left out, a one-node revision's
    annotation reads as it did before topology existed)."""
    parts = {
        "model": spec.model.to_kube(),
        "engine": spec.engine.to_kube(),
        "accelerator": spec.accelerator.to_kube(),
    }
    if spec.layout != DEFAULT_TOPOLOGY:
        parts["topology"] = spec.layout.to_kube()
    return parts


def revision_spec_annotation(spec: InferenceDeploymentSpec) -> str:
    """The part of a spec that makes a revision, as canonical JSON."""
    return canonical_json(revision_json(spec))


def spec_for_revision(current: InferenceDeploymentSpec, annotation: str) -> InferenceDeploymentSpec:
    """The current spec with model, engine, accelerator and topology taken from a revision's
    annotation (no topology there: the one-node default)."""
    try:
        stored = json.loads(annotation)
        parts = {
            "model": ModelSource.model_validate(stored["model"]),
            "engine": Engine.model_validate(stored["engine"]),
            "accelerator": Accelerator.model_validate(stored["accelerator"]),
            "topology": (
                Topology.model_validate(stored["topology"]) if "topology" in stored else None
            ),
        }
    except (ValueError, KeyError, TypeError, ValidationError) as error:
        raise SpecError(
            f"annotation {ANNOTATION_REVISION_SPEC} does not hold a revision "
            f"(model, engine, accelerator, topology): {error}"
        ) from error
    # Not re-validated as a whole: the stored revision was valid when it was made,
    # and the current rollout template may not fit it (e.g. a shorter maxModelLen).
    return current.model_copy(update=parts)


def _desired_hash(manifest: dict[str, Any]) -> str:
    text = canonical_json(manifest)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _own(manifest: dict[str, Any], owner: Owner, extra: dict[str, str]) -> dict[str, Any]:
    """The manifest with owner reference and annotations, stamped with the hash of itself."""
    metadata = manifest["metadata"]
    metadata["ownerReferences"] = [owner.reference()]
    metadata["annotations"] = {**metadata.get("annotations", {}), **extra}
    metadata["annotations"][ANNOTATION_DESIRED_HASH] = _desired_hash(manifest)
    return manifest


def desired_revision(
    owner: Owner,
    revision_spec: InferenceDeploymentSpec,
    *,
    replicas: int,
    role: str,
) -> RevisionObjects:
    """A revision's ConfigMap, Deployment, Service and the stable Service, owned and stamped."""
    rendered = render_revision(owner.name, owner.namespace, revision_spec, replicas=replicas)
    pinned = revision_spec_annotation(revision_spec)
    bookkeeping = {ANNOTATION_REVISION_SPEC: pinned}
    return RevisionObjects(
        revision=rendered.revision,
        revision_hash=rendered.revision_hash,
        config_map=_own(rendered.config_map, owner, bookkeeping),
        deployment=_own(rendered.deployment, owner, {**bookkeeping, ANNOTATION_ROLE: role}),
        service=_own(rendered.service, owner, {}),
        stable_service=_own(rendered.stable_service, owner, {}),
    )


def desired_stable_service(
    owner: Owner, spec: InferenceDeploymentSpec, serving: str | None
) -> dict[str, Any]:
    """The stable Service `<name>`: `serving`'s pods only (dark, gateway), or every revision's
    (replicas)."""
    rendered = stable_service(owner.name, owner.namespace, spec.rollout.traffic.mode, serving)
    return _own(rendered, owner, {})


def desired_extras(
    owner: Owner,
    spec: InferenceDeploymentSpec,
    *,
    stable: str | None,
    canary: str | None,
    canary_weight: int,
    mirror_image: str,
    runner_namespace: str,
    pull_secrets: Sequence[str] = (),
    serving: str | None = None,
) -> list[dict[str, Any]]:
    """The PodDisruptionBudget of the stable revision `serving` (none while no revision is
    stable, none for a canary: `render.disruption` says why), the HTTPRoute (gateway mode,
    once a revision is stable) and the mirror's objects (rollout.mirror), owned and
    stamped; what is not here is deleted."""
    wanted: list[dict[str, Any]] = []
    if serving is not None:
        wanted.append(stable_disruption_budget(owner.name, owner.namespace, serving))
    gateway = spec.rollout.traffic.gateway
    if spec.rollout.traffic.mode is TrafficMode.GATEWAY and gateway is not None and stable:
        route = http_route(
            owner.name,
            owner.namespace,
            gateway,
            stable=stable,
            canary=canary,
            canary_weight=canary_weight,
        )
        wanted.append(route)
    if spec.rollout.mirror is not None:
        wanted += render_mirror(
            owner.name,
            owner.namespace,
            spec.rollout.mirror,
            image=mirror_image,
            runner_namespace=runner_namespace,
            pull_secrets=pull_secrets,
        )
    return [_own(manifest, owner, {}) for manifest in wanted]


def parity_check_name(name: str, revision: str) -> str:
    """`<deployment>-<canary revision>`: one check per canary, found again after a restart."""
    return f"{name}-{revision}"


def recheck_name(name: str, revision: str, step: int) -> str:
    """`<deployment>-<canary revision>-step<N>`: the re-check at the end of gateway step N
    (1-based), found again after a restart."""
    return f"{parity_check_name(name, revision)}-step{step + 1}"


def desired_parity_check(
    owner: Owner,
    spec: InferenceDeploymentSpec,
    *,
    stable: str,
    canary: str,
    name: str | None = None,
) -> dict[str, Any]:
    """The ParityCheck of a canary: the rollout's template, stable as baseline, canary as
    candidate, owned by the deployment."""
    template = spec.rollout.parity
    if template is None:
        raise SpecError(
            f"InferenceDeployment {owner.namespace}/{owner.name}: spec.rollout.parity is unset; "
            "no parity check can be made"
        )
    reference = {"inferenceDeploymentRef": {"name": owner.name}}
    check_spec = ParityCheckSpec.model_validate(
        {
            **template.template_json(),
            "baseline": {**reference, "revision": stable},
            "candidate": {**reference, "revision": canary},
        }
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "ParityCheck",
        "metadata": {
            "name": name or parity_check_name(owner.name, canary),
            "namespace": owner.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_DEPLOYMENT: owner.name,
                LABEL_COMPONENT: COMPONENT_PARITY,
                LABEL_REVISION: canary,
                LABEL_BASELINE_REVISION: stable,
            },
            "ownerReferences": [owner.reference()],
        },
        "spec": check_spec.to_kube(),
    }


def drift_check_name(name: str, revision: str, run: int) -> str:
    """`<deployment>-<stable revision>-drift<N>`: the drift watch's run N of that revision."""
    return f"{parity_check_name(name, revision)}-drift{run}"


def drift_profile(spec: InferenceDeploymentSpec) -> ProfileName | None:
    """The profile a drift run is judged by: strict where the engine runs batch invariant
    (deterministic), so any change of its numerics shows; otherwise none, and the runner
    picks the profile that matches the two sides (same engine and dtype)."""
    return ProfileName.STRICT if spec.engine.deterministic else None


def desired_drift_check(
    owner: Owner,
    spec: InferenceDeploymentSpec,
    *,
    stable: str,
    run: int,
    hidden_states: bool,
) -> dict[str, Any]:
    """A drift run: the stable revision's pods (candidate) against the stable's own golden record
    (baseline), under the rollout's suite and sampling; `spec` is the stable revision's.

    Hidden states are compared only when `hidden_states` (the store keeps them in full: a
    summary cannot be teacher-forced against). The profile is `drift_profile`'s, whatever
    the canary template says: a canary's profile allows for what a canary changes, and a
    drift run changes nothing.
    """
    template = spec.rollout.parity
    if template is None:
        raise SpecError(
            f"InferenceDeployment {owner.namespace}/{owner.name}: spec.rollout.parity is unset; "
            "no drift run can be made"
        )
    body = template.template_json()
    body.pop("profile", None)
    profile = drift_profile(spec)
    if profile is not None:
        body["profile"] = profile.value
    body["hiddenStates"] = {**body.get("hiddenStates", {}), "enabled": hidden_states}
    check_spec = ParityCheckSpec.model_validate(
        {
            **body,
            "baseline": {"golden": {"revision": stable}},
            "candidate": {"inferenceDeploymentRef": {"name": owner.name}, "revision": stable},
        }
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "ParityCheck",
        "metadata": {
            "name": drift_check_name(owner.name, stable, run),
            "namespace": owner.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_DEPLOYMENT: owner.name,
                LABEL_COMPONENT: COMPONENT_PARITY,
                LABEL_REVISION: stable,
                LABEL_BASELINE_REVISION: stable,
                LABEL_CHECK_PURPOSE: PURPOSE_DRIFT,
            },
            "ownerReferences": [owner.reference()],
        },
        "spec": check_spec.to_kube(),
    }
