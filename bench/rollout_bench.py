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

    .venv/bin/infergate-dev localcluster up
    .venv/bin/python bench/rollout_bench.py --deployments 50
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import (
    DTYPES,
    REPO,
    Kubectl,
    Timings,
    Watch,
    by_generation,
    by_name,
    canary_name,
    idep_manifest,
)

from infergate.kube.client import DEPLOYMENTS, INFERENCE_DEPLOYMENTS, KubeClient
from infergate_dev.localcluster.layout import ClusterLayout


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


def _all_stable(bench: Kubectl, operator: subprocess.Popen[str], count: int) -> float:
    started = time.monotonic()
    while bench.stable_count() < count:
        if operator.poll() is not None:
            stderr = operator.stderr.read() if operator.stderr else ""
            raise RuntimeError(f"operator exited: {stderr[-4000:]}")
        if time.monotonic() - started > 600:
            raise TimeoutError("deployments did not all become stable in 600s")
        time.sleep(1)
    return time.monotonic() - started


def _rounds(
    bench: Kubectl,
    deployments: Watch,
    changes: Watch,
    manifests: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Sequential changes, then one burst; from apply to the canary Deployment."""
    sequential = Timings()
    for name, manifest in manifests.items():
        changed = copy.deepcopy(manifest)
        changed["spec"]["engine"]["dtype"] = DTYPES[1]
        canary = canary_name(changed)
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
    canaries = {name: canary_name(m) for name, m in burst_changes.items()}
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
    bench = Kubectl(layout, namespace)
    crds = sorted((REPO / "crds").glob("infergate.io_*.yaml"))
    bench.run("apply", *(f"--filename={path}" for path in crds))
    bench.run("create", "namespace", namespace)
    operator = _start_operator(layout, namespace, args.resync_seconds)
    client = KubeClient.from_environment(str(layout.kubeconfig))
    deployments = Watch(client, DEPLOYMENTS, namespace, by_name)
    changes = Watch(client, INFERENCE_DEPLOYMENTS, namespace, by_generation)
    deployments.start()
    changes.start()
    try:
        manifests = {
            name: idep_manifest(name, DTYPES[0])
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
