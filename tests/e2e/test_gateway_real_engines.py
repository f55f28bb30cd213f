"""Requests through a real Gateway (Traefik) to real vLLM engine pods, counted by the engines.

The operator (a pod, tests/e2e/support.py) rolls a benign canary (another seed: a new
revision, the same greedy answers, judged as a replay) out under `rollout.traffic.mode:
gateway` with one step, 30%, then promotion. The engine pods run `vllm serve` for real on
the local executor, each on its own loopback pod IP; the executor publishes those IPs in
FQDN EndpointSlices of the revision Services (localcluster/executor/endpoints.py: the API
server refuses loopback addresses in IPv4 slices). Traefik (tests/integration/traefik.py),
with its Kubernetes Gateway provider, serves the Gateway the route attaches to and
forwards to those slices' addresses: to the engines themselves. Nothing here writes a
slice or a route; the route is the operator's, the slices the executor's.

Before each batch the test waits until Traefik routes with the route's weights, each
revision to exactly the endpoints of its Service's slices, and those are the revision's
live engine pod. Then N completions of CLIENT_TOKENS tokens go through Traefik, and each
engine's own /metrics says how many it finished (vLLM's generated-tokens histogram: the
parity runner's requests never reach that bucket, tests/e2e/traffic.py). A user checks:

- weight 0, the canary Ready and its check asked for (Pending or Running; the phases at
  the batch's start and end are printed): no request reaches the canary;
- at 30%: the canary's count lies inside the 99.9% binomial interval of N at 0.3;
- promoted: every request reaches the new stable;
- every answer is a real completion: 200, non-empty text, CLIENT_TOKENS tokens.

    flock /tmp/heavy.lock env INFERGATE_REQUIRE_ENGINES=1 INFERGATE_REQUIRE_E2E=1 \\
        INFERGATE_REQUIRE_GATEWAY=1 .venv/bin/pytest tests/e2e/test_gateway_real_engines.py \\
        -m slow -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.canary import Rollout
from tests.e2e.support import MODEL_NAME, Stopwatch, check_status
from tests.e2e.traffic import (
    CLIENT_TOKENS,
    client_requests_served,
    pod_url,
    route_weights,
    vllm_deployment,
)
from tests.harness import REPO, Cluster, wait_for
from tests.integration.traefik import (
    Traefik,
    binomial_interval,
    route_accepted,
    serve_gateway,
    slice_endpoints,
    traefik_path,
    traefik_route,
)

# Long (real engines): `make test-slow` runs it; `make test` deselects it and says so.
pytestmark = pytest.mark.slow
__all__ = ["traefik_path"]

NAME = "qwen"
GATEWAY = "public"
# Requests per batch, a few in flight: short enough for two shared cores.
REQUESTS = 48
IN_FLIGHT = 4
CONFIDENCE = 0.999
STEP_WEIGHT = 30
# The step holds its weight this long; the batch at 30% is sent, and the weight read
# again, well inside it. Then the operator promotes on its own.
STEP_PAUSE_S = 300
TRAFFIC = {
    "mode": "gateway",
    "gateway": {
        "parentRefs": [{"name": GATEWAY}],
        "steps": [{"weight": STEP_WEIGHT, "pauseSeconds": STEP_PAUSE_S}],
    },
}
PROMPTS = (
    "The weather today is",
    "Once upon a time there was",
    "The capital of France is",
    "A recipe for bread needs flour,",
    "今天早上",
    "这本书讲的是",
)
TERMINAL = ("Passed", "Failed", "Inconclusive", "Error")
FIGURES = Path(os.environ.get("INFERGATE_TRAFFIC_FIGURES", REPO / "out" / "traffic"))


@pytest.fixture
def gateway(
    traefik_path: Path, cluster: Cluster, e2e_namespace: str, tmp_path: Path
) -> Iterator[Traefik]:
    """Traefik serving the Gateway `public` of the test's namespace."""
    with serve_gateway(traefik_path, cluster, e2e_namespace, GATEWAY, tmp_path) as traefik:
        yield traefik


