"""In-memory stand-ins for the API server and for engines, for the runner's unit tests.

`FakeApi` keeps objects as the API server would return them (camelCase dicts) and
bumps resourceVersion on every write, refusing stale status replacements with a 409,
as the real one does. `ToyEngine` is a deterministic next-token model with top-k
logprobs, teacher forcing and hidden states; a `shift` makes a numerically different
engine, and `fail_after` injects a fault after that many completions. It counts what it
serves, by route, and the seconds it worked (`SECONDS_PER_REQUEST` each), and shows them
on its /metrics page the way vLLM (`adapter=False`) or infergate's adapter does.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.accounting import VLLM_ENGINE_ROUTES
from infergate.engines.client import Completion
from infergate.engines.layer_probe import LayerStates
from infergate.errors import ConflictError, NotFoundError
from infergate.parity.layers import layer_state_names
from infergate.parity.record import TeacherForced, TopLogprobs
from infergate.plan.deployment.observed import ANNOTATION_REVISION_SPEC
from infergate.render.check_names import SideName, probe_name
from infergate.runner.drive import Channels
from infergate.runner.endpoints import LOCAL_EXECUTOR
from infergate.runner.overhead import RequestLog
from infergate.runner.run import Connector
from infergate.runner.sides import EndpointDescription, SideTarget

NS = "llm"
VOCAB = 64
HIDDEN = 16
LAYERS = 4
SECONDS_PER_REQUEST = 0.001
"""What a toy engine says each request took (its clock, not the test's)."""


def uid_of(name: str) -> str:
    """The uid the fake gives the object `name` (a ParityCheck, InferenceDeployment, Service)."""
    return f"uid-{name}"


def controller_ref(kind: str, name: str) -> dict[str, Any]:
    """A controlling owner reference to the fake's object `name`, as infergate writes it."""
    api_version = "v1" if kind == "Service" else "infergate.io/v1alpha1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid_of(name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload_ref(kind: str, name: str) -> dict[str, Any]:
    """A controlling owner reference as Kubernetes' own controllers write it (apps/v1)."""
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name,
        "uid": f"uid-{kind.lower()}-{name}",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def deployment_owner(name: str) -> dict[str, Any]:
    """The InferenceDeployment `name` as controller of its revision objects."""
    return controller_ref("InferenceDeployment", name)


def check_owner(name: str) -> dict[str, Any]:
    """The ParityCheck `name` as controller of its probes."""
    return controller_ref("ParityCheck", name)


class FakeApi:
    """A namespace of the API server, in memory.

    Its builders make objects as infergate and the cluster do: a revision's ConfigMap and
    Service controlled by their InferenceDeployment, a probe Service by its check, and
    EndpointSlices published by the local executor and controlled by their Service.
    """

    def __init__(self, namespace: str = NS) -> None:
        self.namespace = namespace
        self.checks: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.config_maps: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, list[dict[str, Any]]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.replica_sets: dict[str, dict[str, Any]] = {}
        self.stateful_sets: dict[str, dict[str, Any]] = {}
        self.recorded: dict[tuple[str, str], str] = {}
        """(InferenceDeployment, revision) -> the Deployment uid the operator recorded."""
        self.status_writes: list[dict[str, Any]] = []
        self.list_refusal: Exception | None = None
        """Raised by `inference_deployments` (e.g. a 403 when the Role lacks `list`)."""
        self.deployment_lists = 0
        self.on_status_write: Callable[[FakeApi], None] | None = None
        self._version = 1

    def _bump(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def add_check(
        self, name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None = None
    ) -> None:
        check = {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": "ParityCheck",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid_of(name),
                "generation": 1,
            },
            "spec": dict(spec),
        }
        if status is not None:
            check["status"] = dict(status)
        self._bump(check)
        self.checks[name] = check

    def get_check(self, name: str) -> dict[str, Any]:
        if name not in self.checks:
            raise NotFoundError(f"get ParityCheck {self.namespace}/{name}: 404", status=404)
        return copy.deepcopy(self.checks[name])

    def patch_check_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        check = self.checks[name]
        if (
            resource_version is not None
            and resource_version != check["metadata"]["resourceVersion"]
        ):
            raise ConflictError(f"patch ParityCheck {name} status: 409", status=409)
        check["status"] = {**(check.get("status") or {}), **copy.deepcopy(dict(status))}
        self._bump(check)
        self.status_writes.append(copy.deepcopy(dict(status)))
        if self.on_status_write is not None:
            self.on_status_write(self)
        return copy.deepcopy(check)

    def replace_check_status(self, check: Mapping[str, Any]) -> dict[str, Any]:
        name = check["metadata"]["name"]
        current = self.checks[name]
        if check["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ConflictError(f"update ParityCheck {name} status: 409", status=409)
        current["status"] = copy.deepcopy(dict(check["status"]))
        self._bump(current)
        self.status_writes.append(copy.deepcopy(dict(check["status"])))
        return copy.deepcopy(current)

    def write_report(
        self,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, str],
        labels: Mapping[str, str],
        owner: Mapping[str, Any] | None,
    ) -> None:
        self.config_maps[name] = {
            "metadata": {
                "name": name,
                "labels": dict(labels),
                "ownerReferences": [dict(owner or {})],
            },
            "data": dict(data),
            "binaryData": dict(binary_data),
        }

    def inference_deployment(self, name: str) -> dict[str, Any] | None:
        """The InferenceDeployment, its status listing the Deployment uid the operator
        recorded for each revision made with `add_revision`."""
        found = self.deployments.get(name)
        if found is None:
            return None
        found = copy.deepcopy(found)
        status = found.setdefault("status", {})
        # Revisions a test lists are the ones remembered; none listed: every one made.
        forgets = "revisions" in status
        records = status.setdefault("revisions", [])
        listed = {r.get("hash"): r for r in records}
        for (owner, revision), uid in self.recorded.items():
            if owner != name:
                continue
            if revision in listed:
                listed[revision].setdefault("deploymentUid", uid)
            elif not forgets:
                records.append({"hash": revision, "deploymentUid": uid})
        return found

    def inference_deployments(self) -> list[dict[str, Any]]:
        self.deployment_lists += 1
        if self.list_refusal is not None:
            raise self.list_refusal
        return [
            {**d, "metadata": {"namespace": self.namespace, **d["metadata"]}}
            for d in copy.deepcopy(list(self.deployments.values()))
        ]

    def config_map(self, name: str) -> dict[str, Any] | None:
        return self.config_maps.get(name)

    def service(self, name: str) -> dict[str, Any] | None:
        return self.services.get(name)

    def endpoint_slices(self, service: str) -> list[dict[str, Any]]:
        return self.slices.get(service, [])

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.pods.get(name)

    def replica_set(self, name: str) -> dict[str, Any] | None:
        return self.replica_sets.get(name)

    def stateful_set(self, name: str) -> dict[str, Any] | None:
        return self.stateful_sets.get(name)

    # -- builders ----------------------------------------------------------------------

    def add_deployment(self, name: str, status: Mapping[str, Any] | None = None) -> None:
        self.deployments[name] = {
            "metadata": {"name": name, "uid": uid_of(name)},
            "status": dict(status or {}),
        }

    def add_probe(self, check: str, side: SideName, ip: str | None) -> None:
        """The probe Service of one side of `check` and its pod, as its controller makes
        them."""
        name = probe_name(check, side)
        pod = self.add_pod(name, ip, owner=check_owner(check), labels={"probe": name})
        self.add_service(name, ip, owner=check_owner(check), pod=pod)

    def add_pod(
        self, name: str, ip: str | None, *, owner: Mapping[str, Any], labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """A pod controlled by `owner`, running at `ip`."""
        pod = {
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": f"uid-pod-{name}",
                "labels": dict(labels),
                "ownerReferences": [dict(owner)],
            },
            "status": {"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {},
        }
        self.pods[name] = pod
        return pod

    def add_revision_pod(self, name: str, revision: str, ip: str | None) -> dict[str, Any]:
        """The revision's Deployment `name` (its uid recorded by the operator), its
        ReplicaSet and one pod of it at `ip`, as the cluster's controllers make them."""
        template_hash = "5d8f7c9b4"
        selector = {"infergate.io/revision": revision}
        replica_set = f"{name}-{template_hash}"
        self.replica_sets[replica_set] = {
            "kind": "ReplicaSet",
            "metadata": {
                "name": replica_set,
                "namespace": self.namespace,
                "uid": workload_ref("ReplicaSet", replica_set)["uid"],
                "labels": {**selector, "pod-template-hash": template_hash},
                "ownerReferences": [workload_ref("Deployment", name)],
            },
            "spec": {"selector": {"matchLabels": {**selector, "pod-template-hash": template_hash}}},
        }
        return self.add_pod(
            f"{replica_set}-x7k2p",
            ip,
            owner=workload_ref("ReplicaSet", replica_set),
            labels={**selector, "pod-template-hash": template_hash},
        )

    def add_revision(
        self,
        deployment: str,
        revision: str,
        *,
        engine: str,
        dtype: str,
        ip: str | None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        name = f"{deployment}-{revision}"
        config: dict[str, Any] = {
            "engine": engine,
            "dtype": dtype,
            "servedModelName": "fixture",
            "revision": revision,
        }
        if engine == "mindformers":
            config["mindformers"] = {"model_config": dict(overrides or {})}
        else:
            config["hfOverrides"] = dict(overrides or {})
        # As the operator annotates a revision's ConfigMap: the revision's own spec.
        revision_spec = {
            "model": {"name": "fixture", "uri": "pvc://models/fixture"},
            "engine": {"kind": engine, "dtype": dtype, "config": dict(overrides or {})},
            "accelerator": {"kind": "ascend-npu" if engine == "mindformers" else "nvidia-gpu"},
        }
        self.config_maps[name] = {
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid_of(name),
                "annotations": {ANNOTATION_REVISION_SPEC: json.dumps(revision_spec)},
                "ownerReferences": [deployment_owner(deployment)],
            },
            "data": {"engine.json": json.dumps(config)},
        }
        self.recorded[(deployment, revision)] = workload_ref("Deployment", name)["uid"]
        pod = self.add_revision_pod(name, revision, ip)
        self.add_service(name, ip, owner=deployment_owner(deployment), pod=pod)

    def add_service(
        self,
        name: str,
        ip: str | None,
        *,
        owner: Mapping[str, Any],
        ready: bool = True,
        pod: Mapping[str, Any] | None = None,
    ) -> None:
        """A Service controlled by `owner`, and the slice the local executor publishes
        for it (its endpoint's targetRef naming `pod`)."""
        self.services[name] = {
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid_of(name),
                "ownerReferences": [dict(owner)],
            },
            "spec": {
                "ports": [
                    {"name": "http", "port": 8000, "targetPort": "http"},
                    {"name": "fingerprints", "port": 8001, "targetPort": "fingerprints"},
                ]
            },
        }
        endpoints: list[dict[str, Any]] = (
            [] if ip is None else [{"addresses": [ip], "conditions": {"ready": ready}}]
        )
        if endpoints and pod is not None:
            meta = pod["metadata"]
            endpoints[0]["targetRef"] = {
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            }
        self.slices[name] = [
            {
                "metadata": {
                    "name": f"{name}-local",
                    "namespace": self.namespace,
                    "labels": {
                        "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": LOCAL_EXECUTOR,
                    },
                    "ownerReferences": [controller_ref("Service", name)],
                },
                "addressType": "FQDN",
                "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8000}, {"name": "fingerprints", "port": 8001}],
            }
        ]


@dataclass
class ToyEngine:
    """Next token = (5 * last + 1 + offset) % VOCAB with probability 0.9, greedy."""

    offset: int = 0
    shift: float = 0.0
    """Added to the top logprob and to hidden states: a numerically different engine."""
    fail_after: int | None = None
    fault: Callable[[], Exception] | None = None
    completions: int = 0
    adapter: bool = True
    effective_config: dict[str, Any] = field(
        default_factory=lambda: {"dtype": "float16", "rms_norm_eps": 1e-6}
    )
    fingerprints: dict[str, Any] = field(
        default_factory=lambda: {
            "tokenizer.digest": "tok-1",
            "weights.digest": "w-1",
            "model_config.rms_norm_eps": 1e-6,
            "versions.engine": "toy 1",
        }
    )
    probe_ids: list[int] = field(default_factory=lambda: [1, 17, 42])
    corrupt_layer: int | None = None
    """Decoder layer whose output (and every later state) the layer probe perturbs."""
    served: Counter[str] = field(default_factory=Counter)
    busy_seconds: float = 0.0
    metrics_served: bool = True
    states_seconds: bool = False
    """Whether each answer states its engine seconds (the adapter's header)."""

    def serve(self, route: str) -> None:
        """Count one request on `route`, as the engine's own metrics do."""
        self.served[route] += 1
        if route != "/health":
            self.busy_seconds += SECONDS_PER_REQUEST

    def metrics(self) -> str:
        """Its /metrics page: vLLM's latency histogram, or the adapter's counters."""
        if not self.adapter:
            counted = sum(n for route, n in self.served.items() if route in VLLM_ENGINE_ROUTES)
            return (
                f'vllm:e2e_request_latency_seconds_count{{model_name="fixture"}} {counted}.0\n'
                f'vllm:e2e_request_latency_seconds_sum{{model_name="fixture"}} '
                f"{self.busy_seconds}\n"
            )
        lines = [
            f'infergate_adapter_requests_total{{route="{route}",status="200"}} {n}'
            for route, n in sorted(self.served.items())
        ]
        lines.append(f"infergate_adapter_busy_seconds_total {self.busy_seconds}")
        return "\n".join(lines) + "\n"

    def _top(self, context: Sequence[int], k: int) -> list[tuple[int, float]]:
        best = (5 * context[-1] + 1 + self.offset) % VOCAB
        probs = [0.9, 0.05, 0.03, 0.01, 0.005][:k]
        logprobs = [float(np.log(p)) for p in probs]
        logprobs[0] += self.shift
        return [((best + j) % VOCAB, lp) for j, lp in enumerate(logprobs)]

    def _maybe_fail(self) -> None:
        if (
            self.fail_after is not None
            and self.completions >= self.fail_after
            and self.fault is not None
        ):
            raise self.fault()

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % VOCAB for c in text]

    def complete(
        self,
        prompt: Sequence[int] | str,
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,  # noqa: ARG002
        ignore_eos: bool = True,  # noqa: ARG002 - the toy model has no end of sequence
    ) -> Completion:
        self._maybe_fail()
        self.completions += 1
        self.serve("/v1/completions")
        # Text comes as text, as engines take it; the toy tokenizes it itself.
        prompt = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        context = list(prompt)
        steps = []
        for _ in range(max_tokens):
            top = self._top(context, top_logprobs)
            steps.append(top)
            context.append(top[0][0])
        out = context[len(prompt) :]
        return Completion(
            list(prompt), out, TopLogprobs.from_pairs(steps, k=top_logprobs), f"t{out}", "length"
        )

    def score(
        self,
        prompt: Sequence[int],
        forced: Sequence[int],
        *,
        top_logprobs: int,
        seed: int,  # noqa: ARG002
    ) -> TeacherForced:
        self._maybe_fail()
        self.serve("/v1/completions")
        context = list(prompt)
        targets, steps = [], []
        for token in forced:
            top = self._top(context, top_logprobs)
            steps.append(top)
            scored = dict(top)
            targets.append(scored.get(token, float(np.log(1e-4))))
            context.append(token)
        return TeacherForced(
            np.asarray(list(forced), np.int64),
            np.asarray(targets),
            TopLogprobs.from_pairs(steps, k=top_logprobs),
        )

    def layer_states(
        self,
        token_ids: Sequence[int],
        *,
        positions: Sequence[int] | None = None,
        sketch_dims: int | None = None,  # noqa: ARG002 - the toy answers full states
    ) -> LayerStates:
        """LAYERS + 2 states; from `corrupt_layer` on, each state is off by `shift`."""
        ids = np.asarray(token_ids)
        chosen = list(range(len(ids))) if positions is None else list(positions)
        base = np.cos(np.outer(ids[chosen] + 1, np.arange(1, HIDDEN + 1)) * 0.1)
        states = []
        for index in range(LAYERS + 2):
            state = base * (1.0 + 0.1 * index)
            if self.corrupt_layer is not None and index >= self.corrupt_layer + 1:
                state = state * (1.0 + 0.5)
            states.append(state)
        return LayerStates(
            layer_state_names(LAYERS), tuple(chosen), np.stack(states).astype(np.float32),
            None, None,
        )  # fmt: skip

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        self._maybe_fail()
        self.serve("/v1/parity/hidden_states" if self.adapter else "/pooling")
        ids = np.asarray(token_ids)
        base = np.cos(np.outer(ids + 1, np.arange(1, HIDDEN + 1)) * 0.1).astype(np.float32)
        return base * np.float32(1.0 + self.shift)


