"""A tiny in-memory cluster for rollout plans: applies a plan's writes to plain dicts and plays
the Deployment controller (pods become available when asked), so a test can run reconcile
after reconcile the way the operator does and look at the status a user would see."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.api.golden import GoldenSpec
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.plan.check.owned import observe_check
from infergate.plan.check.stamp import see_suite, unread_suites
from infergate.plan.check.status import spec_digest
from infergate.plan.deployment.control import manual_requests
from infergate.plan.deployment.desired import Owner
from infergate.plan.deployment.groups import LWS_GROUP_INDEX, LWS_WORKER_INDEX
from infergate.plan.deployment.observed import (
    collect,
    holder_of,
    observe_deployment,
    observe_object,
    observe_pod,
)
from infergate.plan.deployment.reconcile import ReconcilePlan, plan_reconcile, with_check_uids
from infergate.plan.deployment.rollout import DeploymentState
from infergate.plan.deployment.sync import Create, Delete, Recreate, Update
from infergate.render.labels import ANNOTATION_REVISION_HASH, LABEL_REVISION

NAME = "qwen"
NAMESPACE = "llm"
UID = "0f6c-uid"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def base_spec() -> dict[str, Any]:
    """A vLLM deployment on simulated GPU nodes, with a parity template."""
    return {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct", "uri": "pvc://models/qwen2.5-7b"},
        "engine": {
            "kind": "vllm",
            "image": "vllm/vllm-openai:v0.32.0",
            "dtype": "bfloat16",
            "maxModelLen": 4096,
        },
        "accelerator": {"kind": "nvidia-gpu", "count": 1},
        "replicas": 2,
        "rollout": {
            "canaryReplicas": 1,
            "progressDeadlineSeconds": 600,
            # A promotion ends as soon as its move is read back, so `settle` (in which no
            # time passes) finishes one; test_promotion.py tests the delay.
            "scaleDownDelaySeconds": 0,
            "parity": {"suite": {"inline": [{"id": "p1", "text": "The capital of France is"}]}},
        },
        "revisionHistoryLimit": 2,
        "placement": {"nodeSelector": {"type": "kwok"}},
    }


@dataclass
class World:
    """One InferenceDeployment and its children, as an API server would hold them."""

    spec: dict[str, Any] = field(default_factory=base_spec)
    status: InferenceDeploymentStatus = field(default_factory=InferenceDeploymentStatus)
    annotations: dict[str, str] = field(default_factory=dict)
    generation: int = 1
    now: datetime = START
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    plans: list[ReconcilePlan] = field(default_factory=list)
    golden: GoldenSpec | None = None
    """The operator's golden record store (--golden-config)."""
    taken: dict[str, str] = field(default_factory=dict)
    """What the writer's creates found of names held by others' objects (`on_name`)."""
    conflicts: set[tuple[str, str]] = field(default_factory=set)
    """(kind, name) of children whose updates the API server answers 409 Conflict: the write
    is not applied, and the next reconcile sees the object as it was."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """Every update answered 409, in order."""
    lost_uid_writes: int = 0
    """How many of the next status writes that record created checks' uids fail (the
    checks exist, their uids are not recorded), as an API server error after the create."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- the user's side -------------------------------------------------------------------

    def change(self, **engine: Any) -> None:
        """Change engine fields (a new revision)."""
        self.spec = copy.deepcopy(self.spec)
        self.spec["engine"].update(engine)
        self.generation += 1

    def set(self, path: str, value: Any) -> None:
        """Set a spec field by dotted path."""
        self.spec = copy.deepcopy(self.spec)
        node = self.spec
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
        self.generation += 1

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # -- the operator's side -----------------------------------------------------------------

    def reconcile(self) -> ReconcilePlan:
        spec = InferenceDeploymentSpec.model_validate(self.spec)
        workloads = [*self.of("Deployment"), *self.of("LeaderWorkerSet")]
        deployments = [d for o in workloads if (d := observe_deployment(o))]
        others = [
            o
            for body in [*self.of("ConfigMap"), *self.of("Service")]
            if (o := observe_object(body))
        ]
        checks = [observe_check(o) for o in self.of("ParityCheck")]
        pods = [p for o in self.pods.values() if (p := observe_pod(o))]
        extras = [
            o
            for body in [
                *self.of("HTTPRoute"),
                *self.of("ServiceAccount"),
                *self.of("Role"),
                *self.of("RoleBinding"),
                *self.of("NetworkPolicy"),
                *self.of("PodDisruptionBudget"),
                *(
                    d
                    for d in self.of("Deployment")
                    if LABEL_REVISION not in d["metadata"]["labels"]
                ),
            ]
            if (o := observe_object(body))
        ]
        state = DeploymentState(
            owner=Owner(NAME, NAMESPACE, UID),
            generation=self.generation,
            spec=spec,
            status=self.status,
            manual=manual_requests(self.annotations),
            observed=collect(
                UID, deployments, others, checks, pods, owner_name=NAME, extras=extras
            ),
            now=self.now,
            golden=self.golden,
            taken=dict(self.taken),
        )
        plan = plan_reconcile(state)
        # As the controller gathers: the suites of checks to be made, then decide again.
        wanted = unread_suites(plan.create_checks, state.suites)
        if wanted:
            seen = {r: see_suite(r, self.objects.get(("ConfigMap", r.name))) for r in wanted}
            plan = plan_reconcile(replace(state, suites=seen))
        self._apply(plan)
        self.plans.append(plan)
        return plan

    def settle(self, rounds: int = 4) -> ReconcilePlan:
        """Reconcile, let pods become available, and again, until nothing changes."""
        plan = self.reconcile()
        for _ in range(rounds):
            self.make_available()
            plan = self.reconcile()
        return plan

    def _apply(self, plan: ReconcilePlan) -> None:
        for write in plan.sync.writes:
            if isinstance(write, Create):
                self._create_child(write.manifest)
            elif isinstance(write, Update):
                key = (write.manifest["kind"], write.manifest["metadata"]["name"])
                if key in self.conflicts:
                    self.refused.append(key)
                    continue
                self._update(write.manifest)
            elif isinstance(write, Recreate):
                self.objects.pop((write.manifest["kind"], write.manifest["metadata"]["name"]))
                self._create(write.manifest)
            elif isinstance(write, Delete):
                self.objects.pop((write.ref.kind, write.ref.name), None)
        for name in plan.delete_checks:
            self.objects.pop(("ParityCheck", name), None)
        self.status = plan.status
        created = {}
        for manifest in plan.create_checks:
            body = self._create(manifest)
            created[body["metadata"]["name"]] = body["metadata"]["uid"]
        # As the writer does once the checks exist: bind the attempt to them.
        if created and self.lost_uid_writes:
            self.lost_uid_writes -= 1
        else:
            self.status = with_check_uids(self.status, created)
        for key in plan.remove_annotations:
            self.annotations.pop(key, None)

    def _create_child(self, manifest: dict[str, Any]) -> None:
        """As the writer creates a child: a name someone else's object holds is left alone,
        and who holds it is noted; a create that takes its name frees it."""
        ref = f"{manifest['kind']} {manifest['metadata']['name']}"
        existing = self.objects.get((manifest["kind"], manifest["metadata"]["name"]))
        holder = holder_of(existing, manifest) if existing is not None else None
        if holder is not None:
            self.taken[ref] = holder
            return
        self._create(manifest)
        self.taken.pop(ref, None)

    def foreign(self, kind: str, name: str, **fields: Any) -> None:
        """Someone else's object under `name` (no owner reference to the deployment)."""
        metadata = {"name": name, "namespace": NAMESPACE, "uid": f"foreign-{name}"}
        self.objects[(kind, name)] = {"kind": kind, "metadata": metadata, **fields}

    def _create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(manifest)
        key = (body["kind"], body["metadata"]["name"])
        assert key not in self.objects, f"{key} created twice"
        version = next(self._versions)
        body["metadata"]["creationTimestamp"] = self.now.isoformat().replace("+00:00", "Z")
        body["metadata"]["resourceVersion"] = str(version)
        body["metadata"]["uid"] = f"uid-{version}"
        body["metadata"]["generation"] = 1
        if body["kind"] in ("Deployment", "LeaderWorkerSet"):
            body["status"] = {"observedGeneration": 0}
        self.objects[key] = body
        return body

    def _update(self, manifest: dict[str, Any]) -> None:
        key = (manifest["kind"], manifest["metadata"]["name"])
        body = self.objects[key]
        body["metadata"]["labels"] = copy.deepcopy(manifest["metadata"]["labels"])
        body["metadata"]["annotations"] = copy.deepcopy(manifest["metadata"]["annotations"])
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        if "spec" in manifest:
            if body.get("spec") != manifest["spec"]:
                body["metadata"]["generation"] += 1
            body["spec"] = copy.deepcopy(manifest["spec"])

    # -- the cluster's side ------------------------------------------------------------------

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [body for (k, _), body in sorted(self.objects.items()) if k == kind]

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    def deployment(self, revision: str) -> dict[str, Any]:
        return self.objects[("Deployment", f"{NAME}-{revision}")]

    def revisions(self) -> dict[str, int]:
        """Revision -> spec.replicas of every Deployment."""
        return {
            d["metadata"]["labels"][LABEL_REVISION]: d["spec"]["replicas"]
            for d in self.of("Deployment")
            if LABEL_REVISION in d["metadata"]["labels"]
        }

    def make_unavailable(self, revision: str) -> None:
        """Play the Deployment controller: the revision's pods stop being available."""
        body = self.deployment(revision)
        body["status"] = {**body["status"], "readyReplicas": 0, "availableReplicas": 0}

    def make_available(self, revision: str | None = None) -> None:
        """Play the Deployment controller: every (or one) Deployment fully rolled out; and
        the LWS and StatefulSet controllers: each group of a LeaderWorkerSet has its pods,
        ready (pods already there are kept, uids and all)."""
        for body in self.of("LeaderWorkerSet"):
            if revision and body["metadata"]["labels"].get(LABEL_REVISION) != revision:
                continue
            self._group_pods(body)
        for body in [*self.of("Deployment"), *self.of("LeaderWorkerSet")]:
            if revision and body["metadata"]["labels"].get(LABEL_REVISION) != revision:
                continue
            replicas = body["spec"]["replicas"]
            body["status"] = {
                "observedGeneration": body["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            }

    def _group_pods(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        labels = body["metadata"]["labels"]
        size = body["spec"]["leaderWorkerTemplate"]["size"]
        for group in range(body["spec"]["replicas"]):
            for worker in range(size):
                pod = f"{name}-{group}" + (f"-{worker}" if worker else "")
                if pod in self.pods:
                    continue
                self.pods[pod] = {
                    "metadata": {
                        "name": pod,
                        "namespace": NAMESPACE,
                        "uid": f"uid-{next(self._versions)}",
                        "labels": {
                            **labels,
                            LWS_GROUP_INDEX: str(group),
                            LWS_WORKER_INDEX: str(worker),
                        },
                        "annotations": {
                            ANNOTATION_REVISION_HASH: body["metadata"]["annotations"][
                                ANNOTATION_REVISION_HASH
                            ]
                        },
                    },
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }

    def replace_pod(self, name: str) -> None:
        """Play the LWS controller after a pod of a group was deleted: the group comes back
        whole, every pod of it made again (new uids)."""
        labels = self.pods[name]["metadata"]["labels"]
        key = (labels[LABEL_REVISION], labels[LWS_GROUP_INDEX])
        for pod in self.pods.values():
            other = pod["metadata"]["labels"]
            if (other.get(LABEL_REVISION), other.get(LWS_GROUP_INDEX)) == key:
                pod["metadata"]["uid"] = f"uid-{next(self._versions)}"

    def available_canary(self, **engine: Any) -> tuple[str, str]:
        """Settle a stable, change the engine (float16 by default), and make the canary
        available: (stable revision, canary revision), the canary's check not yet run."""
        self.settle()
        stable = self.status.stable_revision
        assert stable is not None
        self.change(**(engine or {"dtype": "float16"}))
        self.reconcile()
        canary = self.status.canary_revision
        assert canary is not None
        self.make_available(canary)
        self.reconcile()
        return stable, canary

    def unschedulable_pod(self, revision: str, message: str) -> None:
        self.pods[f"{NAME}-{revision}-x"] = {
            "metadata": {
                "name": f"{NAME}-{revision}-x",
                "namespace": NAMESPACE,
                "labels": {
                    "app.kubernetes.io/managed-by": "infergate",
                    "infergate.io/deployment": NAME,
                    LABEL_REVISION: revision,
                },
            },
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ]
            },
        }

    def set_check(
        self,
        name: str,
        phase: str,
        *,
        passed: bool | None = None,
        bound: bool = True,
        **extra: Any,
    ) -> None:
        """Write a ParityCheck's status, as the runner would: a verdict bound to the spec,
        generation and revisions it judged (unless `bound` is False: a forged one)."""
        body = self.objects[("ParityCheck", name)]
        spec = body["spec"]
        status: dict[str, Any] = {"phase": phase}
        if bound:
            # A golden baseline resolves to the record's revision, as the runner writes it.
            golden = spec["baseline"].get("golden") or {}
            status["baselineRevision"] = spec["baseline"].get("revision") or golden.get("revision")
            status["candidateRevision"] = spec["candidate"].get("revision")
        if passed is not None:
            status["verdict"] = {"passed": passed, "outcome": phase, "summary": f"{phase} check"}
            if bound:
                status["verdict"] |= {
                    "specDigest": spec_digest(spec),
                    "generation": body["metadata"]["generation"],
                }
                if spec.get("suite", {}).get("digest"):
                    status["verdict"]["suiteDigest"] = spec["suite"]["digest"]
        body["status"] = status | extra

    def condition(self, type_: str) -> tuple[str, str]:
        for condition in self.status.conditions:
            if condition.type == type_:
                return condition.status.value, condition.reason
        raise AssertionError(f"no {type_} condition in {self.status.conditions}")

    def events(self) -> list[str]:
        return [event.reason for plan in self.plans for event in plan.events]
