"""What the controller benchmarks share: kubectl, watches that time first sightings,
InferenceDeployments on KWOK's simulated nodes, the installed operator (its pod, its
process, its metrics) and a counting proxy in front of the API server for its requests.

Used by bench/rollout_bench.py (the operator as a local process, 50 deployments),
bench/scale_bench.py (the installed operator at 500 deployments and 100 checks, with
kube-controller-manager as the reference) and bench/soak.py (the installed operator
under a stream of changes for half an hour).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.errors import ConflictError, KubeError, RetriableKubeError
from infergate.jsontypes import JSON
from infergate.kube.client import KubeClient, Resource
from infergate.plan.deployment.desired import revision_of
from infergate_dev.localcluster.layout import ClusterLayout
from infergate_dev.localcluster.nodes import NodeShape, node_object
from infergate_dev.localcluster.pki import Pki

REPO = Path(__file__).resolve().parents[1]
DTYPES = ("bfloat16", "float16", "float32")
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
# Puts pods on KWOK's simulated nodes, where they become Ready at once and nothing runs.
KWOK_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
}
GPUS_PER_NODE = 8  # what infergate_dev.localcluster.nodes gives a simulated GPU node
OPERATOR_NAMESPACE = "infergate-system"
OPERATOR_LABEL = "app.kubernetes.io/name=infergate-operator"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# -- objects --------------------------------------------------------------------------------


def idep_manifest(
    name: str,
    dtype: str,
    *,
    replicas: int = 0,
    seed: int | None = None,
    progress_deadline_seconds: int | None = None,
    revision_history_limit: int | None = None,
) -> dict[str, Any]:
    """A vLLM InferenceDeployment on the simulated GPU nodes (one GPU per pod)."""
    engine: dict[str, Any] = {
        "kind": "vllm",
        "image": "vllm/vllm-openai:v0.32.0",
        "dtype": dtype,
        "maxModelLen": 2048,
    }
    if seed is not None:
        engine["seed"] = seed
    rollout: dict[str, Any] = {
        "canaryReplicas": 1,
        "parity": {"suite": {"inline": [{"id": "p", "text": "The capital of France is"}]}},
    }
    if progress_deadline_seconds is not None:
        rollout["progressDeadlineSeconds"] = progress_deadline_seconds
    spec: dict[str, Any] = {
        "model": {"name": "tiny-qwen", "uri": "hf://infergate/tiny-qwen2"},
        "engine": engine,
        "accelerator": {"kind": "nvidia-gpu", "count": 1},
        "replicas": replicas,
        "rollout": rollout,
        "placement": copy.deepcopy(KWOK_PLACEMENT),
    }
    if revision_history_limit is not None:
        spec["revisionHistoryLimit"] = revision_history_limit
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


def canary_name(manifest: dict[str, Any]) -> str:
    """The Deployment the operator makes for the manifest's revision."""
    spec = InferenceDeploymentSpec.model_validate(manifest["spec"])
    return f"{manifest['metadata']['name']}-{revision_of(spec)}"


def simulated_gpu_nodes(count: int, prefix: str) -> list[dict[str, Any]]:
    """`count` more simulated GPU nodes, shaped as the local cluster's own."""
    return [
        node_object(NodeShape(f"{prefix}-{i:02d}", "nvidia-gpu", simulated=True))
        for i in range(count)
    ]


def nodes_for(pods: int) -> int:
    return math.ceil(pods / GPUS_PER_NODE)


# -- kubectl and watches ----------------------------------------------------------------------


