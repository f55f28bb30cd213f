"""One container process: start, watch, probe, stop."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from infergate.jsontypes import JSON
from infergate_dev.localcluster.executor import ownership, probes
from infergate_dev.localcluster.executor.volumes import Mount, ensure_mount_point

log = logging.getLogger("infergate.executor")

# The launcher starts from a bare environment (the container's own is applied at its
# exec), so it finds this package by its source folder, installed or not.
_LAUNCHER_PYTHONPATH = str(Path(__file__).resolve().parents[3])


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])  # field 22 of stat: start time in clock ticks


@dataclass
class _ProbeState:
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0


@dataclass
class ContainerProcess:
    """A container of a pod, across its restarts."""

    spec: JSON
    pod_dir: Path
    log_path: Path
    restart_count: int = 0
    popen: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    started_mono: float = 0.0
    ready: bool = False
    started: bool = False
    terminated: JSON | None = None
    last_state: JSON = field(default_factory=dict)
    waiting: JSON | None = None
    next_restart_at: float = 0.0
    probe_state: dict[str, _ProbeState] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    namespace: ownership.HeldNamespace | None = None
    """The container's own mount namespace, held from once its command runs until what
    is left in it is killed: it finds the processes that lost their environment mark."""

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def mark(self) -> str:
        """What every process of this container carries in its environment (ownership)."""
        return ownership.container_mark(self.pod_dir, self.name)

    def start(self, argv: list[str], env: dict[str, str], mounts: list[Mount]) -> None:
        # Last, so the spec's own env cannot drop it.
        env = {**env, ownership.MARK: self.mark}
        for mount in mounts:
            ensure_mount_point(mount)
        spec_file = self.pod_dir / f"{self.name}.launch.json"
        spec_file.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "env": env,
                    "cwd": self.spec.get("workingDir"),
                    "mounts": [m.as_json() for m in mounts],
                }
            )
        )
        spec_file.chmod(0o600)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        launcher = [
            sys.executable,
            "-m",
            "infergate_dev.localcluster.executor.launch",
            str(spec_file),
        ]
        if mounts:
            launcher = ["unshare", "--mount", "--propagation", "private", "--", *launcher]
        with self.log_path.open("ab") as log:
            log.write(f"--- {now_rfc3339()} start {argv}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                launcher,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "PYTHONPATH": _LAUNCHER_PYTHONPATH,
                },
                start_new_session=True,
            )
        (self.pod_dir / f"{self.name}.pid").write_text(
            json.dumps({"pid": self.popen.pid, "start": _start_ticks(self.popen.pid)})
        )
        self.env = env
        self.started_at = now_rfc3339()
        self.started_mono = time.monotonic()
        self.terminated = None
        self.waiting = None
        self.ready = False
        self.started = "startupProbe" not in self.spec
        self.probe_state = {}

    def poll(self) -> int | None:
        """The exit code once the process has ended (128+n for signal n). What else of the
        container still runs then is killed: a container ends with its main process."""
        if self.popen is None:
            return None
        code = self.popen.poll()
        if code is None:
            self._hold_namespace()
            return None
        self._kill_rest()
        return 128 - code if code < 0 else code

    def record_exit(self, code: int) -> None:
        self.terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": now_rfc3339(),
        }
        self.ready = False
        self.popen = None

    def stop(self, grace_seconds: float) -> None:
        """Stop as a container runtime does: SIGTERM to the container's main process alone
        (its PID 1), up to `grace_seconds` for it to end, then SIGKILL to whatever of the
        container is left. A server that drains on SIGTERM (vLLM with --shutdown-timeout)
        stops its own workers once its requests in flight are done; signalling the whole
        process group killed those workers at once, mid-request, which no kubelet does."""
        if self.popen is None:
            return
        self._hold_namespace()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_seconds)
        # The container ends with its main process, or at the end of its grace: nothing it
        # started outlives it.
        _signal_group(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._kill_rest()
        code = self.popen.returncode
        self.record_exit(128 - code if code < 0 else code)

    def kill(self) -> None:
        """SIGKILL to the whole container at once, as when its machine is lost: no SIGTERM,
        no drain of the requests in flight."""
        if self.popen is None:
            return
        self._hold_namespace()
        _signal_group(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._kill_rest()
        code = self.popen.returncode
        self.record_exit(128 - code if code < 0 else code)

    def _hold_namespace(self) -> None:
        if self.namespace is None and self.popen is not None:
            self.namespace = ownership.hold_namespace(self.popen.pid)

    def _kill_rest(self) -> None:
        """SIGKILL what is left of the container outside its process group (Ray's workers
        run in groups of their own) or after its main process ended on its own (Ray's
        daemons outlive the `ray start` that started them), as a runtime empties the
        container's cgroup."""
        held = frozenset([self.namespace.name]) if self.namespace is not None else frozenset()
        killed = ownership.kill_owned(Path(self.mark), held)
        if self.namespace is not None:
            self.namespace.release()
            self.namespace = None
        if killed:
            log.info("container %s: killed %d processes left outside its group", self.mark, killed)

    def run_probes(self, pod_ip: str) -> bool:
        """Run the probes that are due; False when liveness (or startup) says restart."""
        now = time.monotonic()
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = self.spec.get(kind)
            if kind != "startupProbe" and not self.started:
                continue
            if kind == "startupProbe" and (probe is None or self.started):
                continue
            if probe is None:
                if kind == "readinessProbe":
                    self.ready = True
                continue
            state = self.probe_state.setdefault(kind, _ProbeState())
            if state.next_at == 0.0:
                state.next_at = self.started_mono + float(probe.get("initialDelaySeconds", 0))
            if now < state.next_at:
                continue
            state.next_at = now + float(probe.get("periodSeconds", 10))
            if probes.check(probe, self.spec, pod_ip, self.env):
                state.successes, state.failures = state.successes + 1, 0
            else:
                state.successes, state.failures = 0, state.failures + 1
            success_threshold = int(probe.get("successThreshold", 1))
            failure_threshold = int(probe.get("failureThreshold", 3))
            if kind == "readinessProbe":
                if state.successes >= success_threshold:
                    self.ready = True
                elif state.failures >= failure_threshold:
                    self.ready = False
            elif kind == "startupProbe" and state.successes >= 1:
                self.started = True
            elif state.failures >= failure_threshold:
                return False
        return True

    def status(self, image: str) -> JSON:
        if self.popen is not None:
            state: JSON = {"running": {"startedAt": self.started_at}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            state = {"waiting": self.waiting or {"reason": "ContainerCreating"}}
        status: JSON = {
            "name": self.name,
            "image": image,
            "imageID": image,
            "ready": self.ready and self.popen is not None,
            "started": self.started and self.popen is not None,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state,
        }
        if self.popen is not None:
            status["containerID"] = f"local://{self.popen.pid}"
        return status


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_leftovers(pod_dir: Path) -> int:
    """Kill the container processes of a pod dir whose executor is gone: those recorded
    there and every process marked as the pod's (ownership), in whatever group."""
    return kill_recorded(pod_dir) + ownership.kill_owned(pod_dir)


def kill_recorded(pod_dir: Path) -> int:
    """Kill the process groups of the containers recorded under a pod dir (its pid files),
    where each is still the process recorded."""
    killed = 0
    for pid_file in pod_dir.glob("*.pid"):
        try:
            record = json.loads(pid_file.read_text())
        except (OSError, ValueError):
            continue
        pid = int(record["pid"])
        if record.get("start") is not None and _start_ticks(pid) == record["start"]:
            _signal_group(pid, signal.SIGKILL)
            killed += 1
        pid_file.unlink(missing_ok=True)
    return killed
