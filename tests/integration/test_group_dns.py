"""The pods of a LeaderWorkerSet group find each other by name on the local executor.

On a cluster a worker reaches its leader at LWS_LEADER_ADDRESS
(`<leader>.<lws>.<namespace>`), a DNS name cluster DNS answers for pods behind the
LWS's headless Service. The executor has no cluster DNS; it gives the pods of a group a
hosts file with those names (executor/dns.py). Here the real LWS controller makes a group
of two plain pods on the executor, and each resolves the leader's name to the leader's
pod IP; a vLLM group's worker joins its leader's Ray head the same way
(tests/integration/test_vllm_group_on_executor.py).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from infergate_dev.localcluster import lws
from tests.harness import Cluster, wait_for

pytestmark = pytest.mark.cluster
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# Resolve the leader's name, retrying while it is not published yet (as the vLLM worker's
# `ray start` does), print the address, then stay up: a pod of a group that exits has its
# whole group made again.
RESOLVE = """
import os, socket, time
for _ in range(120):
    try:
        print("resolved", socket.gethostbyname(os.environ["LWS_LEADER_ADDRESS"]), flush=True)
        break
    except OSError as exc:
        print("not yet", exc, flush=True)
        time.sleep(0.5)
time.sleep(600)
"""


def _template() -> dict[str, Any]:
    return {
        "spec": {
            "nodeSelector": {"infergate.io/local-executor": "true"},
            "containers": [
                {"name": "main", "image": "python:3.11", "command": ["python3", "-c", RESOLVE]}
            ],
        }
    }


def _group(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template()},
        },
    }


def test_a_groups_pods_resolve_the_leader_address_to_the_leaders_pod_ip(
    cluster: Cluster, namespace: str
) -> None:
    lws.start(cluster.layout, say=False)
    cluster.apply(_group("dns"), namespace)

    def running() -> dict[str, dict[str, Any]] | None:
        pods = {
            p["metadata"]["labels"][WORKER_INDEX]: p
            for p in cluster.get_json("pods", "-n", namespace)["items"]
            if (p.get("status") or {}).get("podIP")
        }
        return pods if pods.keys() == {"0", "1"} else None

    pods = wait_for(running, 120, "the group's two pods running on the executor")
    leader_ip = pods["0"]["status"]["podIP"]
    assert pods["1"]["status"]["podIP"] != leader_ip
    for pod in pods.values():
        name = pod["metadata"]["name"]
        line = wait_for(
            functools.partial(_resolved, cluster, namespace, name),
            60,
            f"pod {name} to resolve LWS_LEADER_ADDRESS",
        )
        assert line == f"resolved {leader_ip}", cluster.pod_log(namespace, name, "main")


def _resolved(cluster: Cluster, namespace: str, pod: str) -> str | None:
    lines = cluster.pod_log(namespace, pod, "main").splitlines()
    return next((line for line in lines if line.startswith("resolved ")), None)
