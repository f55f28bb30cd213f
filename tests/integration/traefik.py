"""A real Gateway API implementation on 127.0.0.1 for tests: Traefik with its Kubernetes
Gateway provider, against the local cluster, and HTTP servers standing in for engine pods.

The binary is built from its Go module by hack/build-traefik.sh (cached by version under
$INFERGATE_CACHE/bin); `$INFERGATE_TRAEFIK` names it (mk/gateway.mk sets it). Traefik
watches one namespace, takes only the GatewayClass carrying this run's label, listens on
free loopback ports, never calls home (version check and usage statistics off), and is
stopped, by its own pid, after.

Traefik sends a route's requests to the ready addresses of the backend Service's
EndpointSlices (pkg/provider/kubernetes/gateway `getBackendAddresses`), never to its
ClusterIP (fictional here) unless nativeLB is asked for, which it is not. The operator's
engine pods land on KWOK's simulated nodes, where nothing listens and no slice lists them
(the API server refuses their loopback IPs in IPv4 slices). `RevisionBackends` gives each
revision Service one slice of its own instead: 127.0.0.1 and the port of a small server
that answers with the revision's name. So every request Traefik forwards lands on
127.0.0.1, and its answer says which revision the route sent it to. (In the e2e tests the
engine pods run for real on the local executor, which publishes their loopback pod IPs in
FQDN slices of its own: Traefik then reaches the engines themselves.)

`traefik_path` (a fixture), `serve_gateway` and the route readers below are shared by
tests/integration/test_gateway_traefik.py and tests/e2e/test_gateway_real_engines.py.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Self
from urllib.parse import urlsplit

import httpx
import pytest

from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_REVISION
from infergate.render.launch import HTTP_PORT
from tests.harness import Cluster, ServerProcess, wait_for

TRAEFIK_VERSION = "v3.6.12"
CONTROLLER_NAME = "traefik.io/gateway-controller"
START_TIMEOUT_S = 60.0
# The one path the revision servers answer. The parity runner the operator starts for a
# canary finds them through the same slices and polls GET /health: it keeps waiting while
# that is not 200, as it does for KWOK pods, so the test's verdicts stay the only ones.
WHOAMI = "/whoami"
SLICE_SUFFIX = "gateway-test"
SLICE_MANAGER = "gateway-test.infergate.io"


def traefik_binary() -> Path:
    named = os.environ.get("INFERGATE_TRAEFIK")
    if named:
        return Path(named)
    cache = Path(os.environ.get("INFERGATE_CACHE", Path.home() / ".cache" / "infergate"))
    return cache / "bin" / f"traefik-{TRAEFIK_VERSION}" / "traefik"


@pytest.fixture(scope="session")
def traefik_path() -> Path:
    """The Traefik binary; a skip saying how to build it (a failure with
    INFERGATE_REQUIRE_GATEWAY=1, as under make test-gateway)."""
    binary = traefik_binary()
    if not binary.exists():
        reason = f"no Traefik binary at {binary}: `make traefik` builds it from its Go module"
        if os.environ.get("INFERGATE_REQUIRE_GATEWAY") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Traefik(ServerProcess):
    """One running Traefik; a context manager that stops it."""

    stop_grace: ClassVar[float] = 15.0

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
                # The dashboard's assets are not in the Go module; its API is all we read.
                "--api.dashboard=false",
                "--log.noColor=true",
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


def gateway_condition(
    cluster: Cluster, kind: str, name: str, namespace: str | None, type_: str
) -> bool:
    """Whether a Gateway API object (`gatewayclasses`, `gateways`) has condition `type_` True."""
    where = ["-n", namespace] if namespace else []
    found = cluster.get_json(f"{kind}.gateway.networking.k8s.io", name, *where)
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


@contextmanager
def serve_gateway(
    binary: Path, cluster: Cluster, namespace: str, gateway: str, root: Path
) -> Iterator[Traefik]:
    """Traefik on loopback ports, the GatewayClass it takes and the Gateway `gateway` it
    programs in `namespace`, both Accepted/Programmed by Traefik itself; Traefik stopped and
    the GatewayClass deleted after."""
    nonce = uuid.uuid4().hex[:6]
    label = f"infergate.io/gateway-test={nonce}"
    gateway_class = f"infergate-traefik-{nonce}"
    traefik = Traefik(binary, cluster.kubeconfig, namespace, label, root)
    try:
        for document in gateway_objects(gateway_class, label, gateway, namespace, traefik.web_port):
            cluster.apply(document)
        with traefik:
            wait_for(
                lambda: gateway_condition(
                    cluster, "gatewayclasses", gateway_class, None, "Accepted"
                ),
                60,
                f"GatewayClass {gateway_class} Accepted by Traefik",
            )
            wait_for(
                lambda: gateway_condition(cluster, "gateways", gateway, namespace, "Programmed"),
                60,
                f"Gateway {gateway} Programmed by Traefik",
            )
            yield traefik
    finally:
        cluster.kubectl("delete", "gatewayclass", gateway_class, "--wait=false", check=False)


def route_accepted(cluster: Cluster, namespace: str, route: str) -> bool:
    """Traefik's own status on the HTTPRoute: attached to the Gateway, every backend resolved."""
    found = cluster.get_json("httproutes.gateway.networking.k8s.io", route, "-n", namespace)
    for parent in (found.get("status") or {}).get("parents") or []:
        if parent.get("controllerName") == CONTROLLER_NAME:
            states = {c["type"]: c["status"] for c in parent.get("conditions") or []}
            return states.get("Accepted") == "True" and states.get("ResolvedRefs") == "True"
    return False


