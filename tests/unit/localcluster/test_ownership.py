"""Which processes belong to a container, a pod or a cluster of the local executor: those
marked with its path in their environment, as every process a container starts is, in
whatever process group or session (Ray's workers run in groups of their own), and those
in its mount namespace. Nothing of another pod, or of another checkout's cluster on the
same machine, is ever taken."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infergate_dev.localcluster.executor import ownership
from infergate_dev.localcluster.executor.container import ContainerProcess, kill_leftovers
from infergate_dev.localcluster.executor.volumes import Mount

_PODS = Path("/work/wt/a/.cluster/pods")
_OTHER_CHECKOUT = Path("/work/wt/ab/.cluster/pods")  # a name that starts like the first
_HOST = "mnt:[4026531832]"  # the namespace this machine's processes share
_LEAD, _WORK, _OTHER = "mnt:[4026532001]", "mnt:[4026532002]", "mnt:[4026532003]"
_ZEROS = b"\0" * 64  # an environment overwritten by a process title (Ray's agents)


def _env(mark: str | Path | None, *others: str) -> bytes:
    entries = ["PATH=/usr/bin:/bin", *others]
    if mark is not None:
        entries.append(f"{ownership.MARK}={mark}")
    return "\0".join(entries).encode() + b"\0"


def _in(ns: str, mark: str | Path) -> ownership.Seen:
    """A process of a container with volumes: in the namespace its launcher declared."""
    return ownership.Seen(_env(mark, f"{ownership.MOUNT_NS}={ns}"), ns)


# pid -> what /proc shows: a group's leader pod `u-lead` (its engine container, with the
# Ray daemons `ray start` left running, two of which overwrote their environment), a
# worker pod `u-work` of the same cluster, a container without volumes (in the machine's
# namespace, declaring none), a pod of another checkout's cluster, and processes of
# nobody's pod.
_TABLE = {
    100: _in(_LEAD, f"{_PODS}/u-lead/engine"),  # sh -c leader script, then vllm serve
    101: _in(_LEAD, f"{_PODS}/u-lead/engine"),  # gcs_server
    102: _in(_LEAD, f"{_PODS}/u-lead/engine"),  # raylet
    103: ownership.Seen(_ZEROS, _LEAD),  # ray::DashboardAgent
    104: ownership.Seen(_ZEROS, _LEAD),  # ray::RuntimeEnvAgent
    110: ownership.Seen(_env(f"{_PODS}/u-lead/sidecar"), _HOST),  # no volumes
    200: _in(_WORK, f"{_PODS}/u-work/engine"),  # the worker's raylet
    201: ownership.Seen(_ZEROS, _WORK),  # its ray::DashboardAgent
    300: _in(_OTHER, f"{_OTHER_CHECKOUT}/u-lead/engine"),  # same uid, other cluster (a fake)
    301: ownership.Seen(_ZEROS, _OTHER),
    400: ownership.Seen(_env(None), _HOST),  # the user's shell
    401: ownership.Seen(_ZEROS, _HOST),  # a process title in nobody's pod
    402: ownership.Seen(b"", None),  # a zombie: nothing left to read
    403: ownership.Seen(_env(None, f"NOTE={ownership.MARK}={_PODS}/u-lead/engine"), _HOST),
    404: ownership.Seen(_env(None, f"X{ownership.MARK}={_PODS}/u-lead/engine"), _HOST),
    405: ownership.Seen(_env(f"{_PODS}/u-work/../u-lead/engine"), _HOST),  # not as written
    406: ownership.Seen(_env("u-lead/engine"), _HOST),  # relative
}


@pytest.mark.parametrize(
    ("scope", "owned"),
    [
        pytest.param(_PODS / "u-lead" / "engine", [100, 101, 102, 103, 104], id="container"),
        pytest.param(_PODS / "u-lead" / "sidecar", [110], id="container without volumes"),
        pytest.param(_PODS / "u-lead", [100, 101, 102, 103, 104, 110], id="pod"),
        pytest.param(_PODS / "u-work", [200, 201], id="another pod of the cluster"),
        pytest.param(
            _PODS, [100, 101, 102, 103, 104, 110, 200, 201], id="cluster (localcluster down)"
        ),
        pytest.param(_OTHER_CHECKOUT, [300, 301], id="the other checkout's cluster"),
        pytest.param(_PODS / "u-gone", [], id="a pod with nothing left"),
        pytest.param(Path("/work/wt/a/.cluster/pod"), [], id="a name that starts the same"),
    ],
)
def test_a_scope_owns_exactly_its_marked_processes_and_their_namespaces(
    scope: Path, owned: list[int]
) -> None:
    assert ownership.owned_pids(_TABLE, scope, own_ns=_HOST) == owned


def test_the_machines_namespace_is_never_taken_for_a_containers() -> None:
    # A marked process that claims the namespace this machine's processes share, or one
    # it is not in: only its own process is taken, never what shares its namespace.
    claims_host = ownership.Seen(
        _env(f"{_PODS}/u-1/engine", f"{ownership.MOUNT_NS}={_HOST}"), _HOST
    )
    table = {1: _in(_LEAD, f"{_PODS}/u-1/engine"), 2: ownership.Seen(_ZEROS, _HOST)}
    assert ownership.owned_pids({**table, 3: claims_host}, _PODS / "u-1", own_ns=_HOST) == [1, 3]
    stale = ownership.Seen(_env(f"{_PODS}/u-2/engine", f"{ownership.MOUNT_NS}={_WORK}"), _HOST)
    table = {4: stale, 5: ownership.Seen(_ZEROS, _WORK), 6: ownership.Seen(_ZEROS, _HOST)}
    assert ownership.owned_pids(table, _PODS / "u-2", own_ns=_HOST) == [4]


def test_a_held_namespace_finds_what_is_left_once_every_marked_process_ended() -> None:
    # The engine exited; only the agents that overwrote their environment are left, found
    # by the namespace the executor held for the container. The machine's never is.
    table = {k: _TABLE[k] for k in (103, 104, 201, 301, 401)}
    leader = _PODS / "u-lead" / "engine"
    assert ownership.owned_pids(table, leader, own_ns=_HOST) == []
    held = frozenset([_LEAD])
    assert ownership.owned_pids(table, leader, own_ns=_HOST, held=held) == [103, 104]
    assert ownership.owned_pids(table, leader, own_ns=_HOST, held=frozenset([_HOST])) == []


def test_a_mark_is_read_from_its_own_variable_only() -> None:
    assert ownership.env_value(_env("/p/u/c=d"), ownership.MARK) == "/p/u/c=d"
    assert ownership.env_value(_TABLE[403].environ, ownership.MARK) is None
    assert ownership.env_value(_TABLE[404].environ, ownership.MARK) is None
    assert ownership.env_value(_ZEROS, ownership.MARK) is None


def test_a_containers_mark_is_its_path_in_its_pods_dir(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pods" / "u-1"
    assert ownership.container_mark(pod_dir, "engine") == str(pod_dir.resolve() / "engine")


# -- with real processes ----------------------------------------------------------------

# Starts a daemon in a session of its own (out of the container's process group, as
# Ray's workers are), writes its pid, then stays up (as a leader's engine) or exits.
# With "bare", the daemon has an environment of its own, without the marks: as a Ray
# agent's reads once its process title has overwritten it.
_DAEMONISES = """
import os, pathlib, subprocess, sys, time
env = {} if sys.argv[3] == "bare" else None
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          start_new_session=True, env=env)
pathlib.Path(sys.argv[1]).write_text(str(daemon.pid))
if sys.argv[2] == "stay":
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _daemon_of(
    container: ContainerProcess, out: Path, mode: str, mounts: list[Mount] | None = None
) -> int:
    pid_file = out / "daemon.pid"
    env = "bare" if mounts else "inherited"
    argv = [sys.executable, "-c", _DAEMONISES, str(pid_file), mode, env]
    container.start(argv, {}, mounts or [])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, container.log_path.read_text()
        time.sleep(0.05)
    return int(pid_file.read_text())