class Kubectl:
    """The cluster's kubectl, with this cluster's kubeconfig, in one namespace."""

    def __init__(self, layout: ClusterLayout, namespace: str) -> None:
        self.layout = layout
        self.namespace = namespace
        self.kubectl = str(layout.bin / "kubectl")

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [self.kubectl, f"--kubeconfig={self.layout.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def apply(self, manifests: list[dict[str, Any]], *, namespaced: bool = True) -> None:
        text = "\n---\n".join(json.dumps(m) for m in manifests)
        where = ["-n", self.namespace] if namespaced else []
        self.run("apply", *where, "-f", "-", stdin=text)

    def stable_count(self) -> int:
        listed = json.loads(self.run("get", "idep", "-n", self.namespace, "-o", "json"))["items"]
        return sum(1 for i in listed if (i.get("status") or {}).get("phase") == "Stable")


_ATTEMPTS = 6


def _retrying(call: Callable[[], object], *, done_on_conflict: bool = False) -> None:
    """`call`, again after a retriable failure (a busy API server times out), with backoff.
    `done_on_conflict`: a create that answers 409 was done by an attempt that timed out."""
    for attempt in range(_ATTEMPTS):
        try:
            call()
        except ConflictError:
            if done_on_conflict:
                return
            if attempt == _ATTEMPTS - 1:
                raise
        except RetriableKubeError as error:
            if attempt == _ATTEMPTS - 1:
                raise
            sys.stderr.write(f"retrying: {error}\n")
        else:
            return
        time.sleep(2.0**attempt)


def patch_all(
    client: KubeClient,
    resource: Resource,
    namespace: str,
    patches: dict[str, JSON],
    *,
    workers: int = 16,
) -> dict[str, float]:
    """Merge-patch every named object at once (`workers` requests in flight): a burst. When
    each PATCH was answered (time.monotonic()), by name."""

    def patch(name: str, body: JSON) -> float:
        _retrying(functools.partial(client.merge_patch, resource, namespace, name, body))
        return time.monotonic()

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="burst") as pool:
        done = {name: pool.submit(patch, name, body) for name, body in patches.items()}
        return {name: future.result() for name, future in done.items()}


def create_all(
    client: KubeClient,
    resource: Resource,
    namespace: str,
    manifests: list[dict[str, Any]],
    *,
    workers: int = 8,
) -> None:
    """Create every object, `workers` at a time, as `kubectl apply` would have (with its
    last-applied annotation, so later `kubectl apply`s merge as usual): hundreds of
    objects in seconds where one `kubectl apply` takes minutes on a busy machine."""

    def body(manifest: dict[str, Any]) -> JSON:
        created = copy.deepcopy(manifest)
        metadata = created["metadata"]
        metadata["namespace"] = namespace
        metadata.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
            {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}},
            separators=(",", ":"),
        )
        return created

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create") as pool:
        done = [
            pool.submit(
                _retrying,
                functools.partial(client.create, resource, namespace, body(m)),
                done_on_conflict=True,
            )
            for m in manifests
        ]
        for future in done:
            future.result()


class Watch(threading.Thread):
    """Records when each object of one kind in the namespace is first seen under a key
    (a Deployment by name; an InferenceDeployment by name and generation), and, given
    `latest`, the latest summary of each object by name."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str,
        key: Callable[[JSON], str],
        *,
        latest: Callable[[JSON], Any] | None = None,
        timeout_seconds: int = 60,
    ) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.key = key
        self.summary = latest
        self.timeout_seconds = timeout_seconds
        self.seen: dict[str, float] = {}
        self.latest: dict[str, Any] = {}
        self.changed = threading.Condition()
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            try:
                events = self.client.watch(
                    self.resource, self.namespace, timeout_seconds=self.timeout_seconds
                )
                for event in events:
                    obj = event.get("object") or {}
                    key = self.key(obj)
                    with self.changed:
                        if self.summary is not None:
                            if event.get("type") == "DELETED":
                                self.latest.pop(by_name(obj), None)
                            else:
                                self.latest[by_name(obj)] = self.summary(obj)
                        if key not in self.seen:
                            self.seen[key] = time.monotonic()
                        self.changed.notify_all()
            except KubeError as error:
                sys.stderr.write(f"watch restarted: {error}\n")
                time.sleep(0.2)

    def wait_for(self, keys: set[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not keys <= set(self.seen):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(keys - set(self.seen))
                    raise TimeoutError(f"{len(missing)} never seen: {missing[:5]}")
                self.changed.wait(left)
            return {key: self.seen[key] for key in keys}

    def wait_until(self, what: str, test: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        """Until `test(latest)` holds (needs `latest`)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not test(self.latest):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: not within {timeout:.0f}s")
                self.changed.wait(min(left, 1.0))

    def seen_by(self, keys: set[str], timeout: float) -> dict[str, float]:
        """The keys seen within `timeout` (all of them, or as many as came)."""
        try:
            return self.wait_for(keys, timeout)
        except TimeoutError:
            with self.changed:
                return {key: self.seen[key] for key in keys if key in self.seen}

    def snapshot(self) -> dict[str, Any]:
        with self.changed:
            return dict(self.latest)


