"""Scrape targets of the local Prometheus, written from the cluster's pods (file_sd).

Debian's Prometheus is built without Kubernetes discovery, so this small process
does its part: every few seconds it lists the pods through the API server and
writes, for each job, a file_sd JSON file of the pods that run for real on the
executor's nodes (loopback pod IPs), are Running and carry
`prometheus.io/scrape: "true"`; address and path come from the pods'
`prometheus.io/port` and `prometheus.io/path` annotations, as a real cluster's
annotation-based scrape config does. Prometheus re-reads the files on change.

    python -m infergate_dev.localcluster.scrape_targets --kubeconfig K --out DIR [--interval S]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import httpx

from infergate.errors import KubeError
from infergate_dev.localcluster import nodes
from infergate_dev.localcluster.rest import RestClient

JSON = dict[str, Any]
OPERATOR_JOB = "infergate-operator"
ENGINES_JOB = "infergate-engines"


def _scraped(pod: JSON, executor_nodes: set[str]) -> tuple[str, str] | None:
    """(address, path) of a pod to scrape, or None."""
    metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    annotations = metadata.get("annotations") or {}
    if annotations.get("prometheus.io/scrape") != "true":
        return None
    if spec.get("nodeName") not in executor_nodes or status.get("phase") != "Running":
        return None
    ip, port = status.get("podIP"), annotations.get("prometheus.io/port")
    if not ip or not port or metadata.get("deletionTimestamp"):
        return None
    return f"{ip}:{port}", annotations.get("prometheus.io/path") or "/metrics"


def target_groups(pods: list[JSON], executor_nodes: set[str]) -> dict[str, list[JSON]]:
    """Job name -> file_sd target groups, one group per pod."""
    jobs: dict[str, list[JSON]] = {OPERATOR_JOB: [], ENGINES_JOB: []}
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        found = _scraped(pod, executor_nodes)
        if found is None:
            continue
        address, path = found
        metadata = pod["metadata"]
        labels = metadata.get("labels") or {}
        group: JSON = {"targets": [address], "labels": {"__metrics_path__": path}}
        if labels.get("app.kubernetes.io/name") == "infergate-operator":
            # The operator's metrics carry the deployments' own namespace/name labels.
            group["labels"] |= {"pod": metadata["name"], "pod_namespace": metadata["namespace"]}
            jobs[OPERATOR_JOB].append(group)
        elif labels.get("infergate.io/revision"):
            group["labels"] |= {
                "pod": metadata["name"],
                "namespace": metadata["namespace"],
                "name": labels.get("infergate.io/deployment", ""),
                "revision": labels["infergate.io/revision"],
            }
            jobs[ENGINES_JOB].append(group)
    return jobs


def write_targets(directory: Path, jobs: dict[str, list[JSON]]) -> None:
    """One file per job, replaced atomically and only when it changes."""
    directory.mkdir(parents=True, exist_ok=True)
    for job, groups in jobs.items():
        path = directory / f"{job}.json"
        text = json.dumps(groups, indent=1, sort_keys=True)
        if path.exists() and path.read_text() == text:
            continue
        scratch = path.with_suffix(".tmp")
        scratch.write_text(text)
        scratch.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    client = RestClient(args.kubeconfig)
    executor_nodes = {node.name for node in nodes.executor_nodes()}
    while True:
        try:
            pods = client.list("/api/v1/pods")
        except (httpx.HTTPError, KubeError) as error:
            print(f"listing pods: {error}", flush=True)
        else:
            write_targets(args.out, target_groups(pods, executor_nodes))
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