def _container(pod_dir: Path) -> ContainerProcess:
    pod_dir.mkdir(parents=True, exist_ok=True)
    return ContainerProcess(
        spec={"name": "engine"}, pod_dir=pod_dir, log_path=pod_dir / "engine.log"
    )


def _stranger(mark: Path) -> subprocess.Popen[bytes]:
    """A process of another cluster's pod: marked, but not within any scope of ours."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, ownership.MARK: str(mark)},
        start_new_session=True,
    )


def test_a_stopped_container_takes_its_daemons_along_and_nothing_else(tmp_path: Path) -> None:
    container = _container(tmp_path / "a" / "pods" / "u-1")
    stranger = _stranger(tmp_path / "ab" / "pods" / "u-1" / "engine")
    try:
        daemon = _daemon_of(container, tmp_path, "stay")
        container.stop(grace_seconds=5)
        assert _gone(daemon)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_container_whose_main_process_ended_leaves_no_daemon(tmp_path: Path) -> None:
    container = _container(tmp_path / "pods" / "u-1")
    daemon = _daemon_of(container, tmp_path, "exit")
    deadline = time.monotonic() + 30
    while container.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _gone(daemon)


def test_down_kills_the_daemons_of_a_pod_whose_executor_is_gone(tmp_path: Path) -> None:
    pods = tmp_path / "a" / "pods"
    container = _container(pods / "u-1")
    stranger = _stranger(tmp_path / "ab" / "pods" / "u-1" / "engine")
    try:
        daemon = _daemon_of(container, tmp_path, "stay")
        assert container.popen is not None
        main = container.popen.pid
        kill_leftovers(pods / "u-1")
        container.popen.wait(timeout=10)
        assert _gone(daemon)
        assert not _alive(main)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def _can_unshare() -> bool:
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "true"], check=False
    )
    return result.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs mount namespaces (unshare --mount)")
def test_a_daemon_without_its_environment_dies_with_its_containers_namespace(
    tmp_path: Path,
) -> None:
    """A container with volumes (its own mount namespace) whose daemon has lost the
    environment mark, as Ray's agents do: found by the namespace; the same of another
    cluster's container is left alone."""
    daemons = {}
    containers = {}
    for cluster in ("a", "ab"):
        out = tmp_path / cluster
        (out / "volume").mkdir(parents=True)
        containers[cluster] = _container(out / "pods" / "u-1")
        volume = Mount(out / "volume", str(out / "pods" / "u-1" / "mnt"), read_only=False)
        daemons[cluster] = _daemon_of(containers[cluster], out, "stay", [volume])
    try:
        containers["a"].stop(grace_seconds=5)
        assert _gone(daemons["a"])
        assert _alive(daemons["ab"])
    finally:
        containers["ab"].stop(grace_seconds=5)
    assert _gone(daemons["ab"])
