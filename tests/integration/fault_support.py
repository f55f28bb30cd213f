"""What the fault tests share: the gate's invariants, a watch that records what users saw
during a fault, and operator processes the test starts itself (behind the fault proxy).

The invariants, asserted after every fault:

- no canary is promoted without a bound Passed verdict: the stable revision is the one
  before the fault, in every status the API server served meanwhile;
- the stable revision keeps serving: its Deployment stayed at full size in every state
  served meanwhile, and its spec was never written (same generation);
- no duplicate children: one Deployment per revision that should exist, one ParityCheck
  (the one whose uid the rollout recorded), one runner Job for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import REPO, Cluster, wait_for
from tests.integration.admission_support import (
    ADMISSION_DIR,
    SESSION_LABEL,
    built,
    patch_check_status_as,
    recorded_runner_account,
    session_policies,
)
from tests.integration.controller_support import (
    RESYNC_SECONDS,
    Idep,
    OperatorInstall,
    watched_namespace,
)
from tests.integration.fault_proxy import FaultProxy, write_kubeconfig

INSTALLED_REPLICAS = 2
"""Replicas of the installed operator (its Deployment's), restored after the processes of a
test's own ran in its place."""

# -- what users saw during a fault -----------------------------------------------------------


@dataclass
class Seen:
    at: float
    what: str
    """"stable" or a revision's Deployment"""
    value: str


class GateWatch:
    """Everything the API server served about one InferenceDeployment's stable revision, its
    Deployments' sizes and the revision its stable Service selects, from
    `kubectl get --watch` (restarted whenever the stream ends, as it does while the API
    server restarts)."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.seen: list[Seen] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[str]] = []
        self._threads = [
            threading.Thread(
                target=self._follow,
                args=("stable", ["idep", name, "-o", 'jsonpath={.status.stableRevision}{"\\n"}']),
                daemon=True,
            ),
            threading.Thread(
                target=self._follow,
                args=(
                    "deployment",
                    [
                        "deployments",
                        "-l",
                        f"infergate.io/deployment={name}",
                        "-o",
                        (
                            "jsonpath={.metadata.labels.infergate\\.io/revision}={.spec.replicas}"
                            '/{.metadata.generation}{"\\n"}'
                        ),
                    ],
                ),
                daemon=True,
            ),
            threading.Thread(
                target=self._follow,
                args=(
                    "service",
                    [
                        "service",
                        name,
                        "-o",
                        'jsonpath={.spec.selector.infergate\\.io/revision}{"\\n"}',
                    ],
                ),
                daemon=True,
            ),
        ]

    def __enter__(self) -> GateWatch:
        for thread in self._threads:
            thread.start()
        wait_for(self.stables, 30, "the watch's first answer")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        with self._lock:
            for proc in self._procs:
                proc.kill()
        for thread in self._threads:
            thread.join(10)

    def _follow(self, what: str, args: list[str]) -> None:
        argv = [
            str(self.cluster.kubectl_path), f"--kubeconfig={self.cluster.kubeconfig}",
            "get", "-n", self.namespace, "--watch", "--request-timeout=0", *args,
        ]  # fmt: skip
        while not self._stop.is_set():
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            with self._lock:
                self._procs.append(proc)
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip():
                    with self._lock:
                        self.seen.append(Seen(time.monotonic(), what, line.strip()))
            proc.wait()
            self._stop.wait(0.5)

    def stables(self) -> set[str]:
        with self._lock:
            return {s.value for s in self.seen if s.what == "stable"}

    def sizes(self, revision: str) -> set[int]:
        """Every spec.replicas served for the revision's Deployment."""
        with self._lock:
            values = [s.value for s in self.seen if s.what == "deployment"]
        return {
            int(v.split("=", 1)[1].split("/")[0]) for v in values if v.startswith(f"{revision}=")
        }

    def first_size(self, revision: str, replicas: int) -> float | None:
        """When the revision's Deployment was first served at `replicas` (None: never)."""
        with self._lock:
            return next(
                (
                    s.at
                    for s in self.seen
                    if s.what == "deployment"
                    and s.value.startswith(f"{revision}=")
                    and int(s.value.split("=", 1)[1].split("/")[0]) == replicas
                ),
                None,
            )

    def first_selected(self, revision: str) -> float | None:
        """When the stable Service was first served selecting `revision` (None: never)."""
        with self._lock:
            return next(
                (s.at for s in self.seen if s.what == "service" and s.value == revision), None
            )

    def generations(self, revision: str) -> set[int]:
        with self._lock:
            values = [s.value for s in self.seen if s.what == "deployment"]
        return {int(v.rsplit("/", 1)[1]) for v in values if v.startswith(f"{revision}=")}


def assert_gate_held(watch: GateWatch, stable: str, replicas: int) -> None:
    """Nothing was promoted and the stable revision served at full size, untouched, in every
    state the API server served while `watch` ran."""
    assert watch.stables() == {stable}, f"stable revisions served: {watch.stables()}"
    assert watch.sizes(stable) == {replicas}, f"stable sizes served: {watch.sizes(stable)}"
    assert len(watch.generations(stable)) == 1, (
        f"the stable Deployment's spec was written: generations {watch.generations(stable)}"
    )


def runner_selector(namespace: str, check: str) -> str:
    """The labels of the runner objects of check `namespace/check`, which live in the
    runner namespace (the operator's), whichever it is."""
    return (
        f"infergate.io/paritycheck={check},infergate.io/paritycheck-role=runner,"
        f"infergate.io/paritycheck-namespace={namespace}"
    )


def runner_jobs(cluster: Cluster, namespace: str, check: str) -> list[str]:
    """The runner Jobs of check `namespace/check`, in any namespace."""
    listed = cluster.get_json("jobs", "-A", "-l", runner_selector(namespace, check))["items"]
    return [j["metadata"]["name"] for j in listed]


def assert_no_duplicates(idep: Idep, revisions: set[str], canary: str | None) -> None:
    """One Deployment per revision in `revisions`, and for the canary one ParityCheck (the
    one the rollout recorded) with at most one runner Job."""
    cluster, namespace = idep.cluster, idep.namespace
    assert set(idep.revisions()) == revisions
    family = re.compile(rf"^{re.escape(idep.name)}-[0-9a-f]{{10}}$")
    checks = cluster.get_json("pcheck", "-n", namespace)["items"]
    live = [
        c
        for c in checks
        if family.match(c["metadata"]["name"]) and not c["metadata"].get("deletionTimestamp")
    ]
    if canary is None:
        return
    name = f"{idep.name}-{canary}"
    assert [c["metadata"]["name"] for c in live] == [name], [c["metadata"]["name"] for c in live]
    record = {r["hash"]: r for r in idep.status()["revisions"]}[canary]
    assert record.get("parityCheckUid") == live[0]["metadata"]["uid"]
    assert len(runner_jobs(cluster, namespace, name)) <= 1


# -- the admission policies, and verdicts written by the check's own runner ----------------


@pytest.fixture(scope="module")
def admission_policies(operator: OperatorInstall) -> Iterator[str]:
    """manifests/admission installed for the module's tests, as a platform installs them
    (admission_support.session_policies): the policies that judge the operator's own
    requests match the install's ServiceAccount (the one the installed pods and the test's
    operator processes run as), the ones that judge users' requests the namespaces labelled
    with the returned session. So the fault tests run under exactly the rules a real
    install enforces: only the operator writes InferenceDeployment status, only the check's
    recorded runner (or the operator) its ParityCheck's, the operator's workloads are
    bounded."""
    cluster = operator.cluster
    session = uuid.uuid4().hex[:6]
    policies = session_policies(built(cluster, ADMISSION_DIR), session, operator.namespace)
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in policies))
    probe = f"adm-probe-{session}"
    cluster.kubectl("create", "namespace", probe)
    cluster.kubectl("label", "namespace", probe, f"{SESSION_LABEL}={session}")
    forged = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "probe", "annotations": {"infergate.io/requested-by": "nobody"}},
        "spec": {
            "model": {"name": "tiny", "uri": "hf://infergate/tiny-qwen2"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 2048},
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
        },
    }

    def enforced() -> bool | None:
        # A requested-by set alone is refused by the control-requester policy: the
        # policies have reached the admission chain (through its informers).
        tried = cluster.kubectl(
            "create", "-n", probe, "--dry-run=server", "-f", "-",
            input=json.dumps(forged), check=False,
        )  # fmt: skip
        return (tried.returncode != 0 and "requested-by" in tried.stderr) or None

    wait_for(enforced, 60, "the admission policies enforced")
    cluster.kubectl("delete", "namespace", probe, "--wait=false")
    yield session
    for policy in reversed(policies):
        kind = policy["kind"].lower()
        cluster.kubectl("delete", kind, policy["metadata"]["name"], check=False)


