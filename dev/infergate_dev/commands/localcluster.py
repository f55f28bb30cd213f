"""`infergate-dev localcluster up|down|status|show`: the local test cluster."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from infergate_dev.localcluster import controlplane, prometheus
from infergate_dev.localcluster.executor import ownership
from infergate_dev.localcluster.executor.container import kill_recorded
from infergate_dev.localcluster.layout import (
    K8S_VERSION,
    K8S_VERSION_ENV,
    MATRIX_K8S_VERSIONS,
    ClusterLayout,
    kubernetes_version,
)

SUPPORTED_VERSIONS = (K8S_VERSION, *MATRIX_K8S_VERSIONS)


Handler = Callable[[argparse.Namespace], int]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "localcluster",
        help="the local Kubernetes cluster (real control plane, simulated accelerator nodes)",
    )
    parser.add_argument(
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default=None,
        help=(
            f"the control plane's version (default ${K8S_VERSION_ENV} or {K8S_VERSION}); "
            "another than the default keeps its cluster in .cluster-VERSION/ "
            "(K8S_VERSION=VERSION hack/build-control-plane.sh kubernetes builds it)"
        ),
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser("up", help="start the cluster (idempotent)")
    up.add_argument(
        "--with",
        dest="extras",
        action="append",
        choices=("lws",),
        default=[],
        help="also start the LeaderWorkerSet controller (multi-node revisions); "
        "INFERGATE_LOCAL_LWS=1 does the same",
    )
    up.set_defaults(handler=_with_version(_up))
    down = verbs.add_parser("down", help="stop exactly the processes `up` started")
    down.add_argument("--purge", action="store_true", help="also delete etcd data and pod dirs")
    down.set_defaults(handler=_with_version(_down))
    status = verbs.add_parser("status", help="exit 0 when the cluster is up")
    status.set_defaults(handler=_with_version(_status))
    show = verbs.add_parser("show", help="print the cluster's version and nodes")
    show.set_defaults(handler=_with_version(_show))
    monitor = verbs.add_parser(
        "prometheus",
        help="a Prometheus on loopback scraping the operator and engine pods (stopped by down)",
    )
    monitor.add_argument("action", choices=("up", "down", "url"), nargs="?", default="up")
    monitor.add_argument(
        "--interval", type=float, default=5.0, help="scrape and rule interval in seconds"
    )
    monitor.set_defaults(handler=_with_version(_prometheus))


def _with_version(handler: Handler) -> Handler:
    """Run `handler` with the chosen version in the environment, where the layout, the
    binaries and every process the cluster starts (the executor) read it."""

    def run(args: argparse.Namespace) -> int:
        if args.kubernetes_version:
            os.environ[K8S_VERSION_ENV] = args.kubernetes_version
        elif kubernetes_version() not in SUPPORTED_VERSIONS:
            print(
                f"error: ${K8S_VERSION_ENV}={kubernetes_version()} is not one of "
                f"{', '.join(SUPPORTED_VERSIONS)}",
                file=sys.stderr,
            )
            return 2
        return handler(args)

    return run


def _up(args: argparse.Namespace) -> int:
    try:
        controlplane.up(ClusterLayout.default(), with_lws="lws" in args.extras)
    except controlplane.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _down(args: argparse.Namespace) -> int:
    layout = ClusterLayout.default()
    stopped = ["prometheus"] if prometheus.down(layout) else []
    stopped += controlplane.down(layout)
    leftovers = 0
    if layout.pods.exists():
        for pod_dir in layout.pods.iterdir():
            leftovers += kill_recorded(pod_dir)
    # Then every process marked as any pod's, in one pass over the process table: those
    # outside their recorded groups (Ray's workers) and those of pods whose dir is gone
    # already (executor/ownership.py).
    leftovers += ownership.kill_owned(layout.pods)
    if args.purge:
        controlplane.down(layout, purge=True)
    print(
        f"stopped: {', '.join(stopped) or 'nothing was running'}"
        + (f"; {leftovers} leftover pod processes killed" if leftovers else ""),
        file=sys.stderr,
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    up = controlplane.is_up(ClusterLayout.default())
    print("up" if up else "down")
    return 0 if up else 1


def _show(args: argparse.Namespace) -> int:
    layout = ClusterLayout.default()
    kubectl = [str(layout.bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}"]
    commands = [
        ["version"],
        [
            "get",
            "nodes",
            "-o",
            (
                "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,"
                "GPU:.status.allocatable.nvidia\\.com/gpu,NPU:.status.allocatable.huawei\\.com/Ascend910,"
                "PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product,"
                "ACCELERATOR:.metadata.labels.accelerator,"
                "EXECUTOR:.metadata.labels.infergate\\.io/local-executor"
            ),
        ],
    ]
    for command in commands:
        print(f"$ kubectl {' '.join(command)}", flush=True)
        result = subprocess.run([*kubectl, *command], check=False)
        if result.returncode != 0:
            return result.returncode
    print(f"\nexport KUBECONFIG={layout.kubeconfig} PATH={layout.bin}:$PATH")
    return 0


def _prometheus(args: argparse.Namespace) -> int:
    layout = ClusterLayout.default()
    if args.action == "down":
        print("stopped prometheus" if prometheus.down(layout) else "prometheus was not running")
        return 0
    if args.action == "url":
        found = prometheus.url(layout)
        print(found or "prometheus is not running")
        return 0 if found else 1
    try:
        prometheus.up(layout, interval_seconds=args.interval)
    except prometheus.PrometheusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
