"""A ParityCheck written by hand against two explicit endpoints, run by the operator.

Three adapter servers run as pods on the executor (the transformers reference, fp32):
two identical, one with a harmful RMSNorm epsilon (1e-4 for the model's 1e-6: most greedy
outputs stay the same, the logprobs and hidden states do not). The operator starts the runner Job
under its own ServiceAccount; the checks end Passed and Failed, with their metrics,
reasons and HTML report, and the runner's RBAC is gone afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from infergate.accounting import describe_overhead
from tests.e2e.canary import SHORT_CONTEXT, SUITE
from tests.e2e.support import (
    MODEL_NAME,
    Operator,
    Stopwatch,
    adapter_pod,
    report,
    runner_log,
    wait_check_ended,
    wait_pod_ready,
)
from tests.harness import Cluster, release_namespace, wait_for


@pytest.fixture(scope="module")
def servers(operator: Operator, cluster: Cluster) -> Iterator[tuple[str, dict[str, str]]]:
    """A namespace with three adapter pods: ref-a, ref-b (identical) and bad-eps."""
    namespace = f"e2e-{operator.session}-standalone-{uuid.uuid4().hex[:4]}"
    cluster.kubectl("create", "namespace", namespace)
    pods = {
        "ref-a": adapter_pod("ref-a"),
        "ref-b": adapter_pod("ref-b"),
        "bad-eps": adapter_pod("bad-eps", config={"rms_norm_eps": 1e-4}),
    }
    for pod in pods.values():
        cluster.apply(pod, namespace)
    urls = {
        name: f"http://{wait_pod_ready(cluster, namespace, name)['status']['podIP']}:8000"
        for name in pods
    }
    yield namespace, urls
    release_namespace(cluster, namespace)


def check(name: str, baseline: str, candidate: str, *, concurrency: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": name},
        "spec": {
            "baseline": {"endpoint": {"url": baseline, "model": MODEL_NAME}},
            "candidate": {"endpoint": {"url": candidate, "model": MODEL_NAME}},
            "suite": {"inline": SUITE},
            "sampling": {"maxTokens": 16, "topLogprobs": 5},
            # Two adapter pods of one image and config: a replay, judged bit for bit.
            "profile": "strict",
            "thresholds": dict(SHORT_CONTEXT),
            "runner": {
                "activeDeadlineSeconds": 300,
                "backoffLimit": 0,
                "concurrency": concurrency,
            },
            "deadlineSeconds": 600,
        },
    }


def test_identical_endpoints_pass_with_metrics_report_and_cleanup(
    servers: tuple[str, dict[str, str]], cluster: Cluster, operator: Operator
) -> None:
    namespace, urls = servers
    clock = Stopwatch()
    # One prompt in flight, so that the runner's overhead below is exact, not a range.
    cluster.apply(check("same", urls["ref-a"], urls["ref-b"], concurrency=1), namespace)
    status = wait_check_ended(cluster, namespace, "same", timeout=240)
    clock.mark(f"standalone check ended {status['phase']}")
    assert status["phase"] == "Passed", (status, runner_log(cluster, namespace))
    assert status["verdict"]["passed"] is True
    assert status["progress"] == {"done": len(SUITE), "total": len(SUITE)}
    assert status["metrics"]["tokenMatchRate"] == 1.0
    assert status["metrics"]["hiddenCosineP1"] >= 0.99999
    html, result = report(cluster, namespace, status)
    assert "Parity" in html
    assert "Passed" in html
    assert result["sides"]["candidate"]["url"] == urls["ref-b"]
    assert "verdict Passed" in runner_log(cluster, namespace)
    # The runner's overhead: these adapters serve only the check, so their own metrics
    # give the engines' time for exactly its requests (three per prompt and side).
    overhead = status["overhead"]
    clock.mark(describe_overhead(overhead))
    assert "error" not in overhead, overhead
    assert overhead["requests"] == 2 * 3 * len(SUITE)
    assert overhead["concurrency"] == 1
    assert overhead["ratio"] >= 1.0, "one request at a time: the engines cannot outpace the wall"
    assert overhead["ratioBound"] == overhead["ratio"]
    assert result["overhead"] == overhead
    assert "Runner overhead" in html

    # The runner's permissions are gone once the check ended.

    # Its Role and RoleBinding in the check's namespace, its ServiceAccount in the runner
    # namespace (the operator's).
    def rbac_left() -> str:
        here = cluster.kubectl(
            "get", "role,rolebinding", "-n", namespace, "-l", "infergate.io/paritycheck=same",
            "-o", "name",
        )  # fmt: skip
        runners = cluster.kubectl(
            "get", "serviceaccount", "-n", operator.namespace,
            "-l", f"infergate.io/paritycheck=same,infergate.io/paritycheck-namespace={namespace}",
            "-o", "name",
        )  # fmt: skip
        return (here.stdout + runners.stdout).strip()

    wait_for(
        lambda: rbac_left() == "",
        30,
        "the runner's ServiceAccount, Role and RoleBinding to be deleted",
    )


def test_a_harmful_norm_epsilon_fails_with_reasons_a_person_understands(
    servers: tuple[str, dict[str, str]], cluster: Cluster
) -> None:
    namespace, urls = servers
    cluster.apply(check("bad-eps", urls["ref-a"], urls["bad-eps"]), namespace)
    status = wait_check_ended(cluster, namespace, "bad-eps", timeout=240)
    assert status["phase"] == "Failed", (status, runner_log(cluster, namespace))
    assert status["verdict"]["passed"] is False
    reasons = {r["metric"]: r for r in status["verdict"]["reasons"]}
    assert "rms_norm_eps: 1e-06 -> 0.0001" in reasons["hygiene.ConfigDiffers"]["message"]
    cosine = reasons["minHiddenCosineP1"]
    assert cosine["value"] < cosine["threshold"] == 1.0  # strict: bit for bit
    assert cosine["prompts"]

    def failed_event() -> bool:
        events = cluster.get_json(
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.kind=ParityCheck,involvedObject.name=bad-eps",
        )
        return any(e.get("reason") == "CheckFailed" for e in events["items"])

    wait_for(failed_event, 30, "a CheckFailed Event on the ParityCheck")
