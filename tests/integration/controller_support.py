"""The operator under test, installed from manifests/operator, and InferenceDeployments that
land on KWOK's simulated nodes.

The operator runs as a real pod on the local executor node `executor`, under the
ServiceAccount and ClusterRole of manifests/operator (so a missing permission
fails a test), with in-cluster credentials. Each test session installs its own
copy: the kustomize output with every name suffixed and the operator limited to
this session's namespaces (`idep-<session>-*`), so it never touches other
people's objects and two sessions never collide.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from infergate.plan.check.status import spec_digest
from tests.harness import (
    REPO,
    Cluster,
    apply_crds,
    install_for_session,
    leader_pod,
    namespace_for,
    release_namespace,
    wait_for,
)

# The operator and the ParityCheck controller's role, exactly as installed.
INSTALL_DIRS = (REPO / "manifests" / "operator", REPO / "manifests" / "runner")
# A short resync for the fault-injection operator (tests/integration/fault_support.py),
# and the pause of `settle`.
RESYNC_SECONDS = 2
# How long a promoted deployment keeps its previous stable once traffic moved (the default
# is 30 s): short, so that a test's waits for a promotion to end stay short too.
SCALE_DOWN_DELAY = 5
# Tolerations and selector that put engine pods on KWOK's simulated accelerator nodes,
# where they become Ready at once and no engine process runs.
KWOK_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [
        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
    ],
}


@dataclass
class OperatorInstall:
    """One installed copy of the operator."""

    cluster: Cluster
    session: str
    namespace: str
    cluster_roles: tuple[str, ...]

    @property
    def service_account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:infergate-operator"

    def pods(self) -> list[dict[str, Any]]:
        """Operator pods, terminating ones included."""
        listed: list[dict[str, Any]] = self.cluster.get_json(
            "pods", "-n", self.namespace, "-l", "app.kubernetes.io/name=infergate-operator"
        )["items"]
        return listed

    def pod(self) -> dict[str, Any] | None:
        live = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None

    def wait_ready(self, timeout: float = 120) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            pod = self.pod()
            conditions = ((pod or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
            return None

        return wait_for(ready, timeout, "the operator pod to be Ready")

    def restart(self) -> None:
        """Delete the operator pod and wait for its replacement."""
        pod = self.pod()
        assert pod is not None
        self.cluster.kubectl(
            "delete", "pod", "-n", self.namespace, pod["metadata"]["name"], "--wait=true"
        )
        self.wait_ready()

    def scale(self, replicas: int) -> None:
        self.cluster.kubectl(
            "scale", "deployment/infergate-operator", "-n", self.namespace,
            f"--replicas={replicas}",
        )  # fmt: skip
        if replicas:
            self.wait_ready()
        else:
            # Gone, not just terminating: a stopping process still acts until it exits.
            wait_for(lambda: not self.pods(), 90, "the operator pod to be gone")

    def log(self) -> str:
        pod = self.pod()
        if pod is None:
            return ""
        return self.cluster.pod_log(self.namespace, pod["metadata"]["name"], "operator")

    def leader(self, timeout: float = 60) -> dict[str, Any]:
        """The replica holding the leader Lease (the one that acts), once there is one."""
        return wait_for(
            lambda: leader_pod(self.cluster, self.namespace),
            timeout,
            "a replica holding the leader Lease",
        )

    def metrics(self) -> str:
        """The acting replica's /metrics, fetched from its (loopback) pod IP."""
        import httpx

        self.wait_ready()
        pod = self.leader()
        response = httpx.get(f"http://{pod['status']['podIP']}:9090/metrics", timeout=10)
        response.raise_for_status()
        return response.text


def _documents(cluster: Cluster) -> list[dict[str, Any]]:
    documents = []
    for directory in INSTALL_DIRS:
        built = cluster.kubectl("kustomize", str(directory)).stdout
        documents += [d for d in yaml.safe_load_all(built) if d]
    return documents