def slice_endpoints(cluster: Cluster, namespace: str, service: str) -> set[str]:
    """host:port of the ready endpoints in every EndpointSlice of a Service, on its port
    `http` (all a Gateway may dial for it)."""
    slices = cluster.get_json(
        "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    return {
        f"{address}:{port['port']}"
        for endpoint_slice in slices
        for port in endpoint_slice.get("ports") or []
        if port.get("name") == "http"
        for endpoint in endpoint_slice.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready") is not False
        for address in endpoint["addresses"]
    }


def traefik_route(traefik: Traefik, namespace: str, route: str) -> dict[str, tuple[int, set[str]]]:
    """Revision -> (weight, servers as host:port) of the operator's HTTPRoute `route` (its
    backends are the revision Services `<route>-<revision>`) as Traefik routes it now."""
    services = {s["name"].split("@")[0]: s for s in traefik.services()}
    # Traefik names a route rule's weighted service httproute-<namespace>-<route>-...-wrr.
    prefix = f"httproute-{namespace}-{route}-"
    weighted = [s for n, s in services.items() if "weighted" in s and n.startswith(prefix)]
    if len(weighted) != 1:
        return {}
    routed = {}
    for child in weighted[0]["weighted"].get("services") or []:
        child_name = child["name"].split("@")[0]
        # Traefik names a Service backend <namespace>-<service>-http-<port>.
        revision = child_name.removeprefix(f"{namespace}-{route}-").removesuffix(
            f"-http-{HTTP_PORT}"
        )
        servers = (services.get(child_name) or {}).get("loadBalancer", {}).get("servers") or []
        routed[revision] = (
            int(child.get("weight", 1)),
            {urlsplit(s["url"]).netloc for s in servers},
        )
    return routed


class _RevisionHandler(BaseHTTPRequestHandler):
    server: _RevisionServer

    def do_GET(self) -> None:
        body = json.dumps({"revision": self.server.revision}).encode()
        self.send_response(200 if self.path == WHOAMI else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


class _RevisionServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, revision: str) -> None:
        self.revision = revision
        super().__init__(("127.0.0.1", 0), _RevisionHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def revision_slice(service: str, namespace: str, port: int) -> dict[str, Any]:
    """An EndpointSlice of `service`: one ready endpoint, 127.0.0.1:`port`, on the Service's
    port `http`. FQDN, as the local executor publishes its pods (the API server refuses
    loopback addresses in IPv4 slices); Traefik reads the addresses of every slice type."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-{SLICE_SUFFIX}",
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER,
            },
        },
        "addressType": "FQDN",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


class RevisionBackends:
    """One HTTP server per revision on 127.0.0.1, answering GET /whoami with the revision's
    name, and an EndpointSlice that makes it the endpoint of the revision's Service: the
    engine pods, made real enough to count who got a request.

    `sync` follows the revision Services the operator creates (a canary's appears with its
    rollout)."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self._servers: dict[str, _RevisionServer] = {}

    def sync(self) -> dict[str, str]:
        """Serve every revision Service there is; endpoint host:port -> revision."""
        services = self.cluster.get_json(
            "services", "-n", self.namespace, "-l", f"{LABEL_DEPLOYMENT}={self.name}"
        )["items"]
        for service in services:
            revision = service["metadata"]["labels"].get(LABEL_REVISION)
            if revision is None or revision in self._servers:
                continue  # the serving Service `<name>`, or served already
            server = _RevisionServer(revision)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers[revision] = server
            self.cluster.apply(
                revision_slice(service["metadata"]["name"], self.namespace, server.port)
            )
        return self.endpoints()

    def endpoints(self) -> dict[str, str]:
        """host:port -> revision of every server."""
        return {f"127.0.0.1:{s.port}": r for r, s in self._servers.items()}

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
