"""A stopped container ends as under a kubelet: SIGTERM to its main process alone, so a
server that drains finishes its requests in flight through its own workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from infergate_dev.localcluster.executor.container import ContainerProcess
from infergate_dev.localcluster.executor.pod import PodRunner, Site

# The container's main process: a server with one worker process, which on SIGTERM waits
# for its worker to finish the request in flight (a drain) and then exits. The worker
# dies at once on a SIGTERM of its own, as vLLM's workers do.
_SERVER = """
import pathlib, signal, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
worker = subprocess.Popen([sys.executable, "-c",
    "import pathlib, sys, time; time.sleep(1.0); pathlib.Path(sys.argv[1]).write_text('done')",
    str(out / "answer")])
(out / "worker.pid").write_text(str(worker.pid))
def drain(*_):
    worker.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
(out / "ready").write_text("")
while True:
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_draining_server_finishes_its_request_in_flight_when_stopped(tmp_path: Path) -> None:
    container = ContainerProcess(
        spec={"name": "engine"}, pod_dir=tmp_path, log_path=tmp_path / "engine.log"
    )
    container.start([sys.executable, "-c", _SERVER, str(tmp_path)], {}, [])
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline, (tmp_path / "engine.log").read_text()
        time.sleep(0.05)
    worker = int((tmp_path / "worker.pid").read_text())
    container.stop(grace_seconds=20)
    # The worker was not signalled: it answered, and the server exited cleanly after it.
    assert (tmp_path / "answer").read_text() == "done"
    assert container.terminated is not None
    assert container.terminated["exitCode"] == 0
    assert not _alive(worker)


def test_a_server_that_ignores_sigterm_is_killed_with_all_it_started(tmp_path: Path) -> None:
    stubborn = (
        "import pathlib, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "pathlib.Path(sys.argv[1]).write_text(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    container = ContainerProcess(
        spec={"name": "engine"}, pod_dir=tmp_path, log_path=tmp_path / "engine.log"
    )
    pid_file = tmp_path / "child.pid"
    container.start([sys.executable, "-c", stubborn, str(pid_file)], {}, [])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, (tmp_path / "engine.log").read_text()
        time.sleep(0.05)
    child = int(pid_file.read_text())
    container.stop(grace_seconds=0.5)
    assert container.terminated is not None
    assert container.terminated["exitCode"] == 128 + signal.SIGKILL
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


# The main process records when SIGTERM reached it, then exits.
_RECORDS_SIGTERM = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def term(*_):
    (out / "term").write_text(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(out / "ready").write_text("")
while True:
    time.sleep(0.05)
"""


def test_a_deleted_pod_holds_sigterm_for_its_prestop_sleep(tmp_path: Path) -> None:
    """A kubelet runs the preStop hook before SIGTERM, within the grace period: while it
    sleeps, the pod is terminating (not ready in its EndpointSlices) and still serving,
    so clients that re-read the slices stop sending before the server stops taking."""
    spec = {"name": "engine", "lifecycle": {"preStop": {"sleep": {"seconds": 2}}}}
    pod = {"metadata": {"name": "engine-0", "namespace": "llm", "uid": "u-1"},
           "spec": {"containers": [spec]}}  # fmt: skip
    site = Site(tmp_path, tmp_path, tmp_path, "", 0, [], tmp_path / "hosts")
    runner = PodRunner(pod, "127.0.0.9", None, site)  # type: ignore[arg-type]
    container = ContainerProcess(spec=spec, pod_dir=tmp_path, log_path=tmp_path / "e.log")
    runner._containers = [container]
    container.start([sys.executable, "-c", _RECORDS_SIGTERM, str(tmp_path)], {}, [])
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline, (tmp_path / "e.log").read_text()
        time.sleep(0.05)
    asked = time.monotonic()
    left = runner._pre_stop(10.0)
    assert not (tmp_path / "term").exists()  # nothing signalled during the hook
    container.stop(left)
    assert float((tmp_path / "term").read_text()) - asked >= 2.0
    assert left == 8.0  # the hook's time came out of the grace period
    assert container.terminated is not None
    assert container.terminated["exitCode"] == 0


def test_a_prestop_longer_than_the_grace_leaves_the_kubelets_two_seconds(tmp_path: Path) -> None:
    spec = {"name": "engine", "lifecycle": {"preStop": {"sleep": {"seconds": 30}}}}
    pod = {"metadata": {"name": "engine-0", "namespace": "llm", "uid": "u-1"},
           "spec": {"containers": [spec]}}  # fmt: skip
    site = Site(tmp_path, tmp_path, tmp_path, "", 0, [], tmp_path / "hosts")
    runner = PodRunner(pod, "127.0.0.9", None, site)  # type: ignore[arg-type]
    # No container process runs: no hook is run, the grace is untouched.
    runner._containers = [ContainerProcess(spec=spec, pod_dir=tmp_path, log_path=tmp_path / "l")]
    assert runner._pre_stop(1.0) == 1.0
    # One runs: the hook is cut at the grace period, and 2 s are left for SIGTERM.
    runner._containers[0].popen = subprocess.Popen([sys.executable, "-c", "pass"])
    runner._containers[0].popen.wait()
    assert runner._pre_stop(1.0) == 2.0
