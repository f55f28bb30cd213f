"""Support of the traffic e2e tests: vLLM deployments, a client of the stable Service, and
the engines' own counters.

A vLLM engine pod runs `vllm serve` from the vLLM venv on the executor (eager mode, a KV
cache small enough to preempt under load). The client resolves a Service's ready
endpoints from its EndpointSlices (never a ClusterIP), as a client in the cluster would
through kube-proxy, and records every request's latency and the pod that answered it.
"""

from __future__ import annotations

import copy
import json
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.e2e.canary import SHORT_CONTEXT
from tests.e2e.canary import SUITE as CANARY_SUITE
from tests.e2e.support import MODEL_NAME, fixture_model
from tests.harness import Cluster

VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
# vLLM's CPU worker and the machine's other work share two cores: one model step may
# wait minutes for its core, more than vLLM's 300 s default before it declares the
# engine dead.
SLOW_MACHINE_ENV = [{"name": "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "value": "3600"}]
# Client requests generate exactly this many tokens; the parity runner's requests never
# fall in the same bucket of vLLM's generated-tokens histogram (1, 2, 5, 10, 20, 50, 100,
# ...): its completions take at most sampling.maxTokens (SUITE_MAX_TOKENS, 20..50), its
# scoring 1. So an engine's own histogram tells client requests apart from the runner's.
CLIENT_TOKENS = 64
SUITE_MAX_TOKENS = 32
_TEXTS = [
    "The weather today is",
    "Once upon a time there was",
    "The capital of France is",
    "In the beginning the universe was",
    "A recipe for bread needs flour,",
    "The quick brown fox jumps over",
    "My favourite colour is",
    "To be or not to be, that is",
    "The train leaves the station at",
    "Water boils at a temperature of",
    "The best way to learn a language is",
    "Yesterday I went to the market and bought",
]
_ZH = ["今天早上", "我们明天去", "这本书讲的是", "北京的天气"]
# The parity core's evidence floor holds here as everywhere: the shared short-context
# suite (tests/e2e/canary.py: 36 prompts of about a hundred tokens, Chinese and English
# text and token ids) gives the profiles' 32 prompts and, with SUITE_MAX_TOKENS answers,
# several thousand teacher-forced positions, whatever the answers' lengths.
SUITE = copy.deepcopy(CANARY_SUITE)
# The hidden-state probes (a pooling vLLM per side) are left out: these tests are about
# traffic, and the served answers (tokens, teacher-forced logprobs) judge the canary.
HIDDEN_CHECKS = [
    "maxHiddenMaxAbsErr",
    "maxHiddenRelL2P99",
    "minHiddenCosineP1",
    "maxLongSeqDivergenceRate",
]
# Two vLLM processes of one configuration are expected to answer bit-identically on this
# CPU (greedy, any seed; experiments/batch_invariance.py measures it), so a benign change
# is judged as a replay (`strict`: every token and logprob equal, the profile's own evidence floor of
# 32 prompts and 1,024 positions); a harmful change fails it at once.
# minLongPrompts 0, stated (SHORT_CONTEXT): the CPU fixture engines (maxModelLen 512, two
# shared cores) cannot serve 8K-token prompts, so the long-context checks are not part of
# these verdicts, and the verdicts say so. No limit is relaxed.
STRICT = {
    "profile": "strict",
    "disabledChecks": list(HIDDEN_CHECKS),
    "thresholds": dict(SHORT_CONTEXT),
}


def suite_parity(max_tokens: int = SUITE_MAX_TOKENS) -> dict[str, Any]:
    return {
        "suite": {"inline": copy.deepcopy(SUITE)},
        "sampling": {"maxTokens": max_tokens, "topLogprobs": 5},
        **copy.deepcopy(STRICT),
        "hiddenStates": {"enabled": False},
        "runner": {"activeDeadlineSeconds": 1500, "backoffLimit": 0},
        "deadlineSeconds": 1800,
    }


def vllm_deployment(
    name: str,
    *,
    seed: int = 42,
    config: dict[str, Any] | None = None,
    traffic: dict[str, Any] | None = None,
    parity: dict[str, Any] | None = None,
    mirror: int = 0,
) -> dict[str, Any]:
    """A vLLM bfloat16 deployment of the fixture model on the simulated GPU nodes, with
    `mirror` mirror pods in front of its stable revision (0: no mirror)."""
    rollout: dict[str, Any] = {
        "canaryReplicas": 1,
        "autoPromote": True,
        "autoRollback": True,
        "progressDeadlineSeconds": 1800,
        "parity": parity or suite_parity(),
        "traffic": traffic or {"mode": "dark"},
    }
    if mirror:
        rollout["mirror"] = {"replicas": mirror}
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": MODEL_NAME, "uri": f"file://{fixture_model()}"},
            "engine": {
                "kind": "vllm",
                "image": VLLM_IMAGE,
                "dtype": "bfloat16",
                "maxModelLen": 512,
                "seed": seed,
                # Batch-invariant kernels fail on the CPU build (see demo/demo.py).
                "deterministic": False,
                "config": copy.deepcopy(config or {}),
                "args": ["--enforce-eager", "--max-num-seqs", "16"],
                "env": copy.deepcopy(SLOW_MACHINE_ENV),
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "replicas": 1,
            "rollout": rollout,
        },
    }


def service_urls(cluster: Cluster, namespace: str, service: str, port: str = "http") -> list[str]:
    """Ready endpoints of a Service, from its EndpointSlices."""
    slices = cluster.get_json(
        "endpointslices.discovery.k8s.io", "-n", namespace,
        "-l", f"kubernetes.io/service-name={service}",
    )["items"]  # fmt: skip
    urls = []
    for endpoint_slice in slices:
        number = next(
            (p["port"] for p in endpoint_slice.get("ports") or [] if p.get("name") == port), None
        )
        if number is None:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            if conditions.get("ready") is False or conditions.get("terminating"):
                continue
            urls += [f"http://{address}:{number}" for address in endpoint.get("addresses") or []]
    return sorted(urls)


def pod_url(pod: dict[str, Any], port: int = 8000) -> str:
    return f"http://{pod['status']['podIP']}:{port}"


def client_requests_served(url: str) -> int | None:
    """Requests of CLIENT_TOKENS generated tokens the engine at `url` finished, by its own
    /metrics (vllm:request_generation_tokens histogram); None when it cannot be read."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10.0).text
    except httpx.HTTPError:
        return None
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        match = re.match(r"vllm:request_generation_tokens_bucket\{(.*)\} ([0-9.e+]+)$", line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        le = float(labels["le"]) if labels["le"] != "+Inf" else float("inf")
        buckets[le] = buckets.get(le, 0.0) + float(match.group(2))
    above = max((le for le in buckets if le < CLIENT_TOKENS), default=None)
    upto = min((le for le in buckets if le >= CLIENT_TOKENS), default=None)
    if above is None or upto is None:
        return None
    return int(buckets[upto] - buckets[above])


@dataclass
class Sample:
    """One client request."""

    route: str
    url: str
    seconds: float
    ok: bool
    at: float
    answer: str = ""
    """The status and the start of the body, or the transport error (to tell a failure's cause)."""


@dataclass
class Client:
    """Sends greedy CLIENT_TOKENS-token completions in a loop, one route after another.

    Each route is a function giving the URLs to call now (a Service's ready endpoints);
    requests go round robin over them. Latencies and the answering URL are recorded.
    """

    routes: dict[str, Any]
    pause: float = 0.05
    prompts: tuple[str, ...] = (*_TEXTS, *_ZH)
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Client:
        self._thread = threading.Thread(target=self._run, name="e2e-client", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _run(self) -> None:
        turn = 0
        urls: dict[str, list[str]] = {}
        refreshed = 0.0
        with httpx.Client(timeout=120.0) as http:
            while not self._stop.is_set():
                if time.monotonic() - refreshed > 1.0:
                    urls = {name: list(resolve()) for name, resolve in self.routes.items()}
                    refreshed = time.monotonic()
                for name in self.routes:
                    choices = urls.get(name) or []
                    if not choices:
                        continue
                    url = choices[turn % len(choices)]
                    body = {
                        "model": MODEL_NAME,
                        "prompt": self.prompts[turn % len(self.prompts)],
                        "max_tokens": CLIENT_TOKENS,
                        "min_tokens": CLIENT_TOKENS,
                        "temperature": 0 if turn % 2 else 0.7,
                        "ignore_eos": True,
                    }
                    started = time.monotonic()
                    try:
                        answer = http.post(f"{url}/v1/completions", json=body)
                        ok, why = (
                            answer.status_code == 200,
                            f"{answer.status_code} {answer.text[:200]}",
                        )
                    except httpx.HTTPError as err:
                        ok, why = False, f"{type(err).__name__}: {err}"
                    self.samples.append(
                        Sample(name, url, time.monotonic() - started, ok, time.time(), why)
                    )
                turn += 1
                self._stop.wait(self.pause)

    def figures(
        self, route: str, since: float = 0.0, until: float = float("inf")
    ) -> dict[str, Any]:
        chosen = [s for s in self.samples if s.route == route and since <= s.at < until]
        seconds = sorted(s.seconds for s in chosen if s.ok)
        if not seconds:
            return {"requests": len(chosen), "ok": 0}
        p99 = seconds[min(len(seconds) - 1, round(0.99 * (len(seconds) - 1)))]
        return {
            "requests": len(chosen),
            "ok": len(seconds),
            "median_ms": round(1000 * statistics.median(seconds), 1),
            "p99_ms": round(1000 * p99, 1),
        }


def route_weights(cluster: Cluster, namespace: str, name: str) -> dict[str, int] | None:
    """Revision -> weight of the deployment's HTTPRoute, None while it has none."""
    result = cluster.kubectl(
        "get", "httproutes.gateway.networking.k8s.io", name, "-n", namespace, "-o", "json",
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        return None
    route = json.loads(result.stdout)
    weights: dict[str, int] = {}
    for rule in route["spec"].get("rules") or []:
        for backend in rule.get("backendRefs") or []:
            weights[backend["name"].removeprefix(f"{name}-")] = int(backend.get("weight", 1))
    return weights
