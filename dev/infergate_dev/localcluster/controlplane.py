"""Bring the local control plane up and down.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler (real binaries,
built from Go modules), KWOK for the simulated accelerator nodes, and the
local executor for the pods that must really run. `up` is idempotent: it
starts only what is not already running and keeps the ports it chose first.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from infergate_dev.localcluster import lws, processes
from infergate_dev.localcluster.bootstrap import BootstrapError, bootstrap
from infergate_dev.localcluster.kwokconfig import write_kwok_config
from infergate_dev.localcluster.layout import (
    KWOK_POD_CIDR,
    SERVICE_CIDR,
    ClusterLayout,
    etcd_bin,
    gateway_api_crds,
    gateway_api_version,
    kubernetes_bin,
    kubernetes_version,
    kwok_bin,
    lws_crds,
)
from infergate_dev.localcluster.pki import Pki, ensure_pki


class ClusterError(RuntimeError):
    """The local cluster could not be brought up or reached."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


# Start order; `down` stops in reverse.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "executor",
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _load_ports(layout: ClusterLayout) -> Ports:
    if layout.state_file.exists():
        data = json.loads(layout.state_file.read_text())
        return Ports(**data["ports"])
    ports = Ports(etcd_client=_free_port(), etcd_peer=_free_port(), apiserver=_free_port())
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.state_file.write_text(json.dumps({"ports": ports.__dict__}, indent=2))
    return ports


def _write_kubeconfig(path: Path, pki: Pki, server: str, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "infergate-local",
                "cluster": {"server": server, "certificate-authority": str(pki.ca_crt)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki.cert(user)),
                    "client-key": str(pki.key(user)),
                },
            }
        ],
        "contexts": [
            {"name": "infergate-local", "context": {"cluster": "infergate-local", "user": user}}
        ],
        "current-context": "infergate-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _require_binaries() -> None:
    needed = [
        etcd_bin() / "etcd",
        kwok_bin() / "kwok",
        *(
            kubernetes_bin() / b
            for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ),
    ]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        version = kubernetes_version()
        build = (
            f"K8S_VERSION={version} hack/build-control-plane.sh kubernetes"
            if any(str(kubernetes_bin()) in m for m in missing)
            else "hack/build-control-plane.sh or make setup"
        )
        raise ClusterError(
            f"control-plane binaries of Kubernetes {version} missing (run {build}): "
            + ", ".join(missing)
        )


def _argv(layout: ClusterLayout, pki: Pki, ports: Ports, name: str) -> list[str]:
    kube = kubernetes_bin()
    etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
    server = f"https://127.0.0.1:{ports.apiserver}"
    if name == "etcd":
        return [
            str(etcd_bin() / "etcd"),
            "--name=infergate-local",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
            f"--initial-cluster=infergate-local=http://127.0.0.1:{ports.etcd_peer}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=2147483648",
        ]
    if name == "kube-apiserver":
        return [
            str(kube / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca_crt}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={server}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--api-audiences={server}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]
    if name == "kube-controller-manager":
        return [
            str(kube / "kube-controller-manager"),
            f"--kubeconfig={layout.root / 'controller-manager.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_crt}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Pods of a node that stops heartbeating are evicted soon, not after 5 min.
            "--node-monitor-grace-period=40s",
            "--concurrent-deployment-syncs=10",
            "--concurrent-replicaset-syncs=10",
            "--concurrent-job-syncs=10",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
        ]
    if name == "kube-scheduler":
        return [
            str(kube / "kube-scheduler"),
            f"--kubeconfig={layout.root / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={layout.root / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={layout.root / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
        ]
    if name == "kwok":
        return [
            str(kwok_bin() / "kwok"),
            f"--kubeconfig={layout.root / 'nodes.kubeconfig'}",
            f"--config={layout.root / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={KWOK_POD_CIDR}",
            "--node-ip=127.0.0.1",
            "--server-address=127.0.0.1:0",
        ]
    if name == "executor":
        return [
            sys.executable,
            "-m",
            "infergate_dev.localcluster.executor",
            f"--kubeconfig={layout.root / 'nodes.kubeconfig'}",
            f"--cluster-dir={layout.root}",
        ]
    raise ValueError(f"unknown component {name!r}; known: {', '.join(COMPONENTS)}")


def _ssl_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))
    return ctx