class _Counted:
    """A toy engine as the runner's HTTP channels see it: each call is a request on a path."""

    def __init__(
        self,
        engine: ToyEngine,
        log: RequestLog,
        url: str,
        pooling: bool,
    ) -> None:
        self._engine, self._pooling = engine, pooling
        self._sent, self._answered = log.recorder(url), log.answer_recorder(url)

    def _record(self, path: str) -> None:
        """The request is sent and (the toy answers at once) answered."""
        self._sent(path)
        stated = self._engine.adapter and self._engine.states_seconds
        self._answered(path, f"{SECONDS_PER_REQUEST:.6f}" if stated else None)

    def tokenize(self, text: str) -> list[int]:
        self._record("/tokenize")
        return self._engine.tokenize(text)

    def complete(self, prompt: Sequence[int] | str, **kwargs: Any) -> Completion:
        self._record("/v1/completions")
        return self._engine.complete(prompt, **kwargs)

    def chat(self, messages: Sequence[Mapping[str, str]], **kwargs: Any) -> Completion:
        raise NotImplementedError

    def score(self, prompt: Sequence[int], forced: Sequence[int], **kwargs: Any) -> TeacherForced:
        self._record("/v1/completions")
        return self._engine.score(prompt, forced, **kwargs)

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        self._record("/pooling" if self._pooling else "/v1/parity/hidden_states")
        return self._engine.hidden_states(token_ids)


