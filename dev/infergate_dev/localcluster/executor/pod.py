"""A pod on the local executor: its containers, its status, its end."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from infergate.jsontypes import JSON
from infergate_dev.localcluster.executor.container import ContainerProcess, now_rfc3339
from infergate_dev.localcluster.executor.podspec import (
    ImageEnvironment,
    Lookup,
    PodSpecError,
    container_argv,
    container_env,
    image_environment,
    image_process_env,
    pre_stop_sleep,
)
from infergate_dev.localcluster.executor.volumes import (
    Mount,
    VolumeSources,
    container_mounts,
    ensure_mount_point,
    materialise,
    remove_pod_dir,
)

log = logging.getLogger("infergate.executor")

_TICK = 0.5
_MAX_BACKOFF = 30.0
_MAX_GRACE = 15.0
_MIN_GRACE_AFTER_HOOK = 2.0
"""What a kubelet still gives a container after its preStop hook used up the grace period."""
_TMP = Path("/tmp")  # noqa: S108 - the path a group pod's private /tmp is mounted at


GATES_NOT_READY = "ReadinessGatesNotReady"
"""The kubelet's reason for a pod whose containers are ready and whose gates are not."""


def gates_met(pod: JSON) -> bool:
    """Every readiness gate of the pod (spec.readinessGates) has its condition True."""
    wanted = {
        str(g.get("conditionType"))
        for g in (pod.get("spec") or {}).get("readinessGates") or []
        if isinstance(g, dict)
    }
    met = {
        str(c.get("type"))
        for c in (pod.get("status") or {}).get("conditions") or []
        if isinstance(c, dict) and c.get("status") == "True"
    }
    return wanted <= met


class PodApi(VolumeSources, Protocol):
    """What a pod runner needs of the API server."""

    def patch_pod_status(self, pod: JSON, status: JSON) -> None: ...

    def delete_pod_now(self, pod: JSON) -> None: ...


@dataclass(frozen=True)
class Site:
    """What the executor knows of this machine and cluster."""

    pods_root: Path
    logs_root: Path
    pvc_root: Path
    api_host: str
    api_port: int
    images: list[ImageEnvironment]
    hosts_file: Path
    """The cluster DNS names of pods (dns.py), /etc/hosts of pods with a subdomain."""