def _engine_url(rollout: Rollout, revision: str) -> str | None:
    """The revision's live, Ready engine pod on the executor, as http://<pod IP>:8000."""
    for pod in rollout.live_pods(revision):
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return pod_url(pod)
    return None


def _serving(
    cluster: Cluster, traefik: Traefik, rollout: Rollout, weights: dict[str, int], canary: str
) -> dict[str, str]:
    """Wait until the operator's route has `weights` and Traefik routes with exactly them,
    each revision to exactly the endpoints of its Service's slices, and those are the
    address of the revision's Ready engine pod; revision -> that engine's URL."""
    namespace = rollout.namespace

    def at_weights() -> bool:
        route = route_weights(cluster, namespace, NAME) or {}
        # The canary's weight only grows (0, the step, promotion): past it, no wait helps.
        assert route.get(canary, 0) <= weights.get(canary, 0), (
            f"the route moved past {weights} before the batch: {route}"
        )
        return route == weights

    wait_for(at_weights, 300, f"the operator's HTTPRoute at {weights}")
    engines: dict[str, str] = {}

    def in_traefik() -> bool:
        routed = traefik_route(traefik, namespace, NAME)
        if {r: w for r, (w, _) in routed.items()} != weights:
            return False
        for revision, (_, servers) in routed.items():
            url = _engine_url(rollout, revision)
            if url is None:
                return False
            endpoints = slice_endpoints(cluster, namespace, f"{NAME}-{revision}")
            if servers != endpoints or endpoints != {url.removeprefix("http://")}:
                return False
            engines[revision] = url
        return route_accepted(cluster, namespace, NAME)

    try:
        wait_for(in_traefik, 180, f"Traefik routing with {weights} to the engine pods")
    except AssertionError as error:
        raise AssertionError(f"{error}\ntraefik log (tail):\n{traefik.log()}") from None
    return engines


def _counters(engines: dict[str, str]) -> dict[str, int]:
    counts = {}
    for revision, url in engines.items():
        count = client_requests_served(url)
        assert count is not None, f"the /metrics of {revision}'s engine at {url} cannot be read"
        counts[revision] = count
    return counts


