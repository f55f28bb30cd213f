"""Helpers for tests that use the local cluster."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Self, TypeVar

from infergate_dev.localcluster.layout import ClusterLayout, cache_dir
from infergate_dev.localcluster.rest import RestClient

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# Kinds whose finalizers a test teardown strips, so namespace deletion never hangs.
FINALIZED_KINDS = ("inferencedeployments.infergate.io", "paritychecks.infergate.io")


@dataclass
class Cluster:
    layout: ClusterLayout

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def kubectl_path(self) -> Path:
        return self.layout.bin / "kubectl"

    def kubectl(
        self,
        *args: str,
        input: str | None = None,  # noqa: A002 - the name subprocess.run uses
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        if input is not None and input.lstrip().startswith("{"):
            # JSON documents one after the other: kubectl 1.31 (the matrix) reads a stream that
            # starts as JSON only without YAML's `---` separators (json.dumps never writes a
            # raw newline inside a value, so these are only ever separators).
            input = input.replace("\n---\n", "\n")  # noqa: A001 - subprocess.run's name
        result = subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", input=text)

    def rest(self) -> RestClient:
        return RestClient(self.kubeconfig)

    def server_minor(self) -> tuple[int, int]:
        """(major, minor) the API server reports (`kubectl version`), as an install that
        selects by version reads it."""
        version = json.loads(self.kubectl("version", "-o", "json").stdout)["serverVersion"]
        return int(version["major"]), int(version["minor"].rstrip("+"))

    def serves_mutating_admission_policy(self) -> bool:
        """admissionregistration.k8s.io/v1 MutatingAdmissionPolicy is served from 1.36."""
        return self.server_minor() >= (1, 36)

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        path = self.layout.logs / "pods" / f"{namespace}_{pod}_{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def stop_process_group(
    process: subprocess.Popen[bytes] | None, log: IO[bytes] | None, *, grace: float
) -> None:
    """Stop a server a test started in its own session (SIGTERM, then SIGKILL after
    `grace` seconds) and close its log."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    if log is not None:
        log.close()


class ServerProcess:
    """A server a test starts as a process of its own session, used as a context manager:
    `start()` sets `_process` and `_log`; leaving the block stops it (`stop_process_group`)."""

    _process: subprocess.Popen[bytes] | None
    _log: IO[bytes] | None
    stop_grace: ClassVar[float] = 10.0

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        stop_process_group(self._process, self._log, grace=self.stop_grace)
        self._process, self._log = None, None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll until `probe` returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


# -- test namespaces and session installs of the operator ------------------------------------

CRD_FILES = sorted((REPO / "crds").glob("infergate.io_*.yaml"))


def apply_crds(cluster: Cluster) -> None:
    """Install (or update) the CRDs and wait until the API server serves them."""
    cluster.kubectl("apply", *(f"--filename={path}" for path in CRD_FILES))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/inferencedeployments.infergate.io", "crd/paritychecks.infergate.io",
    )  # fmt: skip


def namespace_for(test_name: str, prefix: str, limit: int) -> str:
    """A fresh namespace name: `prefix`, up to `limit` characters of the test's name, a nonce."""
    base = test_name.lower().replace("_", "-").removeprefix("test-")
    short = "".join(ch for ch in base if ch.isalnum() or ch == "-")[:limit].strip("-")
    return f"{prefix}-{short}-{uuid.uuid4().hex[:4]}"


def release_namespace(cluster: Cluster, namespace: str) -> None:
    """Delete a test namespace without leaving it Terminating.

    Its InferenceDeployments and ParityChecks go first, with any finalizer stripped: the
    operator that would clear one may be gone by teardown.
    """
    for kind in FINALIZED_KINDS:
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false", check=False)
        listed = cluster.kubectl("get", kind, "-n", namespace, "-o", "name", check=False)
        for ref in listed.stdout.split() if listed.returncode == 0 else []:
            cluster.kubectl(
                "patch", ref, "-n", namespace, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False,
            )  # fmt: skip
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    # The executor does not always confirm the deletion of a pod that had already
    # succeeded (a finished runner), which leaves the namespace Terminating.
    cluster.kubectl(
        "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False
    )


