"""A real Gateway API implementation on 127.0.0.1 for tests: Traefik with its Kubernetes
Gateway provider, against the local cluster, and HTTP servers standing in for engine pods.

The binary is built from its Go module by hack/build-traefik.sh (cached by version under
$INFERGATE_CACHE/bin); `$INFERGATE_TRAEFIK` names it (mk/gateway.mk sets it). Traefik
watches one namespace, takes only the GatewayClass carrying this run's label, listens on
free loopback ports, never calls home (version check and usage statistics off), and is
stopped, by its own pid, after.

Traefik sends a route's requests to the ready addresses of the backend Service's
EndpointSlices (not its ClusterIP, which is fictional here: nativeLB stays off). On the
local cluster those are the KWOK pods' IPs, inside 127.0.0.0/8 with nothing listening:
`PodBackends` listens on exactly those addresses and ports, so the chain
HTTPRoute -> Service -> EndpointSlice -> pod stays the real one and every dial stays on
this machine.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import httpx

from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_REVISION
from infergate.render.launch import HTTP_PORT
from tests.harness import Cluster

TRAEFIK_VERSION = "v3.6.12"
CONTROLLER_NAME = "traefik.io/gateway-controller"
START_TIMEOUT_S = 60.0
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
# The one path the pod servers answer. The parity runner the operator starts for a canary
# polls GET /health on the same pods and keeps waiting while it is not 200, exactly as it
# does for a KWOK pod where nothing listens, so the test's verdicts stay the only ones.
WHOAMI = "/whoami"


def traefik_binary() -> Path:
    named = os.environ.get("INFERGATE_TRAEFIK")
    if named:
        return Path(named)
    cache = Path(os.environ.get("INFERGATE_CACHE", Path.home() / ".cache" / "infergate"))
    return cache / "bin" / f"traefik-{TRAEFIK_VERSION}" / "traefik"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Traefik:
    """One running Traefik; a context manager that stops it."""

    binary: Path
    kubeconfig: Path
    namespace: str
    class_label: str
    root: Path
    web_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start(self) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = (self.root / "traefik.log").open("wb")
        self._process = subprocess.Popen(
            [
                str(self.binary),
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                f"--entryPoints.web.address=127.0.0.1:{self.web_port}",
                f"--entryPoints.traefik.address=127.0.0.1:{self.api_port}",
                "--api.insecure=true",
                "--ping=true",
                "--log.level=INFO",
                "--providers.kubernetesgateway=true",
                f"--providers.kubernetesgateway.namespaces={self.namespace}",
                f"--providers.kubernetesgateway.labelSelector={self.class_label}",
                "--providers.kubernetesgateway.statusAddress.ip=127.0.0.1",
            ],
            # KUBECONFIG: the provider's client for a cluster it does not run in.
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "KUBECONFIG": str(self.kubeconfig),
            },
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.root,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"traefik exited {self._process.returncode}: {self.log()}")
            try:
                if httpx.get(self._api("/ping"), timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"traefik did not answer /ping within {START_TIMEOUT_S}s: {self.log()}")

    def _api(self, path: str) -> str:
        return f"http://127.0.0.1:{self.api_port}{path}"

    def services(self) -> list[dict[str, Any]]:
        """Traefik's HTTP services as its API shows them (what it routes with now)."""
        response = httpx.get(self._api("/api/http/services"), params={"per_page": 500}, timeout=5)
        response.raise_for_status()
        listed: list[dict[str, Any]] = response.json()
        return listed

    def log(self) -> str:
        path = self.root / "traefik.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def gateway_objects(
    gateway_class: str, class_label: str, gateway: str, namespace: str, port: int
) -> list[dict[str, Any]]:
    """A GatewayClass Traefik takes (by controller name and this run's label) and a Gateway
    with one HTTP listener on Traefik's entrypoint port, for routes of its own namespace."""
    key, value = class_label.split("=", 1)
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": gateway_class, "labels": {key: value}},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": gateway, "namespace": namespace},
            "spec": {
                "gatewayClassName": gateway_class,
                "listeners": [
                    {
                        "name": "web",
                        "port": port,
                        "protocol": "HTTP",
                        "allowedRoutes": {"namespaces": {"from": "Same"}},
                    }
                ],
            },
        },
    ]


class _PodHandler(BaseHTTPRequestHandler):
    server: _PodServer

    def do_GET(self) -> None:
        owner = self.server.backends.owner(str(self.server.server_address[0]))
        body = json.dumps({"revision": owner[0], "pod": owner[1]} if owner else {}).encode()
        if self.path != WHOAMI:
            self.send_response(404)
        else:
            self.send_response(200 if owner else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


class _PodServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], backends: PodBackends) -> None:
        self.backends = backends
        super().__init__(address, _PodHandler)


class PodBackends:
    """An HTTP server on each live pod's IP and container port, answering GET /whoami with
    the pod's revision: the engine the pod would run, made real enough to count who got a
    request.

    `sync` follows the pods (scale-ups and promotions add some, scale-downs remove some);
    an address whose pod is gone answers 503, so a stale route shows as an error."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self._owners: dict[str, tuple[str, str]] = {}
        self._servers: dict[str, _PodServer] = {}
        self._lock = threading.Lock()

    def owner(self, ip: str) -> tuple[str, str] | None:
        with self._lock:
            return self._owners.get(ip)

    def sync(self) -> dict[str, str]:
        """Listen on every live pod's address; pod IP -> revision."""
        pods = self.cluster.get_json(
            "pods", "-n", self.namespace, "-l", f"{LABEL_DEPLOYMENT}={self.name}"
        )["items"]
        owners = {}
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or pod["metadata"].get("deletionTimestamp"):
                continue
            if ipaddress.ip_address(ip) not in LOOPBACK:
                raise AssertionError(f"pod {pod['metadata']['name']} has IP {ip}, off loopback")
            owners[ip] = (pod["metadata"]["labels"][LABEL_REVISION], pod["metadata"]["name"])
        with self._lock:
            self._owners = owners
        for ip in owners.keys() - self._servers.keys():
            server = _PodServer((ip, HTTP_PORT), self)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers[ip] = server
        return {ip: revision for ip, (revision, _) in owners.items()}

    def listening(self) -> set[str]:
        return set(self._servers)

    def close(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def binomial_interval(n: int, p: float, confidence: float = 0.999) -> tuple[int, int]:
    """The counts of a Binomial(n, p) outside which each tail holds at most (1-confidence)/2."""
    tail = (1 - confidence) / 2
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    low, below = 0, 0.0
    while below + pmf[low] <= tail:
        below += pmf[low]
        low += 1
    high, above = n, 0.0
    while above + pmf[high] <= tail:
        above += pmf[high]
        high -= 1
    return low, high
