"""Benchmark of the rollout controller: from `kubectl apply` of a spec change to the canary
Deployment existing, with many InferenceDeployments on the simulated nodes.

Runs the real operator (`infergate operator`, restricted to one fresh namespace, the
ParityCheck controller off so no runner starts) against the local cluster, creates
`--deployments` InferenceDeployments (stable at 0 replicas, so any number fits the
simulated GPUs; pods are not part of the measured interval), waits until every one is
stable, then changes their engine dtype (a new revision) and times, for each, the
interval from just before `kubectl apply` is invoked to the moment a watch on the
namespace sees the canary's Deployment. Two rounds:

- sequential: one deployment changed at a time (the latency of one change while the
  operator serves all of them);
- burst: every deployment changed by one `kubectl apply` (the latency under a burst).

Reports median and p99 of both, in seconds, as JSON on stdout (and in `--out`): from the
start of `kubectl apply` (what was asked), and from the moment a watch sees the changed
InferenceDeployment (the operator's own share: in the burst, `kubectl apply` updates the
objects one after another, so the later ones wait for kubectl, not for the operator).

    .venv/bin/infergate localcluster up
    .venv/bin/python bench/rollout_bench.py --deployments 50
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.errors import KubeError
from infergate.jsontypes import JSON
from infergate.kube.client import DEPLOYMENTS, INFERENCE_DEPLOYMENTS, KubeClient, Resource
from infergate.localcluster.layout import ClusterLayout
from infergate.plan.desired import revision_of

REPO = Path(__file__).resolve().parents[1]
DTYPES = ("bfloat16", "float16", "float32")


def _manifest(name: str, dtype: str) -> dict[str, Any]:
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
            "accelerator": {"kind": "nvidia-gpu", "count": 1},
            "replicas": 0,
            "rollout": {
                "canaryReplicas": 1,
                "parity": {"suite": {"inline": [{"id": "p", "text": "The capital of France is"}]}},
            },
            "placement": {
                "nodeSelector": {"type": "kwok"},
                "tolerations": [
                    {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    }


def _canary_name(manifest: dict[str, Any]) -> str:
    spec = InferenceDeploymentSpec.model_validate(manifest["spec"])
    return f"{manifest['metadata']['name']}-{revision_of(spec)}"


class Watch(threading.Thread):
    """Records when each object of one kind in the namespace is first seen under a key
    (a Deployment by name; an InferenceDeployment by name and generation)."""

    def __init__(
        self, client: KubeClient, resource: Resource, namespace: str, key: Callable[[JSON], str]
    ) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.key = key
        self.seen: dict[str, float] = {}
        self.changed = threading.Condition()
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            try:
                for event in self.client.watch(self.resource, self.namespace, timeout_seconds=60):
                    key = self.key(event.get("object") or {})
                    with self.changed:
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


def _by_name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _by_generation(obj: JSON) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('name')}@{metadata.get('generation')}"


class Bench:
    def __init__(self, layout: ClusterLayout, namespace: str) -> None:
        self.layout = layout
        self.namespace = namespace
        self.kubectl = str(layout.bin / "kubectl")

    def run(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [self.kubectl, f"--kubeconfig={self.layout.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def apply(self, manifests: list[dict[str, Any]]) -> None:
        text = "\n---\n".join(json.dumps(m) for m in manifests)
        self.run("apply", "-n", self.namespace, "-f", "-", stdin=text)

    def stable_count(self) -> int:
        listed = json.loads(self.run("get", "idep", "-n", self.namespace, "-o", "json"))["items"]
        return sum(1 for i in listed if (i.get("status") or {}).get("phase") == "Stable")


def _stats(latencies: list[float]) -> dict[str, float]:
    values = np.array(latencies)
    return {
        "count": len(latencies),
        "median_s": round(float(np.median(values)), 4),
        "p99_s": round(float(np.percentile(values, 99)), 4),
        "max_s": round(float(values.max()), 4),
    }


def _start_operator(layout: ClusterLayout, namespace: str, resync: float) -> subprocess.Popen[str]:
    command = [
        str(REPO / ".venv" / "bin" / "infergate"),
        "operator",
        f"--kubeconfig={layout.kubeconfig}",
        f"--namespace={namespace}",
        f"--resync-seconds={resync}",
        "--metrics-port=0",
        "--health-port=0",
        "--disable-controller=paritycheck",
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBECONFIG": str(layout.kubeconfig)},
    )


def _all_stable(bench: Bench, operator: subprocess.Popen[str], count: int) -> float:
    started = time.monotonic()
    while bench.stable_count() < count:
        if operator.poll() is not None:
            stderr = operator.stderr.read() if operator.stderr else ""
            raise RuntimeError(f"operator exited: {stderr[-4000:]}")
        if time.monotonic() - started > 600:
            raise TimeoutError("deployments did not all become stable in 600s")
        time.sleep(1)
    return time.monotonic() - started


@dataclass
class Timings:
    """Seconds from `kubectl apply` (and from the change reaching a watch) to the canary."""

    from_apply: list[float] = field(default_factory=list)
    from_watch: list[float] = field(default_factory=list)

    def add(self, t_apply: float, t_change: float, t_canary: float) -> None:
        self.from_apply.append(t_canary - t_apply)
        self.from_watch.append(t_canary - t_change)

    def stats(self) -> dict[str, dict[str, float]]:
        return {
            "from_kubectl_apply": _stats(self.from_apply),
            "from_change_seen_by_a_watch": _stats(self.from_watch),
        }


def _rounds(
    bench: Bench,
    deployments: Watch,
    changes: Watch,
    manifests: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Sequential changes, then one burst; from apply to the canary Deployment."""
    sequential = Timings()
    for name, manifest in manifests.items():
        changed = copy.deepcopy(manifest)
        changed["spec"]["engine"]["dtype"] = DTYPES[1]
        canary = _canary_name(changed)
        t0 = time.monotonic()
        bench.apply([changed])
        appeared = deployments.wait_for({canary}, 120)[canary]
        sequential.add(t0, changes.wait_for({f"{name}@2"}, 10)[f"{name}@2"], appeared)
        manifests[name] = changed
    burst_changes = {}
    for name, manifest in manifests.items():
        changed = copy.deepcopy(manifest)
        changed["spec"]["engine"]["dtype"] = DTYPES[2]
        burst_changes[name] = changed
    canaries = {name: _canary_name(m) for name, m in burst_changes.items()}
    t0 = time.monotonic()
    bench.apply(list(burst_changes.values()))
    apply_s = time.monotonic() - t0
    seen = deployments.wait_for(set(canaries.values()), 300)
    changed_at = changes.wait_for({f"{name}@3" for name in canaries}, 60)
    burst = Timings()
    for name, canary in canaries.items():
        burst.add(t0, changed_at[f"{name}@3"], seen[canary])
    return {
        "sequential": sequential.stats(),
        "burst": {**burst.stats(), "kubectl_apply_of_all_s": round(apply_s, 2)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=50)
    parser.add_argument("--resync-seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()

    layout = ClusterLayout.default()
    namespace = f"bench-rollout-{uuid.uuid4().hex[:6]}"
    bench = Bench(layout, namespace)
    crds = sorted((REPO / "crds").glob("infergate.io_*.yaml"))
    bench.run("apply", *(f"--filename={path}" for path in crds))
    bench.run("create", "namespace", namespace)
    operator = _start_operator(layout, namespace, args.resync_seconds)
    client = KubeClient.from_environment(str(layout.kubeconfig))
    deployments = Watch(client, DEPLOYMENTS, namespace, _by_name)
    changes = Watch(client, INFERENCE_DEPLOYMENTS, namespace, _by_generation)
    deployments.start()
    changes.start()
    try:
        manifests = {
            name: _manifest(name, DTYPES[0])
            for name in (f"model-{i:03d}" for i in range(args.deployments))
        }
        bench.apply(list(manifests.values()))
        setup_s = _all_stable(bench, operator, len(manifests))
        result = {
            "deployments": args.deployments,
            "resync_seconds": args.resync_seconds,
            "setup_to_all_stable_s": round(setup_s, 2),
            "to_canary_deployment": _rounds(bench, deployments, changes, manifests),
        }
        text = json.dumps(result, indent=2)
        sys.stdout.write(text + "\n")
        if args.out:
            args.out.write_text(text + "\n", encoding="utf-8")
        return 0
    finally:
        deployments.stopped = changes.stopped = True
        operator.terminate()
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
        bench.run("delete", "namespace", namespace, "--wait=false")
        client.close()


if __name__ == "__main__":
    sys.exit(main())