@dataclass
class ToyConnector:
    """Connects SideTargets to ToyEngines by URL."""

    engines: dict[str, ToyEngine]
    unhealthy: set[str] = field(default_factory=set)

    def connector(self) -> Connector:
        return Connector(
            info=self, open=self.open, health=self.health, layers=self.layers, scrape=self.scrape
        )

    def layers(self, target: SideTarget, timeout: float) -> ToyEngine | None:  # noqa: ARG002
        return self.engines[target.layer_url] if target.layer_url is not None else None

    def describe(self, url: str) -> EndpointDescription:
        engine = self.engines[url]
        if not engine.adapter:
            return EndpointDescription(engine_version="0.32.0")
        return EndpointDescription(
            engine="toy",
            engine_version="1",
            dtype="float16",
            effective_config=engine.effective_config,
            fingerprints={**engine.fingerprints, "tokenizer.probe_ids": engine.probe_ids},
        )

    def fingerprints(self, url: str) -> dict[str, Any]:
        """The fingerprint server beside a (vLLM-like) side: on port 8001 of its address."""
        return dict(self.engines[url.replace(":8001", ":8000")].fingerprints)

    def probe_ids(self, url: str, model: str) -> list[int]:  # noqa: ARG002
        return list(self.engines[url].probe_ids)

    def open(
        self,
        target: SideTarget,
        stack: ExitStack,  # noqa: ARG002
        timeout: float,  # noqa: ARG002
        log: RequestLog,
    ) -> Channels:
        engine = _Counted(self.engines[target.url], log, target.url, pooling=False)
        probe = None
        if target.probe_url:
            probe = _Counted(
                self.engines[target.probe_url],
                log,
                target.probe_url,
                pooling=target.probe_kind == "vllm-pooling",
            )
        return Channels(name=f"{target.side} ({target.url})", serving=engine, probe=probe)

    def health(self, urls: list[str], timeout: float) -> None:
        from infergate.runner.drive import SideUnavailableError

        for url in urls:
            if url in self.unhealthy:
                raise SideUnavailableError(f"{url} is not healthy after {timeout:.0f}s: refused")
            self.engines[url].serve("/health")

    def scrape(self, url: str) -> str:
        from infergate.accounting import OverheadError

        engine = self.engines[url]
        if not engine.metrics_served:
            raise OverheadError("GET /metrics: HTTP 404")
        return engine.metrics()