def session_manifests(
    documents: list[dict[str, Any]], session: str, pattern: str, extra_args: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The operator's manifests for one test session, watching the namespaces of `pattern`.

    Besides the names and `extra_args`, nothing changes: the rules of the ClusterRole are applied exactly as
    written, both controllers run, and the resync is the default safety net (300 s), so
    every test shows the operator acting on changes and on scheduled deadlines, not on a
    poll.
    """
    return install_for_session(
        documents,
        namespace=f"infergate-it-{session}",
        cluster_role=lambda name: f"{name}-it-{session}",
        operator_args=[
            f"--namespace={pattern}",
            *extra_args,
        ],
    )


# One install per set of extra operator arguments, shared by the session's modules.
_INSTALLS: dict[tuple[str, ...], OperatorInstall] = {}
# The operator keeps golden records in a claim of the runner namespace, its own (never
# created here: the runner Jobs it starts stay unscheduled, and the tests write the verdicts).
GOLDEN_ARGS = ('--golden-config={"store": {"pvc": {"claimName": "golden-records"}}}',)


def install_operator(
    request: pytest.FixtureRequest, cluster: Cluster, extra_args: tuple[str, ...] = ()
) -> OperatorInstall:
    """This session's operator started with `extra_args` (installed on first use, removed
    when the session ends); each set of arguments watches namespaces of its own."""
    if extra_args in _INSTALLS:
        return _INSTALLS[extra_args]
    apply_crds(cluster)
    session = uuid.uuid4().hex[:6]
    documents = session_manifests(_documents(cluster), session, f"idep-{session}-*", extra_args)
    install = OperatorInstall(
        cluster=cluster,
        session=session,
        namespace=f"infergate-it-{session}",
        cluster_roles=tuple(d["metadata"]["name"] for d in documents if d["kind"] == "ClusterRole"),
    )

    def uninstall() -> None:
        _INSTALLS.pop(extra_args, None)
        cluster.kubectl("delete", "namespace", install.namespace, "--wait=false", check=False)
        for kind in ("clusterrolebinding", "clusterrole"):
            for name in install.cluster_roles:
                cluster.kubectl("delete", kind, name, check=False)

    # Removed while the cluster is still up (tests/conftest.py::session_cleanups).
    request.getfixturevalue("session_cleanups").append(uninstall)
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in documents))
    install.wait_ready(timeout=180)
    _INSTALLS[extra_args] = install
    return install


@pytest.fixture(scope="module")
def operator(request: pytest.FixtureRequest, cluster: Cluster) -> OperatorInstall:
    """The operator of this test session, running and Ready."""
    install = install_operator(request, cluster)
    install.wait_ready()
    return install


@pytest.fixture
def idep_namespace(
    operator: OperatorInstall, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace the session's operator watches."""
    yield from watched_namespace(operator, cluster, request)


@pytest.fixture(scope="module")
def golden_operator(request: pytest.FixtureRequest, cluster: Cluster) -> OperatorInstall:
    """An operator of this session that keeps golden records (--golden-config)."""
    install = install_operator(request, cluster, GOLDEN_ARGS)
    install.wait_ready()
    return install


@pytest.fixture
def golden_namespace(
    golden_operator: OperatorInstall, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace the golden-record operator watches."""
    yield from watched_namespace(golden_operator, cluster, request)


def watched_namespace(
    install: OperatorInstall, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace `install` watches, for one test, released after it."""
    name = namespace_for(request.node.name, f"idep-{install.session}", 30)
    cluster.kubectl("create", "namespace", name)
    yield name
    release_namespace(cluster, name)


# -- InferenceDeployments ------------------------------------------------------------------


def deployment_manifest(
    name: str = "qwen",
    *,
    dtype: str = "bfloat16",
    replicas: int = 2,
    parity: bool = True,
    auto_promote: bool = True,
    auto_rollback: bool = True,
    deadline: int = 600,
    accelerator_count: int = 1,
    history: int = 3,
    scale_down_delay: int = SCALE_DOWN_DELAY,
) -> dict[str, Any]:
    """A vLLM InferenceDeployment whose pods land on simulated GPU nodes."""
    rollout: dict[str, Any] = {
        "canaryReplicas": 1,
        "autoPromote": auto_promote,
        "autoRollback": auto_rollback,
        "progressDeadlineSeconds": deadline,
        "scaleDownDelaySeconds": scale_down_delay,
    }
    if parity:
        rollout["parity"] = {
            "suite": {"inline": [{"id": "capital", "text": "The capital of France is"}]},
            "sampling": {"maxTokens": 16},
        }
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "tiny-qwen", "uri": "hf://infergate/tiny-qwen2"},
            "engine": {
                "kind": "vllm",
                "image": "vllm/vllm-openai:v0.32.0",
                "dtype": dtype,
                "maxModelLen": 2048,
            },
            "accelerator": {"kind": "nvidia-gpu", "count": accelerator_count},
            "replicas": replicas,
            "rollout": rollout,
            "revisionHistoryLimit": history,
            "placement": copy.deepcopy(KWOK_PLACEMENT),
        },
    }


