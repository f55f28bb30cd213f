"""The HTTPRoute the operator writes, served by a real Gateway API implementation.

The operator (a pod, as in test_controller_rollout.py) steps a canary under
`rollout.traffic.mode: gateway`; Traefik, built from its Go module and started here with its
Kubernetes Gateway provider, turns the route into its own configuration and forwards
requests to the addresses in the revision Services' EndpointSlices. The engine pods are
KWOK's (nothing runs), so each revision Service gets one slice pointing at 127.0.0.1 and a
small server that answers with the revision's name (tests/integration/traefik.py). The
route, the Services and the weights are the operator's alone.

What a user checks, with N requests through the Gateway at each step: none reaches a
canary at weight 0; at 30% and 50% the canary's count lies inside the 99.9% binomial
interval; after promotion every request reaches the new stable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infergate.plan.deployment.desired import recheck_name
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    deployment_manifest,
    idep_namespace,
    operator,
)
from tests.integration.test_controller_rollout import route_weights
from tests.integration.traefik import (
    WHOAMI,
    RevisionBackends,
    Traefik,
    binomial_interval,
    route_accepted,
    serve_gateway,
    slice_endpoints,
    traefik_path,
    traefik_route,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
__all__ = ["idep_namespace", "operator", "traefik_path"]

REQUESTS = 200
CONFIDENCE = 0.999
GATEWAY = "public"
NAME = "qwen"


@pytest.fixture
def gateway(
    traefik_path: Path, cluster: Cluster, idep_namespace: str, tmp_path: Path
) -> Iterator[Traefik]:
    """Traefik serving the Gateway `public` of the test's namespace."""
    with serve_gateway(traefik_path, cluster, idep_namespace, GATEWAY, tmp_path) as traefik:
        yield traefik


def _serving(
    cluster: Cluster,
    traefik: Traefik,
    backends: RevisionBackends,
    namespace: str,
    weights: dict[str, int],
) -> None:
    """Wait until the operator's route has `weights` and Traefik routes with exactly them,
    each revision to exactly the endpoints of its Service's slices, and those are the
    revision's own server on 127.0.0.1 (never a ClusterIP, never a simulated pod)."""
    wait_for(
        lambda: route_weights(cluster, namespace) == weights,
        120,
        f"the operator's HTTPRoute at {weights}",
    )

    def in_traefik() -> bool:
        served = backends.sync()
        routed = traefik_route(traefik, namespace, NAME)
        if {r: w for r, (w, _) in routed.items()} != weights:
            return False
        for revision, (_, servers) in routed.items():
            endpoints = slice_endpoints(cluster, namespace, f"{NAME}-{revision}")
            if servers != endpoints or {served.get(e) for e in endpoints} != {revision}:
                return False
        return route_accepted(cluster, namespace, NAME)

    try:
        wait_for(in_traefik, 120, f"Traefik routing with {weights}")
    except AssertionError as error:
        raise AssertionError(f"{error}\ntraefik log (tail):\n{traefik.log()}") from None


def _send(traefik: Traefik, requests: int = REQUESTS) -> Counter[str]:
    """`requests` GETs through the Gateway; revision -> how many it answered. Every request
    must be answered by a pod of some revision (no 5xx from the Gateway)."""
    counts: Counter[str] = Counter()
    with httpx.Client(base_url=traefik.url, timeout=10) as client:
        for _ in range(requests):
            response = client.get(WHOAMI)
            assert response.status_code == 200, (response.status_code, response.text)
            counts[response.json()["revision"]] += 1
    return counts


def _report(step: str, weights: dict[str, int], counts: Counter[str]) -> None:
    shown = f"{sum(counts.values())} requests -> {dict(counts)}"
    print(f"\ngateway {step}: route {weights}, {shown}")  # noqa: T201 - the counts, for the record


def _recheck(cluster: Cluster, idep: Idep, namespace: str, canary: str, step: int) -> None:
    """Pass the re-check the operator asks for at the end of a step (it holds the weight until
    then), as the runner would write it."""
    name = recheck_name(NAME, canary, step)
    wait_for(
        lambda: (
            cluster.kubectl("get", "pcheck", name, "-n", namespace, check=False).returncode == 0
        ),
        120,
        f"the re-check {name}",
    )
    idep.verdict(name, "Passed", passed=True)


def test_requests_through_traefik_follow_the_operators_route_weights(
    traefik_path: Path, cluster: Cluster, idep_namespace: str, gateway: Traefik
) -> None:
    manifest = deployment_manifest(NAME)
    # Each step re-checks the canary: the operator holds the step's weight until the test
    # writes the verdict, so the requests of a step all meet one weight.
    manifest["spec"]["rollout"]["traffic"] = {
        "mode": "gateway",
        "gateway": {
            "parentRefs": [{"name": GATEWAY}],
            "steps": [
                {"weight": 30, "pauseSeconds": 0, "recheck": True},
                {"weight": 50, "pauseSeconds": 0, "recheck": True},
            ],
        },
    }
    namespace = idep_namespace
    with RevisionBackends(cluster, namespace, NAME) as backends:
        idep = Idep(cluster, namespace, manifest)
        idep.apply()
        stable = idep.wait_stable(timeout=180)

        weights = {stable: 100}
        _serving(cluster, gateway, backends, namespace, weights)
        counts = _send(gateway)
        _report("stable only", weights, counts)
        assert counts == {stable: REQUESTS}

        idep.apply(dtype="float16")
        canary, check = idep.wait_check(timeout=180)
        weights = {stable: 100, canary: 0}
        _serving(cluster, gateway, backends, namespace, weights)
        counts = _send(gateway)
        _report("canary checked, weight 0", weights, counts)
        assert counts[canary] == 0
        assert counts[stable] == REQUESTS

        idep.verdict(check["metadata"]["name"], "Passed", passed=True)
        for step, share in enumerate((30, 50)):
            weights = {stable: 100 - share, canary: share}
            _serving(cluster, gateway, backends, namespace, weights)
            counts = _send(gateway)
            _report(f"step {step + 1}", weights, counts)
            low, high = binomial_interval(REQUESTS, share / 100, CONFIDENCE)
            assert counts[stable] + counts[canary] == REQUESTS
            assert low <= counts[canary] <= high, (
                f"{counts[canary]} of {REQUESTS} requests reached the canary at {share}%; "
                f"the {CONFIDENCE:.1%} binomial interval is [{low}, {high}]"
            )
            _recheck(cluster, idep, namespace, canary, step)

        idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=180)
        weights = {canary: 100}
        _serving(cluster, gateway, backends, namespace, weights)
        counts = _send(gateway)
        _report("promoted", weights, counts)
        assert counts == {canary: REQUESTS}