def by_name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def by_generation(obj: JSON) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('name')}@{metadata.get('generation')}"


# -- figures --------------------------------------------------------------------------------


def stats(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"count": 0}
    values = np.array(latencies)
    return {
        "count": len(latencies),
        "median_s": round(float(np.median(values)), 4),
        "p99_s": round(float(np.percentile(values, 99)), 4),
        "max_s": round(float(values.max()), 4),
    }


@dataclass
class Timings:
    """Seconds from `kubectl apply` (and from the change reaching a watch) to the result."""

    from_apply: list[float] = field(default_factory=list)
    from_watch: list[float] = field(default_factory=list)
    from_return: list[float] = field(default_factory=list)

    def add(
        self, t_apply: float, t_change: float, t_result: float, t_return: float | None = None
    ) -> None:
        """`t_return`, when given: the moment `kubectl apply` returned (one object applied)."""
        self.from_apply.append(t_result - t_apply)
        self.from_watch.append(t_result - t_change)
        if t_return is not None:
            self.from_return.append(t_result - t_return)

    def stats(self) -> dict[str, dict[str, float]]:
        figures = {
            "from_kubectl_apply": stats(self.from_apply),
            "from_change_seen_by_a_watch": stats(self.from_watch),
        }
        if self.from_return:
            figures["from_kubectl_apply_return"] = stats(self.from_return)
        return figures


# -- the installed operator -------------------------------------------------------------------


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def histogram_totals(text: str, name: str, *labels: str) -> dict[str, list[float]]:
    """[sum, count] of the histogram `name` per value of `labels` (joined with a space)."""
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (f"{name}_sum", f"{name}_count"):
                continue
            key = " ".join(sample.labels.get(k, "") for k in labels)
            slot = totals.setdefault(key, [0.0, 0.0])
            slot[0 if sample.name.endswith("_sum") else 1] += sample.value
    return totals


def histogram_means(
    before: dict[str, list[float]] | None, after: dict[str, list[float]] | None
) -> dict[str, dict[str, float]]:
    """Per key: how many observations between two `histogram_totals`, their mean and sum."""
    if before is None or after is None:
        return {}
    means = {}
    for key, (total, count) in sorted(after.items()):
        earlier_total, earlier_count = before.get(key, [0.0, 0.0])
        n = count - earlier_count
        if n > 0:
            spent = total - earlier_total
            means[key] = {"count": int(n), "mean_s": round(spent / n, 4), "sum_s": round(spent, 1)}
    return means


@dataclass(frozen=True)
class ProcessSample:
    at: float  # time.monotonic()
    rss_bytes: int
    cpu_seconds: float


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def pids_with_env(variable: str, value: str) -> list[int]:
    """Processes whose environment sets `variable=value` (a pod's HOSTNAME: its containers)."""
    wanted = f"{variable}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def sample_processes(pids: Iterable[int]) -> ProcessSample | None:
    """Resident memory and CPU seconds (user + system) of these processes together."""
    rss = 0
    cpu = 0.0
    alive = False
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            statm = Path(f"/proc/{pid}/statm").read_text().split()
        except OSError:
            continue
        alive = True
        # Fields after the command: state is [0], utime [11], stime [12] (proc(5) 14, 15).
        cpu += (int(fields[11]) + int(fields[12])) / _TICKS
        rss += int(statm[1]) * _PAGE
    return ProcessSample(time.monotonic(), rss, cpu) if alive else None


class Sampler(threading.Thread):
    """Samples the operator's RSS and CPU seconds every `interval` seconds."""

    def __init__(self, find: Callable[[], list[int]], interval: float) -> None:
        super().__init__(daemon=True)
        self.find = find
        self.interval = interval
        self.samples: list[ProcessSample] = []
        self.lost = 0  # samples where no process was found (a restart)
        self.stopped = threading.Event()
        self.pids = find()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.once()
            self.stopped.wait(self.interval)

    def once(self) -> ProcessSample | None:
        sample = sample_processes(self.pids)
        if sample is None:
            self.lost += 1
            self.pids = self.find()
            sample = sample_processes(self.pids)
        if sample is not None:
            self.samples.append(sample)
        return sample

    def between(self, start: float, end: float) -> list[ProcessSample]:
        return [s for s in self.samples if start <= s.at <= end]


