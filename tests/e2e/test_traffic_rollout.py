"""Traffic that waits for the verdict, on real vLLM engines, one deployment through three
rollouts (the engines are shared: each step starts one canary, nothing more).

1. dark (the default): while a client calls the stable Service's endpoints, a harmful
   canary (RoPE base 1e4 for the model's 1e6) is checked and rolled back; the engines'
   own counters show that the canary answered none of the client's requests;
2. gateway with shadow parity: a benign canary is judged on requests a client sends
   through two mirror pods (copied to the dark canary and scored there teacher-forced;
   the verdict pools both pods' copies), then
   the HTTPRoute's weights follow the steps (20% with a shadow re-check, 60%) up to the
   promotion; the client's latency through the mirror is measured beside direct calls;
3. a failed step: the next canary passes its shadow check and takes 20%; its pod then
   stops, and the route goes back to stable alone.

Here the HTTPRoutes are real objects of the Gateway API CRDs (installed from the
sigs.k8s.io/gateway-api module) and the tests read the weights a Gateway would apply;
tests/integration/test_gateway_traefik.py shows a real Gateway (Traefik) routing requests
by the weights the operator writes, and tests/e2e/test_gateway_real_engines.py the same
Gateway in front of real vLLM engine pods.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.canary import Rollout
from tests.e2e.support import Operator, Stopwatch, check_status
from tests.e2e.traffic import (
    STRICT,
    SUITE_MAX_TOKENS,
    Client,
    client_requests_served,
    pod_url,
    route_weights,
    service_urls,
    vllm_deployment,
)
from tests.harness import REPO, Cluster, namespace_for, release_namespace, wait_for

# Long (several engines, traffic or load levels): `make test-slow` runs it; `make test`
# deselects it and says so.
pytestmark = pytest.mark.slow

NAME = "qwen"
GATEWAY = {
    "mode": "gateway",
    "gateway": {
        "parentRefs": [{"name": "public"}],
        "steps": [
            {"weight": 20, "pauseSeconds": 5, "recheck": True},
            {"weight": 60, "pauseSeconds": 5},
        ],
    },
}
SHADOW_PARITY = {
    "source": "shadow",
    "shadow": {
        "sampleRate": 1.0,
        "maxRequestsPerSecond": 4.0,
        "maxQueue": 16,
        # The profile's 32 prompts: one copy is one prompt.
        "minRequests": 32,
        "windowSeconds": 900,
    },
    "sampling": {"maxTokens": SUITE_MAX_TOKENS, "topLogprobs": 5},
    # Client requests answer CLIENT_TOKENS (64) tokens each: 32 copies score over 2,000
    # positions, past the strict profile's 1,024.
    **STRICT,
    "runner": {"activeDeadlineSeconds": 1500, "backoffLimit": 0},
    "deadlineSeconds": 1800,
}
# Two mirror pods: the client's requests alternate between them, so each scores about half
# the copies, fewer than the profile's floor, and the verdict stands on both pooled.
MIRRORS = 2
FIGURES = Path(os.environ.get("INFERGATE_TRAFFIC_FIGURES", REPO / "out" / "traffic"))


@dataclass
class Story:
    cluster: Cluster
    namespace: str
    rollout: Rollout
    clock: Stopwatch

    def apply(self, **kwargs: Any) -> None:
        self.rollout.apply(vllm_deployment(NAME, **kwargs))

    def stable_urls(self) -> list[str]:
        return service_urls(self.cluster, self.namespace, NAME)

    def mirror_urls(self) -> list[str]:
        return service_urls(self.cluster, self.namespace, f"{NAME}-mirror")


@pytest.fixture(scope="module")
def story(operator: Operator, cluster: Cluster) -> Iterator[Story]:
    namespace = namespace_for("traffic", f"e2e-{operator.session}", 12)
    cluster.kubectl("create", "namespace", namespace)
    story = Story(cluster, namespace, Rollout(cluster, namespace, NAME), Stopwatch())
    story.apply(mirror=MIRRORS)
    stable = story.rollout.wait_stable(timeout=1800)
    story.clock.mark(f"stable revision {stable}")
    yield story
    release_namespace(cluster, namespace)


def _canary_pod_url(story: Story, revision: str) -> str | None:
    pods = [p for p in story.rollout.live_pods(revision) if (p.get("status") or {}).get("podIP")]
    return pod_url(pods[0]) if pods else None


def test_dark_a_harmful_canary_never_serves_a_client(story: Story) -> None:
    stable = story.rollout.status()["stableRevision"]
    [stable_url] = story.stable_urls()
    served_before = client_requests_served(stable_url) or 0
    client = Client({"stable": story.stable_urls}).start()
    story.apply(mirror=MIRRORS, config={"rope_theta": 10000.0})
    canary = story.rollout.wait_canary(timeout=300)
    story.clock.mark(f"harmful canary {canary}")
    canary_counts: list[int] = []
    urls_seen: set[str] = set()

    def check_ended() -> dict[str, Any] | None:
        url = _canary_pod_url(story, canary)
        if url is not None:
            count = client_requests_served(url)
            if count is not None:
                canary_counts.append(count)
        urls_seen.update(story.stable_urls())
        status = check_status(story.cluster, story.namespace, story.rollout.check_name(canary))
        return (
            status if status.get("phase") in ("Passed", "Failed", "Inconclusive", "Error") else None
        )

    check = wait_for(check_ended, 1800, "the harmful canary's check", interval=2.0)
    story.clock.mark(f"check {check['phase']}")
    story.rollout.wait(
        lambda s: s.get("phase") == "RolledBack" and not s.get("canaryRevision"), 600, "rollback"
    )
    client.stop()
    assert check["phase"] == "Failed", check
    ok = [s for s in client.samples if s.ok]
    assert ok, "the client got no answer"
    # The serving Service never listed the canary, and the canary's own counter of
    # client-shaped requests (3 generated tokens) stayed at 0 while it ran.
    assert urls_seen == {stable_url}
    assert canary_counts, "the canary's /metrics could not be read while it ran"
    assert set(canary_counts) == {0}
    served = (client_requests_served(stable_url) or 0) - served_before
    assert served == len(ok)
    status = story.rollout.status()
    assert status["stableRevision"] == stable
    assert status["trafficMechanism"] == "Dark"


def test_gateway_steps_after_a_shadow_verdict_and_the_mirror_costs_the_client_little(
    story: Story,
) -> None:
    stable = story.rollout.status()["stableRevision"]
    client = Client({"direct": story.stable_urls, "mirror": story.mirror_urls}).start()
    # Both routes alone first (no session: the mirror only forwards).
    time.sleep(30)
    quiet_until = time.time()
    story.apply(mirror=MIRRORS, seed=43, traffic=GATEWAY, parity=SHADOW_PARITY)
    canary = story.rollout.wait_canary(timeout=300)
    story.clock.mark(f"benign canary {canary}")
    weights_seen: list[int] = []

    def promoted() -> dict[str, Any] | None:
        weights = route_weights(story.cluster, story.namespace, NAME)
        weight = (weights or {}).get(canary)
        if weight is not None and (not weights_seen or weights_seen[-1] != weight):
            weights_seen.append(weight)
        status = story.rollout.status()
        return status if status.get("stableRevision") == canary else None

    wait_for(promoted, 2400, "the gateway steps and the promotion", interval=1.0)
    story.clock.mark(f"promoted through weights {weights_seen}")
    session_until = time.time()
    client.stop()
    check = check_status(story.cluster, story.namespace, story.rollout.check_name(canary))
    recheck = check_status(
        story.cluster, story.namespace, f"{story.rollout.check_name(canary)}-step1"
    )
    figures = {
        "without session": {
            route: client.figures(route, until=quiet_until) for route in ("direct", "mirror")
        },
        "during the shadow checks": {
            route: client.figures(route, since=quiet_until, until=session_until)
            for route in ("direct", "mirror")
        },
        "shadow": check.get("shadow"),
        "recheckShadow": recheck.get("shadow"),
        "weights": weights_seen,
    }
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / "shadow-latency.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))  # noqa: T201 - the figures of experiments/TRAFFIC.md
    assert check["phase"] == "Passed", check
    assert check["shadow"]["scored"] >= SHADOW_PARITY["shadow"]["minRequests"]  # type: ignore[index]
    # Half of the client's requests are greedy: their copies are scored token by token too,
    # and none is dropped (a copy the mirror could not score would be).
    assert check["shadow"]["greedy"] > 0, check["shadow"]
    assert check["shadow"]["dropped"] == 0, check["shadow"]
    assert check["shadow"]["pods"] == MIRRORS, check["shadow"]
    assert recheck["phase"] == "Passed", recheck
    # Promotion names the new stableRevision first, grows it to full size, and only then
    # moves the route to it alone: the poll sees the steps' weights before the new stable.
    assert weights_seen == [0, 20, 60], weights_seen
    wait_for(
        lambda: route_weights(story.cluster, story.namespace, NAME) == {canary: 100},
        600,
        "the route on the promoted revision alone, once it runs at full size",
    )
    # No client request failed through the mirror.
    mirrored = [s for s in client.samples if s.route == "mirror"]
    assert mirrored
    # Not one failed, at promotion either (the old stable revision drains its requests),
    # but where the stable revision itself had no ready endpoint at that moment: the mirror
    # then answers 503 "no stable endpoint", as a Service with no endpoint refuses a client
    # (the direct route skips such a moment: it calls the endpoints it finds). That is the
    # stable's unavailability passed on, never one made by the mirror.
    failed = [s for s in client.samples if not s.ok]
    print("failed client requests:", failed)  # noqa: T201
    stable_down = [
        s for s in failed
        if s.route == "mirror" and s.answer.startswith("503") and "no stable endpoint" in s.answer
    ]  # fmt: skip
    assert [s for s in failed if s not in stable_down] == [], failed
    assert len({s.url for s in mirrored}) == MIRRORS
    # The latencies are figures, not assertions (no timings in tests): bench/mirror_bench.py
    # measures the mirror's cost with hundreds of requests; here a window holds a few.
    del stable


def test_gateway_a_failed_step_sends_the_weight_back_to_stable(story: Story) -> None:
    stable = story.rollout.status()["stableRevision"]
    client = Client({"mirror": story.mirror_urls}).start()
    holding = {**GATEWAY, "gateway": {**GATEWAY["gateway"], "steps": [  # type: ignore[dict-item]
        {"weight": 20, "pauseSeconds": 1800},
    ]}}  # fmt: skip
    story.apply(mirror=MIRRORS, seed=44, traffic=holding, parity=SHADOW_PARITY)
    canary = story.rollout.wait_canary(timeout=300)
    wait_for(
        lambda: (route_weights(story.cluster, story.namespace, NAME) or {}).get(canary) == 20,
        2400,
        "the canary at 20%",
        interval=1.0,
    )
    story.clock.mark(f"canary {canary} at 20%")
    client.stop()
    [pod] = story.rollout.live_pods(canary)
    story.cluster.kubectl(
        "delete", "pod", pod["metadata"]["name"], "-n", story.namespace,
        "--grace-period=0", "--force",
    )  # fmt: skip
    rolled = story.rollout.wait(
        lambda s: not s.get("canaryRevision") and s.get("phase") == "RolledBack", 600, "rollback"
    )
    story.clock.mark("rolled back")
    assert rolled["stableRevision"] == stable
    assert route_weights(story.cluster, story.namespace, NAME) == {stable: 100}
    record = story.rollout.revision_record(canary)
    assert record["rejected"] is True
    assert "gateway step 1 (20% of requests) failed" in record["message"]
    assert rolled["traffic"]["canaryWeight"] == 0