def apiserver_ready(pki: Pki, ports: Ports) -> bool:
    url = f"https://127.0.0.1:{ports.apiserver}/readyz"
    try:
        with urllib.request.urlopen(url, context=_ssl_context(pki), timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _wait(what: str, check: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise ClusterError(f"{what} not ready after {timeout:.0f}s; end of {log}:\n{tail}")


def _etcd_healthy(ports: Ports) -> bool:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2
        ) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _start(layout: ClusterLayout, pki: Pki, ports: Ports, name: str) -> None:
    """Start one component; for etcd and the API server, wait until they serve."""
    argv = _argv(layout, pki, ports, name)
    env = {"KUBECONFIG": str(layout.root / "nodes.kubeconfig")} if name == "executor" else {}
    processes.start(layout.run, layout.logs, name, argv, env=env)
    log = layout.logs / f"{name}.log"
    if name == "etcd":
        _wait("etcd", lambda: _etcd_healthy(ports), 60, log)
    elif name == "kube-apiserver":
        _wait("kube-apiserver", lambda: apiserver_ready(pki, ports), 120, log)


def restart(layout: ClusterLayout, name: str, *, pause: float = 0.0) -> None:
    """Stop one running component (SIGTERM, as a supervisor would) and start it again with
    the same command line, `pause` seconds later; returns once etcd or the API server serve
    again (the other components return at once). For fault tests: the rest of the cluster
    keeps running and must ride it out."""
    if name not in COMPONENTS:
        raise ValueError(f"unknown component {name!r}; known: {', '.join(COMPONENTS)}")
    if not processes.running(layout.run, name):
        raise ClusterError(f"{name} is not running; start the cluster first (make cluster-up)")
    processes.stop(layout.run, name)
    time.sleep(pause)
    _start(layout, Pki(layout.pki), _load_ports(layout), name)


def up(layout: ClusterLayout, *, say: bool = True, with_lws: bool = False) -> None:
    """Start every component that is not running; write the kubeconfigs. With `with_lws` (or
    INFERGATE_LOCAL_LWS=1) also the LeaderWorkerSet controller (see `lws`)."""
    _require_binaries()
    started = time.monotonic()
    pki = Pki(layout.pki)
    ensure_pki(pki)
    ports = _load_ports(layout)
    server = f"https://127.0.0.1:{ports.apiserver}"
    _write_kubeconfig(layout.kubeconfig, pki, server, "admin")
    for user in ("controller-manager", "scheduler", "nodes"):
        _write_kubeconfig(layout.root / f"{user}.kubeconfig", pki, server, user)
    layout.bin.mkdir(parents=True, exist_ok=True)
    kubectl = layout.bin / "kubectl"
    if not kubectl.exists() or kubectl.resolve() != (kubernetes_bin() / "kubectl").resolve():
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(kubernetes_bin() / "kubectl")
    write_kwok_config(layout.root / "kwok.yaml", kwok_bin() / "stage")

    for name in COMPONENTS:
        if processes.running(layout.run, name):
            continue
        _start(layout, pki, ports, name)
        if say:
            print(f"started {name}", file=sys.stderr)
    try:
        bootstrap(layout, COMPONENTS)
    except BootstrapError as exc:
        raise ClusterError(str(exc)) from exc
    install_gateway_api(layout, say=say)
    install_lws(layout, say=say)
    try:
        if lws.wanted(with_lws):
            lws.start(layout, say=say)
        elif not processes.running(layout.run, lws.NAME):
            lws.stop(layout)  # webhook configurations a stopped controller left behind
    except lws.LwsError as exc:
        raise ClusterError(str(exc)) from exc
    if say:
        print(
            f"cluster {kubernetes_version()} up at {server} in {time.monotonic() - started:.1f}s; "
            f"KUBECONFIG={layout.kubeconfig}",
            file=sys.stderr,
        )


def install_gateway_api(layout: ClusterLayout, *, say: bool = True) -> bool:
    """Apply the cached Gateway API CRDs of the release this cluster's version takes
    (`gateway_api_version`; server-side: they are too large for the last-applied annotation);
    False, with a note, when they are not cached (`make control-plane`)."""
    return _install_cached_crds(
        layout,
        gateway_api_crds(),
        what=f"Gateway API {gateway_api_version()} CRDs",
        fetch=f"K8S_VERSION={kubernetes_version()} hack/build-control-plane.sh gateway-api",
        needed_by="rollout.traffic.mode gateway",
        say=say,
    )


def install_lws(layout: ClusterLayout, *, say: bool = True) -> bool:
    """Apply the cached LeaderWorkerSet CRD, as `install_gateway_api` does its CRDs."""
    return _install_cached_crds(
        layout,
        lws_crds(),
        what="LeaderWorkerSet CRD",
        fetch="hack/build-control-plane.sh lws",
        needed_by="multi-node revisions (spec.topology.nodes above 1)",
        say=say,
    )


def _install_cached_crds(
    layout: ClusterLayout, crds: Path, *, what: str, fetch: str, needed_by: str, say: bool
) -> bool:
    if not crds.is_dir():
        if say:
            print(
                f"{what} not cached at {crds}: `{fetch}` fetches them; {needed_by} needs them",
                file=sys.stderr,
            )
        return False
    result = subprocess.run(
        [
            str(layout.bin / "kubectl"),
            f"--kubeconfig={layout.kubeconfig}",
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            str(crds),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"installing the {what} failed: {result.stderr.strip()}")
    return True


def down(layout: ClusterLayout, *, purge: bool = False) -> list[str]:
    """Stop exactly the processes `up` started; with purge, forget the cluster."""
    was_running = processes.running(layout.run, "kube-apiserver") is not None
    stopped = [lws.NAME] if was_running and lws.stop(layout) else []
    stopped += [name for name in reversed(COMPONENTS) if processes.stop(layout.run, name)]
    if purge and layout.root.exists():
        for child in (layout.etcd_data, layout.pods, layout.state_file, layout.run):
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    return stopped


def is_up(layout: ClusterLayout) -> bool:
    if not layout.state_file.exists():
        return False
    ports = _load_ports(layout)
    return all(processes.running(layout.run, n) for n in COMPONENTS) and apiserver_ready(
        Pki(layout.pki), ports
    )


def environ_for(layout: ClusterLayout) -> dict[str, str]:
    """Environment for a shell that uses this cluster."""
    return {
        "KUBECONFIG": str(layout.kubeconfig),
        "PATH": f"{layout.bin}{os.pathsep}{os.environ.get('PATH', '')}",
    }