def _complete(client: httpx.Client, turn: int) -> str:
    """One greedy completion through the Gateway; its text, checked to be a real one."""
    body = {
        "model": MODEL_NAME,
        "prompt": PROMPTS[turn % len(PROMPTS)],
        "max_tokens": CLIENT_TOKENS,
        "min_tokens": CLIENT_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, (response.status_code, response.text[:500])
    answer = response.json()
    assert answer["model"] == MODEL_NAME, answer
    assert answer["usage"]["completion_tokens"] == CLIENT_TOKENS, answer["usage"]
    text: str = answer["choices"][0]["text"]
    assert text.strip(), answer
    return text


def _batch(traefik: Traefik, engines: dict[str, str]) -> dict[str, int]:
    """REQUESTS completions through Traefik; revision -> how many its engine finished, by its
    own counter (before and after: the counter moves a moment after the answer)."""
    before = _counters(engines)
    with (
        httpx.Client(base_url=traefik.url, timeout=300) as client,
        ThreadPoolExecutor(IN_FLIGHT) as pool,
    ):
        texts = list(pool.map(lambda turn: _complete(client, turn), range(REQUESTS)))
    assert len(texts) == REQUESTS

    def settled() -> dict[str, int] | None:
        delta = {r: n - before[r] for r, n in _counters(engines).items()}
        return delta if sum(delta.values()) >= REQUESTS else None

    try:
        return wait_for(settled, 60, f"the engines' counters to show {REQUESTS} requests")
    except AssertionError as error:
        now = {r: n - before[r] for r, n in _counters(engines).items()}
        raise AssertionError(f"{error}: counted {now}") from None


def test_requests_through_traefik_reach_the_real_engines_by_the_route_weights(
    cluster: Cluster, e2e_namespace: str, gateway: Traefik
) -> None:
    namespace = e2e_namespace
    rollout = Rollout(cluster, namespace, NAME)
    clock = Stopwatch()
    record: list[dict[str, Any]] = []

    def note(step: str, weights: dict[str, int], counts: dict[str, int], **extra: Any) -> None:
        record.append({"step": step, "weights": weights, "counts": counts, **extra})
        print(f"\ngateway {step}: route {weights}, engines counted {counts} {extra}")  # noqa: T201

    rollout.apply(vllm_deployment(NAME, traffic=TRAFFIC))
    stable = rollout.wait_stable(timeout=1800)
    clock.mark(f"stable {stable}")

    # A benign canary: another seed, greedy answers unchanged, judged as a replay.
    rollout.apply(vllm_deployment(NAME, seed=43, traffic=TRAFFIC))
    canary = rollout.wait_canary(timeout=300)
    check = rollout.check_name(canary)
    wait_for(lambda: _engine_url(rollout, canary), 1800, f"the canary {canary}'s engine Ready")
    clock.mark(f"canary {canary} Ready")

    # Weight 0: the canary serves (its check's runner calls it), the Gateway sends it nothing.
    weights = {stable: 100, canary: 0}
    engines = _serving(cluster, gateway, rollout, weights, canary)
    phase_before = check_status(cluster, namespace, check).get("phase")
    counts = _batch(gateway, engines)
    phase_after = check_status(cluster, namespace, check).get("phase")
    note("canary dark", weights, counts, check=[phase_before, phase_after])
    clock.mark("batch at weight 0")
    # The weight only moves forward (0, the step, promotion): still 0 after the batch
    # means every request of it met weight 0.
    assert route_weights(cluster, namespace, NAME) == weights, (
        f"the canary's check ended ({phase_after}) during the batch at weight 0; "
        "the batch did not meet weight 0 alone"
    )
    assert counts == {stable: REQUESTS, canary: 0}

    verdict = rollout.wait_check(canary, timeout=1800)
    assert verdict["phase"] == "Passed", verdict
    weights = {stable: 100 - STEP_WEIGHT, canary: STEP_WEIGHT}
    engines = _serving(cluster, gateway, rollout, weights, canary)
    counts = _batch(gateway, engines)
    low, high = binomial_interval(REQUESTS, STEP_WEIGHT / 100, CONFIDENCE)
    note(f"step {STEP_WEIGHT}%", weights, counts, interval=[low, high])
    clock.mark(f"batch at {STEP_WEIGHT}%")
    assert route_weights(cluster, namespace, NAME) == weights, (
        f"the step's {STEP_PAUSE_S} s pause ended during its batch"
    )
    assert counts[stable] + counts[canary] == REQUESTS, counts
    assert low <= counts[canary] <= high, (
        f"{counts[canary]} of {REQUESTS} requests reached the canary at {STEP_WEIGHT}%; "
        f"the {CONFIDENCE:.1%} binomial interval is [{low}, {high}]"
    )

    rollout.wait(
        lambda s: s.get("stableRevision") == canary and not s.get("canaryRevision"),
        STEP_PAUSE_S + 600,
        "promotion after the step",
    )
    # The old stable is scaled down once the new one serves: the route's one backend left.
    wait_for(lambda: not rollout.live_pods(stable), 600, f"the old stable {stable} scaled down")
    weights = {canary: 100}
    engines = _serving(cluster, gateway, rollout, weights, canary)
    counts = _batch(gateway, engines)
    note("promoted", weights, counts)
    clock.mark("batch after promotion")
    assert counts == {canary: REQUESTS}

    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / "gateway-real-engines.json").write_text(json.dumps(record, indent=1) + "\n")
