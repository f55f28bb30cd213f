"""Golden records on real engines: a Passed canary check stores both sides, and a check
against the stable's record after its pods are gone gives the live check's verdict.

The session's operator keeps records on a claim of each namespace (`--golden-config`,
tests/e2e/support.py); MindFormers float32 on the Ascend executor, as the canary tests.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infergate.golden.blobs import DirectoryStore
from infergate.golden.keys import Role
from infergate.golden.store import GoldenStore
from tests.e2e.canary import Rollout, mindformers_deployment, rendered_engine_problem
from tests.e2e.support import Stopwatch, check_status, golden_store_dir
from tests.harness import Cluster, wait_for


@pytest.fixture(scope="module", autouse=True)
def engines_start(cluster: Cluster) -> None:
    problem = rendered_engine_problem(cluster, mindformers_deployment())
    if problem is not None:
        pytest.skip(f"rendered MindFormers engine pods cannot start on the executor: {problem}")


def _check_spec(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    body = json.loads(
        cluster.kubectl(
            "get", "paritychecks.infergate.io", name, "-n", namespace, "-o", "json"
        ).stdout
    )
    spec: dict[str, Any] = body["spec"]
    return spec


def test_a_check_against_the_golden_record_gives_the_live_verdict_without_stable_pods(
    cluster: Cluster, e2e_namespace: str
) -> None:
    rollout, clock = Rollout(cluster, e2e_namespace), Stopwatch()
    rollout.apply(mindformers_deployment())
    stable = rollout.wait_stable()
    rollout.apply(mindformers_deployment(seed=43))
    canary = rollout.wait_canary()
    live = rollout.wait_check(canary)
    clock.mark(f"live check {live['phase']}")
    assert live["phase"] == "Passed", live
    golden = live["golden"]
    assert golden["stored"] is True, golden
    assert len(golden["entries"]) == 2

    # The records are in the store, listed and verified.
    store = GoldenStore(DirectoryStore(golden_store_dir(e2e_namespace)))
    entries = {i.entry.role: i.entry for i in store.list_entries(e2e_namespace, "qwen") if i.entry}
    assert entries[Role.BASELINE].revision == stable
    assert entries[Role.CANDIDATE].revision == canary
    for entry in entries.values():
        store.verify(entry)
    sizes = {role.value: entry.size_bytes for role, entry in entries.items()}
    clock.mark(f"records stored: {sizes} bytes")

    # Promoted: the old stable's pods go away.
    rollout.wait(lambda s: s.get("stableRevision") == canary, 300, "the canary to be promoted")
    wait_for(lambda: not rollout.live_pods(stable), 300, f"old stable {stable} to be scaled down")

    spec = copy.deepcopy(_check_spec(cluster, e2e_namespace, rollout.check_name(canary)))
    spec["baseline"] = {"golden": {"revision": stable}}
    spec["candidate"] = {"inferenceDeploymentRef": {"name": "qwen"}, "revision": canary}
    manifest = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": "against-golden", "namespace": e2e_namespace},
        "spec": spec,
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def ended() -> dict[str, Any] | None:
        status = check_status(cluster, e2e_namespace, "against-golden")
        return status if status.get("phase") in ("Passed", "Failed", "Error") else None

    replay = wait_for(ended, 900, "the check against the golden record to end", interval=2.0)
    clock.mark(f"golden check {replay['phase']}")
    assert not rollout.live_pods(stable)
    assert replay["phase"] == live["phase"], replay
    assert replay["goldenBaseline"]["revision"] == stable
    assert replay["goldenBaseline"]["entry"] == golden["entries"][0]
    assert replay["metrics"]["tokenMatchRate"] == live["metrics"]["tokenMatchRate"]
    assert replay["baselineRevision"] == stable
    # No probe or anything else started for the golden side.
    pods = cluster.get_json(
        "pods", "-n", e2e_namespace, "-l", "infergate.io/paritycheck=against-golden"
    )
    assert all("probe" not in p["metadata"]["name"] for p in pods["items"])