def host_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # user .. steal; guest time is already in user
    return (total - idle) / _TICKS, total / _TICKS


def host_busy_cores(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """Cores the whole machine kept busy between two `host_cpu()` readings."""
    busy, total = after[0] - before[0], after[1] - before[1]
    cpus = os.cpu_count() or 1
    return round(busy / total * cpus, 2) if total > 0 else None


def _mib(value: float) -> float:
    return round(value / 2**20, 1)


def rss_summary(samples: list[ProcessSample]) -> dict[str, float]:
    values = [s.rss_bytes for s in samples]
    if not values:
        return {}
    return {
        "samples": len(values),
        "mean_mib": _mib(float(np.mean(values))),
        "max_mib": _mib(max(values)),
        "last_mib": _mib(values[-1]),
    }


class ApiProxy:
    """bench/apiproxy.py as a subprocess, with a serving certificate from the cluster CA."""

    def __init__(self, layout: ClusterLayout, workdir: Path) -> None:
        self.layout = layout
        self.workdir = workdir
        self.process: subprocess.Popen[str] | None = None
        self.listen = ""
        self.stats_url = ""

    def _certificate(self) -> tuple[Path, Path]:
        pki = Pki(self.layout.pki)
        self.workdir.mkdir(parents=True, exist_ok=True)
        key, csr, crt = (self.workdir / f"proxy.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.workdir / "proxy.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n")

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        openssl("genrsa", "-out", str(key), "2048")
        openssl("req", "-new", "-key", str(key), "-subj", "/CN=bench-apiproxy", "-out", str(csr))
        openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey", str(pki.ca_key),
            "-CAcreateserial", "-CAserial", str(self.workdir / "ca.srl"),
            "-out", str(crt), "-days", "2", "-sha256", "-extfile", str(ext),
        )  # fmt: skip
        return crt, key

    def start(self) -> None:
        crt, key = self._certificate()
        state = json.loads((self.layout.state_file).read_text())
        upstream = f"127.0.0.1:{state['ports']['apiserver']}"
        argv = [sys.executable, str(REPO / "bench" / "apiproxy.py"), f"--upstream={upstream}"]
        argv += [f"--cert={crt}", f"--key={key}", f"--ca={Pki(self.layout.pki).ca_crt}"]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None  # noqa: S101 - set by stdout=PIPE
        started = json.loads(self.process.stdout.readline())
        self.listen, self.stats_url = started["listen"], started["stats"]

    def counts(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.stats_url, timeout=60) as response:  # noqa: S310 - loopback
            counted: dict[str, Any] = json.loads(response.read())
            return counted

    def cpu_seconds(self) -> float:
        sample = sample_processes([self.process.pid]) if self.process else None
        return round(sample.cpu_seconds, 1) if sample else 0.0

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def pod_counts(counts: dict[str, Any], pod: str) -> dict[str, Any]:
    """The proxy's counts of one pod's requests alone, in the shape of the whole."""
    by_request: dict[str, int] = dict((counts.get("by_pod") or {}).get(pod) or {})
    by_verb: Counter[str] = Counter()
    for key, value in by_request.items():
        by_verb[key.split(" ", 1)[0]] += value
    return {
        "time": counts["time"],
        "total": sum(by_request.values()),
        "by_verb": dict(by_verb),
        "by_request": by_request,
    }


def request_rate(
    before: dict[str, Any], after: dict[str, Any], *, pod: str | None = None
) -> dict[str, Any]:
    """Requests between two proxy counts: total, per second, by verb and by request; of
    one pod's requests alone when `pod` is given."""
    if pod is not None:
        before, after = pod_counts(before, pod), pod_counts(after, pod)
    seconds = after["time"] - before["time"]
    total = after["total"] - before["total"]

    def delta(key: str) -> dict[str, int]:
        keys = set(after[key]) | set(before[key])
        changed = {k: after[key].get(k, 0) - before[key].get(k, 0) for k in keys}
        return dict(sorted(((k, v) for k, v in changed.items() if v), key=lambda kv: -kv[1]))

    return {
        "seconds": round(seconds, 1),
        "requests": total,
        "per_second": round(total / seconds, 2) if seconds > 0 else None,
        "by_verb": delta("by_verb"),
        "by_request": delta("by_request"),
    }


@dataclass
class OperatorInstall:
    """The operator as `kubectl apply -k manifests/` installs it (CRDs, RBAC, its pod with
    its memory limit), watching only `namespaces`, its API requests sent through `proxy`."""

    kubectl: Kubectl
    namespaces: str
    proxy: ApiProxy | None
    documents: list[JSON] = field(default_factory=list)

    def build(self) -> list[JSON]:
        built = self.kubectl.run("kustomize", str(REPO / "manifests"))
        documents = [d for d in yaml.safe_load_all(built) if d]
        for doc in documents:
            if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "infergate-operator":
                container = doc["spec"]["template"]["spec"]["containers"][0]
                container["args"] = [*container["args"], f"--namespace={self.namespaces}"]
                if self.proxy is not None:
                    host, port = self.proxy.listen.rsplit(":", 1)
                    # The in-cluster client dials KUBERNETES_SERVICE_HOST:PORT (set by the
                    # kubelet, here the executor); the container's env overrides them.
                    container["env"] = [
                        *container.get("env", []),
                        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": port},
                    ]
        return documents

    def install(self, timeout: float = 240) -> JSON:
        self.uninstall(wait=True)
        self.documents = self.build()
        self.kubectl.apply(self.documents, namespaced=False)
        return self.wait_ready(timeout)

    def pods(self) -> list[JSON]:
        listed: list[JSON] = json.loads(
            self.kubectl.run(
                "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_LABEL, "-o", "json"
            )
        )["items"]
        return listed

    def leader(self) -> str | None:
        """The pod holding the Lease infergate-operator (the replica that acts), if any."""
        try:
            lease = json.loads(
                self.kubectl.run(
                    "get", "lease", "infergate-operator", "-n", OPERATOR_NAMESPACE, "-o", "json"
                )
            )
        except (RuntimeError, subprocess.TimeoutExpired, ValueError):
            return None
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        # The identity is `<pod name>_<random part>` (commands/operator.py).
        return holder.rsplit("_", 1)[0] or None

    def pod(self) -> JSON | None:
        """The ready replica holding the Lease (the first ready one before any holds it)."""
        ready = []
        for pod in self.pods():
            conditions = (pod.get("status") or {}).get("conditions") or []
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            if is_ready and not pod["metadata"].get("deletionTimestamp"):
                ready.append(pod)
        leader = self.leader() if ready else None
        for pod in ready:
            if pod["metadata"]["name"] == leader:
                return pod
        return ready[0] if ready else None

    def wait_ready(self, timeout: float) -> JSON:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.pod()
            if pod is not None:
                return pod
            time.sleep(1)
        raise TimeoutError(f"the operator pod was not Ready within {timeout:.0f}s")

    def wait_leader(self, timeout: float) -> str:
        """The ready pod holding the Lease, once one does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader, pod = self.leader(), self.pod()
            if leader is not None and pod is not None and pod["metadata"]["name"] == leader:
                return leader
            time.sleep(1)
        raise TimeoutError(f"no operator replica held the Lease within {timeout:.0f}s")

    def pids(self) -> list[int]:
        pod = self.pod()
        return pids_with_env("HOSTNAME", pod["metadata"]["name"]) if pod else []

    def restarts(self) -> int:
        pod = self.pod()
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return sum(int(s.get("restartCount") or 0) for s in statuses)

    def metrics(self) -> str:
        pod = self.pod()
        if pod is None:
            return ""
        url = f"http://{pod['status']['podIP']}:9090/metrics"
        with urllib.request.urlopen(url, timeout=60) as response:
            text: str = response.read().decode()
            return text

    def reconciles(self) -> float:
        """InferenceDeployment reconciles so far (every result, quiet resyncs included)."""
        return metric_sum(self.metrics(), "infergate_reconcile_duration_seconds_count")

    def uninstall(self, *, wait: bool = False) -> None:
        documents = self.documents or self.build()
        removable = [d for d in documents if d["kind"] != "CustomResourceDefinition"]
        text = "\n---\n".join(json.dumps(d) for d in removable)
        self.kubectl.run(
            "delete", "--ignore-not-found", f"--wait={str(wait).lower()}", "--timeout=120s",
            "-f", "-", stdin=text, check=False,
        )  # fmt: skip