def install_for_session(
    documents: list[dict[str, Any]],
    *,
    namespace: str,
    cluster_role: Callable[[str], str],
    operator_args: list[str],
) -> list[dict[str, Any]]:
    """The operator's install renamed for one test session, so sessions never collide.

    Only names change: namespaced objects move to `namespace`, ClusterRoles and their
    bindings take `cluster_role(original name)`, and the operator's container gains
    `operator_args` (its `--namespace` pattern, say). Rules and CRDs stay exactly as built.
    """
    renamed = []
    for original in documents:
        doc = copy.deepcopy(original)
        kind, metadata = doc["kind"], doc["metadata"]
        if kind == "Namespace":
            metadata["name"] = namespace
        elif kind in ("ClusterRole", "ClusterRoleBinding"):
            metadata["name"] = cluster_role(metadata["name"])
        elif kind != "CustomResourceDefinition":
            metadata["namespace"] = namespace
        if kind == "ClusterRoleBinding":
            doc["roleRef"]["name"] = cluster_role(doc["roleRef"]["name"])
        if kind in ("ClusterRoleBinding", "RoleBinding"):
            for subject in doc["subjects"]:
                subject["namespace"] = namespace
        if kind == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["args"] = [*container["args"], *operator_args]
        renamed.append(doc)
    return renamed


def leader_pod(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    """The operator replica holding the leader Lease of the install in `namespace` (the
    one that acts and counts), or None while no replica holds it."""
    found = cluster.kubectl(
        "get", "lease", "infergate-operator", "-n", namespace, "-o", "json", check=False
    )
    if found.returncode != 0:
        return None
    holder = str(json.loads(found.stdout)["spec"].get("holderIdentity") or "")
    name = holder.rsplit("_", 1)[0]  # <pod name>_<process>
    pods = cluster.get_json(
        "pods", "-n", namespace, "-l", "app.kubernetes.io/name=infergate-operator"
    )["items"]
    return next((p for p in pods if p["metadata"]["name"] == name), None)


# -- a golden-record claim in a runner namespace ---------------------------------------------

GOLDEN_CLAIM = "golden-records"


def golden_store_dir(namespace: str) -> Path:
    """Where the local executor keeps the golden claim of `namespace`: the store's root
    directory. Runner Jobs mount the claim in the runner namespace (the operator's), so
    that is the `namespace` of a store the runners use.

    The executor mounts a claim from `pvc/<namespace>/<claim>` under the cache when that
    directory exists, else from `pvc/<claim>`, shared by every namespace; `golden_claim`
    makes it, so each install's records stay its own.
    """
    return cache_dir() / "pvc" / namespace / GOLDEN_CLAIM


@contextmanager
def golden_claim(cluster: Cluster, namespace: str) -> Iterator[Path]:
    """The claim an operator's `--golden-config` names, bound in `namespace` (which exists;
    the runner namespace, where runner Jobs mount it) to a volume of its own; the volume
    and the directory go afterwards."""
    store = golden_store_dir(namespace)
    store.mkdir(parents=True)
    volume = f"{namespace}-{GOLDEN_CLAIM}"
    try:
        cluster.apply(_golden_volume(volume, store, namespace))
        cluster.apply(_golden_claim(volume), namespace)
        wait_for(
            lambda: (
                cluster.get_json("pvc", GOLDEN_CLAIM, "-n", namespace)["status"].get("phase")
                == "Bound"
            ),
            60,
            f"claim {namespace}/{GOLDEN_CLAIM} to be bound",
        )
        yield store
    finally:
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)
        shutil.rmtree(store.parent, ignore_errors=True)


def _golden_volume(name: str, path: Path, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {"namespace": namespace, "name": GOLDEN_CLAIM},
        },
    }


def _golden_claim(volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": GOLDEN_CLAIM},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
