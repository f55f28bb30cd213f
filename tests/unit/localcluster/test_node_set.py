"""The local executor takes on executor nodes added at run time and treats one whose Node
object is gone as a lost machine: its pods' processes die at once, unannounced, while
the pods stay published with their last status until they are deleted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from infergate_dev.localcluster import nodes
from infergate_dev.localcluster.executor.container import ContainerProcess
from infergate_dev.localcluster.executor.nodeset import node_changes, played, split_pods
from infergate_dev.localcluster.executor.pod import PodRunner, Site


def _node(name: str, *, executor: bool = True, deleting: bool = False) -> dict[str, Any]:
    shape = nodes.NodeShape(name, "nvidia-gpu", simulated=not executor)
    node = nodes.node_object(shape)
    if deleting:
        node["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return node


def _pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name}, "spec": {"nodeName": node}}


def test_the_default_node_set_is_unchanged() -> None:
    assert [n.name for n in nodes.executor_nodes()] == [
        "executor-gpu",
        "executor-ascend",
        "executor",
    ]


def test_only_labelled_nodes_not_being_deleted_are_played() -> None:
    listed = [
        _node("executor-gpu"),
        _node("gpu-node-0", executor=False),
        _node("executor-gpu-1", deleting=True),
    ]
    assert played(listed) == {"executor-gpu"}


def test_an_added_node_is_taken_on_and_a_vanished_one_is_lost() -> None:
    known = {"executor-gpu", "executor"}
    listed = [_node("executor-gpu"), _node("executor-gpu-1"), _node("gpu-node-0", executor=False)]
    changes = node_changes(known, listed)
    assert changes.added == {"executor-gpu-1"}
    assert changes.lost == {"executor"}


def test_nothing_changes_when_the_listed_nodes_are_the_known_ones() -> None:
    changes = node_changes({"executor-gpu"}, [_node("executor-gpu")])
    assert not changes.added
    assert not changes.lost


def test_pods_of_a_lost_node_are_published_not_run_and_other_nodes_pods_ignored() -> None:
    pods = [_pod("a", "executor-gpu"), _pod("b", "executor-gpu-1"), _pod("c", "gpu-node-0")]
    split = split_pods(pods, playing={"executor-gpu"}, lost={"executor-gpu-1"})
    assert [p["metadata"]["name"] for p in split.run] == ["a"]
    assert [p["metadata"]["name"] for p in split.orphaned] == ["b"]


class _Api:
    def __init__(self) -> None:
        self.reported: list[dict[str, Any]] = []
        self.deleted = 0

    def patch_pod_status(self, _pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.reported.append(status)

    def delete_pod_now(self, _pod: dict[str, Any]) -> None:
        self.deleted += 1


def test_a_lost_nodes_pod_is_killed_without_sigterm_and_reports_nothing(
    tmp_path: Path,
) -> None:
    # A main process that would outlive a SIGTERM (it ignores it): only SIGKILL ends it.
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    container = ContainerProcess(
        spec={"name": "engine"}, pod_dir=tmp_path, log_path=tmp_path / "log"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    container.popen = process
    api = _Api()
    site = Site(tmp_path, tmp_path, tmp_path, "127.0.0.1", 6443, [], tmp_path / "hosts")
    pod = {**_pod("engine-0", "executor-gpu-1"), "metadata": {
        "name": "engine-0", "namespace": "llm", "uid": "u-1"}}  # fmt: skip
    runner = PodRunner(pod, "127.0.0.9", api, site)  # type: ignore[arg-type]
    runner._containers = [container]
    assert runner.node_name == "executor-gpu-1"
    runner.request_kill()
    runner._end()
    assert process.returncode == -9  # killed, though it would have outlived a SIGTERM
    assert container.terminated is not None
    assert container.terminated["exitCode"] == 137
    runner._report()
    assert api.reported == []  # nothing of the machine is left to report
    assert api.deleted == 0  # the pod stays in the API for the garbage collector


class _Cluster:
    """The API calls of one executor loop: nodes and pods as listed, writes recorded."""

    server = "https://127.0.0.1:6443"

    def __init__(self, node_names: list[str], pods: list[dict[str, Any]]) -> None:
        self.node_names, self.pods = node_names, pods
        self.patched: list[str] = []

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        if path == "/api/v1/nodes":
            return [_node(n) for n in self.node_names]
        if path == "/api/v1/pods":
            node = params["fieldSelector"].removeprefix("spec.nodeName=")
            return [p for p in self.pods if p["spec"]["nodeName"] == node]
        return []  # no Services, no slices

    def get(self, _path: str) -> None:
        return None

    def create(self, _path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def merge_patch(self, path: str, _body: dict[str, Any]) -> None:
        self.patched.append(path)


class _Runner:
    def __init__(self, node: str) -> None:
        self.node_name, self.pod_ip = node, "127.0.0.9"
        self.stop_requested = False
        self.killed = False

    def observe(self, _pod: dict[str, Any]) -> None: ...

    def is_alive(self) -> bool:
        return True

    def request_kill(self) -> None:
        self.killed = self.stop_requested = True

    def request_stop(self, _grace: float, _delete: bool) -> None:
        self.stop_requested = True


def test_the_executor_takes_on_an_added_node_and_kills_the_pods_of_a_lost_one(
    tmp_path: Path,
) -> None:
    from infergate_dev.localcluster.executor.agent import Executor

    pods = [
        {**_pod("a", "executor-gpu"), "status": {"phase": "Running"}},
        {**_pod("b", "executor-gpu-1"), "status": {"phase": "Running"}},
    ]
    api = _Cluster(["executor-gpu", "executor-ascend", "executor", "executor-gpu-1"], pods)
    executor = Executor(api, tmp_path)  # type: ignore[arg-type]
    runners = {"a": _Runner("executor-gpu"), "b": _Runner("executor-gpu-1")}
    executor.runners = dict(runners)  # type: ignore[arg-type]
    executor.sync()
    assert "executor-gpu-1" in executor.node_names
    assert "/api/v1/nodes/executor-gpu-1/status" in api.patched  # Ready at once
    assert not any(r.stop_requested for r in runners.values())
    # The Node object of executor-gpu-1 is deleted; its pod is still in the API.
    api.node_names.remove("executor-gpu-1")
    executor.sync()
    assert runners["b"].killed
    assert not runners["a"].stop_requested
    assert executor.lost_nodes == {"executor-gpu-1"}  # its pod still published
    # The pod garbage collector deleted the pod: the lost node is forgotten.
    api.pods.remove(pods[1])
    executor.sync()
    assert executor.lost_nodes == frozenset()