class Idep:
    """One InferenceDeployment in a test namespace, seen the way a user sees it."""

    def __init__(self, cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.manifest = copy.deepcopy(manifest)
        self.name = manifest["metadata"]["name"]

    def apply(self, **changes: Any) -> None:
        """Apply the manifest with `engine`/`spec` changes, as `kubectl apply` would."""
        spec = self.manifest["spec"]
        for key, value in changes.items():
            if key in spec["engine"]:
                spec["engine"][key] = value
            else:
                spec[key] = value
        self.cluster.apply(self.manifest, self.namespace)

    def get(self) -> dict[str, Any]:
        result: dict[str, Any] = self.cluster.get_json("idep", self.name, "-n", self.namespace)
        return result

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.get().get("status") or {}
        return status

    def condition(self, type_: str) -> dict[str, Any]:
        for condition in self.status().get("conditions") or []:
            if condition["type"] == type_:
                return dict(condition)
        return {}

    def wait(
        self, what: str, probe: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            status = self.status()
            return status if probe(status) else None

        return wait_for(check, timeout, f"{self.namespace}/{self.name}: {what}")

    def wait_phase(self, phase: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(f"phase {phase}", lambda s: s.get("phase") == phase, timeout)

    def wait_stable(self, timeout: float = 60) -> str:
        status = self.wait(
            "a stable revision",
            lambda s: s.get("phase") == "Stable" and bool(s.get("stableRevision")),
            timeout,
        )
        return str(status["stableRevision"])

    def wait_check(self, timeout: float = 60) -> tuple[str, dict[str, Any]]:
        """The canary revision and its ParityCheck, once created."""
        status = self.wait("a canary", lambda s: bool(s.get("canaryRevision")), timeout)
        canary = str(status["canaryRevision"])
        name = f"{self.name}-{canary}"

        def check() -> dict[str, Any] | None:
            found = self.cluster.kubectl(
                "get", "pcheck", name, "-n", self.namespace, "-o", "json", check=False
            )
            return json.loads(found.stdout) if found.returncode == 0 else None

        return canary, wait_for(check, timeout, f"ParityCheck {name}")

    def verdict(
        self,
        check: str,
        phase: str,
        *,
        passed: bool | None = None,
        bound: bool = True,
        metrics: dict[str, float] | None = None,
        extra: dict[str, Any] | None = None,
        as_user: str | None = None,
    ) -> None:
        """Write a ParityCheck's status as its runner would (`write_check_status`; admin, or
        `as_user` by impersonation where admission policies admit only the operator): a
        verdict bound to the spec, generation and revisions it judged, unless `bound` is
        False (a forged one). The simulated sides never answer, so the real runner the
        controller starts only waits for them; the test's verdict ends the check first."""
        body = self.cluster.get_json("pcheck", check, "-n", self.namespace)
        spec = body["spec"]
        status: dict[str, Any] = {"phase": phase}
        if passed is not None:
            outcome = "Passed" if passed else "Failed"
            status["verdict"] = {
                "passed": passed,
                "outcome": phase if phase in ("Error", "Inconclusive") else outcome,
                "summary": f"{phase} (written by the test)",
            }
            status["metrics"] = metrics or {"tokenMatchRate": 1.0 if passed else 0.5}
        if bound:
            # A golden baseline resolves to the record's revision, as the runner writes it.
            golden = spec["baseline"].get("golden") or {}
            status["baselineRevision"] = spec["baseline"].get("revision") or golden.get("revision")
            status["candidateRevision"] = spec["candidate"].get("revision")
            if passed is not None:
                status["verdict"] |= {
                    "specDigest": spec_digest(spec),
                    "generation": body["metadata"]["generation"],
                }
        self.write_check_status(check, status | (extra or {}), as_user=as_user)

    def write_check_status(
        self, check: str, status: dict[str, Any], *, as_user: str | None = None
    ) -> None:
        """Merge `status` into the check's status, as a cluster admin or `as_user` (where
        no admission policy names who may write it; fault_support.RunnerIdep writes as the
        runner)."""
        impersonate = [f"--as={as_user}"] if as_user else []
        self.cluster.kubectl(
            "patch", "pcheck", check, "-n", self.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}), *impersonate,
        )  # fmt: skip

    def revisions(self) -> dict[str, int]:
        """Revision -> spec.replicas of the Deployments this deployment owns."""
        listed = self.cluster.get_json(
            "deployments", "-n", self.namespace, "-l", f"infergate.io/deployment={self.name}"
        )["items"]
        return {
            d["metadata"]["labels"]["infergate.io/revision"]: d["spec"]["replicas"] for d in listed
        }

    def events(self) -> list[dict[str, Any]]:
        listed = self.cluster.get_json(
            "events", "-n", self.namespace,
            "--field-selector", f"involvedObject.kind=InferenceDeployment,involvedObject.name={self.name}",
        )["items"]  # fmt: skip
        return list(listed)

    def wait_event(self, reason: str, timeout: float = 30) -> dict[str, Any]:
        return wait_for(
            lambda: next((e for e in self.events() if e["reason"] == reason), None),
            timeout,
            f"an Event {reason} on {self.name}",
        )

    def table(self, *extra: str) -> dict[str, str]:
        """`kubectl get idep NAME` as a user reads it: column -> value."""
        out = self.cluster.kubectl("get", "idep", self.name, "-n", self.namespace, *extra).stdout
        header, row = out.splitlines()[:2]
        starts = [
            i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")
        ]
        bounds = [*starts[1:], None]
        return {
            header[s:e].strip(): row[s:e].strip() if e else row[s:].strip()
            for s, e in zip(starts, bounds, strict=True)
        }


def infergate_cli(
    cluster: Cluster, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The `infergate` command as a user runs it, with the admin kubeconfig."""
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "infergate"), *args, f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )


def settle(seconds: float = 3 * RESYNC_SECONDS) -> None:
    """Give the operator a few resync periods (for asserting that nothing happens)."""
    time.sleep(seconds)


__all__ = [
    "KWOK_PLACEMENT",
    "SCALE_DOWN_DELAY",
    "Idep",
    "OperatorInstall",
    "deployment_manifest",
    "golden_namespace",
    "golden_operator",
    "idep_namespace",
    "infergate_cli",
    "operator",
    "settle",
]