@pytest.fixture
def idep_namespace(
    operator: OperatorInstall,
    admission_policies: str,
    cluster: Cluster,
    request: pytest.FixtureRequest,
) -> Iterator[str]:
    """A fresh namespace the session's operator watches, under the admission policies."""
    made = watched_namespace(operator, cluster, request)
    name = next(made)
    cluster.kubectl("label", "namespace", name, f"{SESSION_LABEL}={admission_policies}")
    yield name
    next(made, None)


class RunnerIdep(Idep):
    """An InferenceDeployment whose checks' verdicts are written as the runner writes them:
    with a token of the ServiceAccount the operator recorded in the check's
    status.runnerServiceAccount (the API server sets its uid), by a PATCH of the status
    subresource, the only verb its Role grants there. The admission policies refuse anyone
    else, a cluster admin included. The account lives in the runner namespace (the
    operator's: `runner_namespace`, or wherever the recorded uid is found when None), apart
    from the check's."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        manifest: dict[str, Any],
        *,
        runner_namespace: str | None = None,
    ) -> None:
        super().__init__(cluster, namespace, manifest)
        self.runner_namespace = runner_namespace

    def write_check_status(
        self, check: str, status: dict[str, Any], *, as_user: str | None = None
    ) -> None:
        del as_user  # the runner's own token, never an impersonated user
        cluster, namespace, runners = self.cluster, self.namespace, self.runner_namespace

        # A check begun by an operator of another runner namespace is recorded again once
        # this one has made its runner: the account is found by its recorded uid.
        account = wait_for(
            lambda: recorded_runner_account(cluster, namespace, check, runners),
            120,
            f"{check}'s recorded runner ServiceAccount in {runners or 'any'}",
        )
        # The runner runs once its Job exists, which the operator creates after the
        # runner's Role and RoleBinding.
        wait_for(
            lambda: runner_jobs(cluster, namespace, check) or None, 120, f"{check}'s runner Job"
        )

        def written() -> Any:
            answer = patch_check_status_as(cluster, account, namespace, check, status)
            # Retried on 403: the API server authorizes from its own cache of RoleBindings,
            # which after an etcd outage lists everything again and may lag the runner's
            # (seen once in the etcd-down case). A refusal that lasts fails the test.
            return None if answer.status_code == 403 else answer

        try:
            answer = wait_for(written, 60, f"{account[0]} allowed to write {check}'s status", 2.0)
        except AssertionError as refused:
            raise AssertionError(f"{account[0]} writing {check}: refused for 60s") from refused
        assert answer.status_code == 200, f"{account[0]} writing {check}: {answer.text}"


# -- operator processes of the test's own --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalOperator:
    """`infergate operator` as a process of the test, under the install's ServiceAccount (a
    token from the TokenRequest API), reaching the API server through a fault proxy.

    The same code and the same RBAC as the installed pod; only the path to the API server
    differs, so the proxy sees (and can fail) every request the operator makes."""

    install: OperatorInstall
    proxy: FaultProxy
    workdir: Path
    name: str = "local"
    leader_election: bool = False
    extra_args: tuple[str, ...] = ()
    """More `infergate operator` flags (`--allow-host-path` for a file:// model, say)."""
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    starts: list[float] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"operator-{self.name}.log"

    def start(self) -> LocalOperator:
        cluster = self.install.cluster
        token = cluster.kubectl(
            "create", "token", "infergate-operator", "-n", self.install.namespace,
            "--duration=2h",
        ).stdout.strip()  # fmt: skip
        kubeconfig = write_kubeconfig(
            self.workdir / f"kubeconfig-{self.name}", self.proxy.url, token, self.install.namespace
        )
        self.metrics_port = _free_port()
        argv = [
            str(REPO / ".venv" / "bin" / "infergate"), "operator",
            f"--kubeconfig={kubeconfig}",
            f"--namespace=idep-{self.install.session}-*",
            f"--resync-seconds={RESYNC_SECONDS}",
            "--bind-address=127.0.0.1", f"--metrics-port={self.metrics_port}", "--health-port=0",
        ]  # fmt: skip
        if self.leader_election:
            argv.append("--leader-election")
        argv += self.extra_args
        env = {
            **os.environ,
            "POD_NAMESPACE": self.install.namespace,
            "POD_NAME": self.name,
            "PYTHONUNBUFFERED": "1",
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.starts.append(time.monotonic())
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup handler runs, no Lease is released."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM, as a pod's termination would (SIGKILL after 20 seconds)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metric(self, name: str) -> float | None:
        """One unlabelled sample of its /metrics (None while it does not answer)."""
        import httpx

        try:
            text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return None
        line = next((x for x in text.splitlines() if x.startswith(f"{name} ")), None)
        return float(line.split()[1]) if line else None


def mid_canary(idep: Idep) -> tuple[str, str, dict[str, Any]]:
    """Stable, then a canary under check: (stable, canary, its ParityCheck)."""
    idep.apply()
    stable = idep.wait_stable(timeout=90)
    idep.apply(dtype="float16")
    canary, check = idep.wait_check(timeout=90)
    idep.wait_phase("Verifying", timeout=60)
    return stable, canary, check


@dataclass
class Rig:
    """The test's own operator processes and their proxies (all stopped by `close`)."""

    install: OperatorInstall
    workdir: Path
    proxies: list[FaultProxy] = field(default_factory=list)
    operators: list[LocalOperator] = field(default_factory=list)

    def proxy(self) -> FaultProxy:
        """A new fault proxy in front of the cluster's API server."""
        cluster = self.install.cluster
        config = yaml.safe_load(cluster.kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]["server"]
        self.proxies.append(FaultProxy(server, cluster.layout.pki / "ca.crt").start())
        return self.proxies[-1]

    def operator(
        self,
        proxy: FaultProxy,
        name: str,
        *,
        leader_election: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> LocalOperator:
        """A new operator process behind `proxy`, started."""
        process = LocalOperator(
            self.install,
            proxy,
            self.workdir,
            name=name,
            leader_election=leader_election,
            extra_args=extra_args,
        )
        self.operators.append(process.start())
        return process

    def close(self) -> None:
        for process in self.operators:
            process.stop()
        for index, proxy in enumerate(self.proxies):
            proxy.dump(self.workdir / f"proxy-{index}.log")
            proxy.stop()


@pytest.fixture(scope="module")
def installed_stopped(operator: OperatorInstall) -> Iterator[OperatorInstall]:
    """The installed replicas scaled to 0 (and the Lease gone), back to 2 afterwards."""
    operator.scale(0)
    operator.cluster.kubectl(
        "delete", "lease", "infergate-operator", "-n", operator.namespace, "--ignore-not-found"
    )
    yield operator
    operator.scale(INSTALLED_REPLICAS)


@pytest.fixture
def rig(installed_stopped: OperatorInstall, tmp_path: Path) -> Iterator[Rig]:
    """Operator processes of this test behind fault proxies, stopped when it ends."""
    made = Rig(installed_stopped, tmp_path)
    yield made
    made.close()


@contextlib.contextmanager
def explained(*ideps: Idep) -> Iterator[None]:
    """On a failed assertion, add what each deployment's status and Deployments said."""
    try:
        yield
    except AssertionError as error:
        said = [
            f"{i.name}: revisions {i.revisions()} status "
            + json.dumps({k: v for k, v in i.status().items() if k != "revisions"}, sort_keys=True)[
                :1500
            ]
            for i in ideps
        ]
        raise AssertionError(f"{error}\n" + "\n".join(said)) from error