class PodRunner(threading.Thread):
    def __init__(self, pod: JSON, pod_ip: str, api: PodApi, site: Site) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.pod = pod
        self.pod_ip = pod_ip
        self.api = api
        self.site = site
        self.uid: str = meta["uid"]
        self.pod_dir = site.pods_root / self.uid
        self._stop_requested = threading.Event()
        self._grace = 0.0
        self._delete_after_stop = False
        self._lost = False
        self._containers: list[ContainerProcess] = []
        self._inits: list[ContainerProcess] = []
        self._phase = "Pending"
        self._last_status: JSON | None = None
        self._transitions: dict[str, tuple[str, str]] = {}
        self._pod_message: str | None = None
        self._start_time = now_rfc3339()
        self._gates_met = gates_met(pod)

    # -- requests from the agent -------------------------------------------------

    def request_stop(self, grace_seconds: float, delete: bool) -> None:
        self._grace = min(grace_seconds, _MAX_GRACE)
        self._delete_after_stop = delete
        self._stop_requested.set()

    def request_kill(self) -> None:
        """The pod's node is lost: its containers die at once (SIGKILL, no preStop) and
        nothing more is reported for it, since nothing of that machine is left to report."""
        self._lost = True
        self.request_stop(0, delete=False)

    @property
    def node_name(self) -> str | None:
        node: str | None = self.pod["spec"].get("nodeName")
        return node

    def observe(self, pod: JSON) -> None:
        """The API server's copy of the pod, as the agent listed it. Where its conditions
        say other than what this runner last reported (the node lifecycle controller marks
        every pod of a node that missed its heartbeats NotReady, as during an API server
        outage), report again at the next tick, as a kubelet's status manager does:
        otherwise the pod would stay NotReady for ever. A readiness gate set or unset
        meanwhile (by whoever owns it) changes Ready, as the kubelet's status manager
        re-derives it."""
        met = gates_met(pod)
        if met != self._gates_met:
            self._gates_met = met
            self._last_status = None
        reported = self._last_status
        if reported is None:
            return
        theirs = {
            c.get("type"): c.get("status")
            for c in (pod.get("status") or {}).get("conditions") or []
        }
        if any(theirs.get(c["type"]) != c["status"] for c in reported["conditions"]):
            self._last_status = None

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    @property
    def finished(self) -> bool:
        return self._phase in ("Succeeded", "Failed")

    # -- the pod's life -----------------------------------------------------------

    def run(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("pod %s: executor error", self.pod_ref)
        finally:
            self._end()

    def _end(self) -> None:
        if self._lost:
            for container in self._inits + self._containers:
                container.kill()
            return
        grace = self._grace
        if self._delete_after_stop:
            grace = self._pre_stop(grace)
        for container in self._inits + self._containers:
            container.stop(grace)
        if self._delete_after_stop:
            try:
                self.api.delete_pod_now(self.pod)
            except Exception:
                log.exception("pod %s: final delete failed", self.pod_ref)
            remove_pod_dir(self.pod_dir)

    def _pre_stop(self, grace: float) -> float:
        """Run the running containers' preStop hooks as a kubelet does before SIGTERM, and
        give back what is left of the grace period (at least the kubelet's 2 s).

        A `sleep` hook holds the SIGTERM while the pod, already terminating and so no
        longer ready in its EndpointSlices, is dropped by those who route to it: clients
        that re-read the slices every few seconds stop sending before the server stops
        taking requests. The hooks of several containers run at the same time.
        """
        running = [c for c in self._containers if c.popen is not None]
        for container in running:
            hook = (container.spec.get("lifecycle") or {}).get("preStop") or {}
            if hook and not pre_stop_sleep(container.spec):
                log.warning(
                    "pod %s: container %s: preStop %s is not run by this executor",
                    self.pod_ref, container.name, sorted(hook),
                )  # fmt: skip
        hold = min(max((pre_stop_sleep(c.spec) for c in running), default=0.0), grace)
        if hold <= 0:
            return grace
        log.info("pod %s: preStop sleep %.0f s before SIGTERM", self.pod_ref, hold)
        time.sleep(hold)
        return max(grace - hold, _MIN_GRACE_AFTER_HOOK)

    @property
    def pod_ref(self) -> str:
        return f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"

    def _make(self, spec: JSON) -> ContainerProcess:
        ns, name = self.pod["metadata"]["namespace"], self.pod["metadata"]["name"]
        return ContainerProcess(
            spec=spec,
            pod_dir=self.pod_dir,
            log_path=self.site.logs_root / f"{ns}_{name}_{spec['name']}.log",
        )

    def _live(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self.pod.setdefault("status", {})["podIP"] = self.pod_ip
        self._inits = [self._make(c) for c in self.pod["spec"].get("initContainers") or []]
        self._containers = [self._make(c) for c in self.pod["spec"]["containers"]]
        self._report()
        volume_paths = self._prepare()
        if volume_paths is None:
            return
        restart_policy = self.pod["spec"].get("restartPolicy", "Always")
        for init in self._inits:
            while not self._stop_requested.is_set():
                code = self._run_to_end(init, volume_paths)
                if code == 0:
                    break
                if restart_policy == "Never":
                    self._phase = "Failed"
                    self._report()
                    return
                init.last_state = {"terminated": init.terminated}
                init.restart_count += 1
                self._stop_requested.wait(min(2.0**init.restart_count, _MAX_BACKOFF))
        for container in self._containers:
            self._start(container, volume_paths)
        self._phase = "Running"
        while not self._stop_requested.is_set():
            self._tick(restart_policy, volume_paths)
            self._report()
            if self.finished:
                return
            self._stop_requested.wait(_TICK)

    def _prepare(self) -> dict[str, Path | None] | None:
        """Materialise volumes, retrying while a referenced object is missing."""
        while not self._stop_requested.is_set():
            try:
                return materialise(self.pod, self.pod_dir, self.api, self.site.pvc_root)
            except PodSpecError as exc:
                for container in self._inits + self._containers:
                    container.waiting = {
                        "reason": "CreateContainerConfigError",
                        "message": str(exc),
                    }
                self._report()
                self._stop_requested.wait(3.0)
        return None

    def _lookup(self) -> Lookup:
        ns = self.pod["metadata"]["namespace"]
        lookup = Lookup()
        for container in self.pod["spec"]["containers"] + (
            self.pod["spec"].get("initContainers") or []
        ):
            for var in container.get("env") or []:
                source = var.get("valueFrom") or {}
                if "configMapKeyRef" in source:
                    name = source["configMapKeyRef"]["name"]
                    lookup.configmaps[name] = self.api.configmap(ns, name) or {}
                if "secretKeyRef" in source:
                    name = source["secretKeyRef"]["name"]
                    lookup.secrets[name] = self.api.secret(ns, name) or {}
            for source in container.get("envFrom") or []:
                if "configMapRef" in source:
                    name = source["configMapRef"]["name"]
                    lookup.configmaps[name] = self.api.configmap(ns, name) or {}
                if "secretRef" in source:
                    name = source["secretRef"]["name"]
                    lookup.secrets[name] = self.api.secret(ns, name) or {}
        return lookup

    def _start(self, container: ContainerProcess, volume_paths: dict[str, Path | None]) -> None:
        try:
            image = container.spec.get("image", "")
            image_env = image_environment(image, self.site.images)
            base = {
                "HOME": "/root",
                "HOSTNAME": self.pod["metadata"]["name"],
                "LANG": "C.UTF-8",
                "KUBERNETES_SERVICE_HOST": self.site.api_host,
                "KUBERNETES_SERVICE_PORT": str(self.site.api_port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(self.site.api_port),
                **image_process_env(image_env, os.environ.get("PATH", "/usr/bin:/bin")),
            }
            env = container_env(self.pod, container.spec, self._lookup(), base)
            argv = container_argv(container.spec, image_env, env)
            mounts = container_mounts(container.spec, volume_paths)
            if self.pod["spec"].get("subdomain"):
                # Pods of a group reach each other by name (LWS_LEADER_ADDRESS), and each
                # has a /tmp of its own, as a container does: Ray keeps its node's session
                # and the address of the cluster it joined there (/tmp/ray), which two
                # groups on this machine would otherwise share.
                mounts = self._group_mounts(mounts)
        except PodSpecError as exc:
            container.waiting = {"reason": "CreateContainerConfigError", "message": str(exc)}
            container.next_restart_at = time.monotonic() + 5.0
            return
        container.start(argv, env, mounts)

    def _group_mounts(self, mounts: list[Mount]) -> list[Mount]:
        """A private /tmp first (the pod's own volumes mounted below it stay on top, their
        mount points made inside it), then the cluster's hosts file, then the volumes."""
        tmp: Path = self.pod_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)
        for mount in mounts:
            target = Path(mount.target)
            if target.is_relative_to(_TMP):
                inside = tmp / target.relative_to(_TMP)
                ensure_mount_point(Mount(mount.source, str(inside), mount.read_only))
        return [
            Mount(tmp, str(_TMP), read_only=False),
            Mount(self.site.hosts_file, "/etc/hosts", read_only=True),
            *mounts,
        ]

    def _run_to_end(self, container: ContainerProcess, volume_paths: dict[str, Path | None]) -> int:
        self._start(container, volume_paths)
        while not self._stop_requested.is_set():
            code = container.poll()
            if code is not None:
                container.record_exit(code)
                return code
            if container.popen is None:  # could not start
                self._stop_requested.wait(5.0)
                self._start(container, volume_paths)
            self._report()
            self._stop_requested.wait(_TICK)
        return -1

    def _tick(self, restart_policy: str, volume_paths: dict[str, Path | None]) -> None:
        now = time.monotonic()
        for container in self._containers:
            code = container.poll()
            if code is not None:
                container.record_exit(code)
                should_restart = restart_policy == "Always" or (
                    restart_policy == "OnFailure" and code != 0
                )
                if should_restart:
                    container.last_state = {"terminated": container.terminated}
                    container.restart_count += 1
                    backoff = min(2.0 ** (container.restart_count - 1), _MAX_BACKOFF)
                    container.next_restart_at = now + backoff
                    container.waiting = {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff:.0f}s restarting failed container",
                    }
                    container.terminated = None
            elif container.popen is not None and not container.run_probes(self.pod_ip):
                container.stop(2.0)
                container.last_state = {"terminated": container.terminated}
                container.restart_count += 1
                container.terminated = None
                container.next_restart_at = now
            idle = container.popen is None and container.terminated is None
            if idle and now >= container.next_restart_at:
                self._start(container, volume_paths)
        if all(c.terminated is not None for c in self._containers):
            codes = [c.terminated["exitCode"] for c in self._containers if c.terminated]
            self._phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"

    def _report(self) -> None:
        if self._lost:
            return
        statuses = [c.status(c.spec.get("image", "")) for c in self._containers]
        init_statuses = [c.status(c.spec.get("image", "")) for c in self._inits]
        all_ready = bool(statuses) and all(s["ready"] for s in statuses)
        initialized = all(
            c.terminated is not None and c.terminated["exitCode"] == 0 for c in self._inits
        )
        ready = all_ready and self._phase == "Running"

        def condition(kind: str, value: bool) -> JSON:
            return {"type": kind, "status": "True" if value else "False"}

        # Ready waits for every readiness gate, with the kubelet's reason when they hold it.
        ready_condition = condition("Ready", ready and self._gates_met)
        if ready and not self._gates_met:
            ready_condition["reason"] = GATES_NOT_READY

        status: JSON = {
            "phase": self._phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self._start_time,
            "conditions": [
                condition("PodScheduled", True),
                condition("PodReadyToStartContainers", True),
                condition("Initialized", initialized),
                condition("ContainersReady", ready),
                ready_condition,
            ],
            "containerStatuses": statuses,
        }
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        if status == self._last_status:
            return
        stamp = now_rfc3339()
        conditions = []
        for cond in status["conditions"]:
            before = self._transitions.get(cond["type"])
            since = before[1] if before is not None and before[0] == cond["status"] else stamp
            conditions.append({**cond, "lastTransitionTime": since})
        try:
            self.api.patch_pod_status(self.pod, {**status, "conditions": conditions})
        except Exception:
            log.exception("pod %s: status update failed", self.pod_ref)
            return
        self._last_status = status
        self._transitions = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in conditions}
