"""Where the local cluster keeps its binaries, state, certificates and logs.

Binaries are built once per version under the cache (see
hack/build-control-plane.sh); everything of one running cluster lives in the
repository's git-ignored `.cluster/` directory.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

# The Kubernetes version `make test` and the demo run (the newest supported minor).
K8S_VERSION = "v1.36.3"
# The other supported minors the matrix (`make test-matrix`) runs the install and the canary
# flows on: the oldest supported minor (1.30, the documented minimum) and the next, each at
# its newest patch the Go module proxy serves. The same list as K8S_MATRIX_VERSIONS in
# mk/matrix.mk.
MATRIX_K8S_VERSIONS = ("v1.30.14", "v1.31.14")
# Set by `infergate-dev localcluster --kubernetes-version` and pytest's --kubernetes-version,
# so every process of one run (the executor, kubectl plugins, tests) uses the same binaries.
K8S_VERSION_ENV = "INFERGATE_K8S_VERSION"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# The Gateway API CRDs (standard channel) the cluster gets; the same version as
# hack/build-control-plane.sh fetches (v1.7 needs a newer Go than the machine has).
GATEWAY_API_VERSION = "v1.6.3"
# ... and before Kubernetes 1.31: from Gateway API v1.5 the standard channel's TLSRoute CRD
# validates its hostnames with CEL's `isIP()`, of the IP library the API server has from 1.31
# on; a 1.30 server refuses that CRD (undeclared reference to 'isIP'). v1.4.1 is the newest
# release without it (its CEL rules use only functions 1.30 has). infergate writes only
# HTTPRoute gateway.networking.k8s.io/v1, which both serve; what 1.30 lacks is the standard
# channel's TLSRoute, TCPRoute, UDPRoute and ListenerSet, which infergate does not use.
GATEWAY_API_VERSION_BEFORE_1_31 = "v1.4.1"
# The LeaderWorkerSet CRD (sigs.k8s.io/lws) multi-node revisions render to; the same version
# as hack/build-control-plane.sh fetches.
LWS_VERSION = "v0.9.0"


# Loopback ranges: the executor hands each real pod an address here; KWOK's
# simulated pods get addresses from another range, so even a mistaken dial of
# a simulated pod stays on this machine. Each checkout takes its own /16 of 127.64.0.0/10,
# picked from its path, so two checkouts' clusters on one machine do not share pod IPs;
# INFERGATE_EXECUTOR_POD_CIDR sets the range by hand (inside 127.0.0.0/8).
def _checkout_pod_cidr() -> str:
    checkout = Path(__file__).resolve().parents[3]
    return f"127.{64 + hashlib.sha256(str(checkout).encode()).digest()[0] % 64}.0.0/16"


EXECUTOR_POD_CIDR = os.environ.get("INFERGATE_EXECUTOR_POD_CIDR") or _checkout_pod_cidr()
KWOK_POD_CIDR = "127.128.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"


def kubernetes_version() -> str:
    """The version this process runs the local cluster with: $INFERGATE_K8S_VERSION, or the
    default K8S_VERSION."""
    return os.environ.get(K8S_VERSION_ENV) or K8S_VERSION


def supported_minor(version: str) -> tuple[int, int]:
    """(1, 31) for "v1.31.14"; refuses anything that is not vMAJOR.MINOR.PATCH."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"Kubernetes version {version!r}: expected vMAJOR.MINOR.PATCH")
    return int(match[1]), int(match[2])


def cache_dir() -> Path:
    return Path(os.environ.get("INFERGATE_CACHE", Path.home() / ".cache" / "infergate"))


def repo_root() -> Path:
    """The checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class ClusterLayout:
    """Paths of one local cluster."""

    root: Path

    @classmethod
    def default(cls) -> ClusterLayout:
        """`.cluster/` of the checkout for the default version, `.cluster-VERSION/` for
        another (etcd data of a newer API server is not for an older one to read), or
        $INFERGATE_CLUSTER_DIR."""
        override = os.environ.get("INFERGATE_CLUSTER_DIR")
        if override:
            return cls(Path(override))
        version = kubernetes_version()
        name = ".cluster" if version == K8S_VERSION else f".cluster-{version}"
        return cls(repo_root() / name)

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Pid files and the state of the processes `up` started."""
        return self.root / "run"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def pods(self) -> Path:
        """Per-pod working directories of the local executor."""
        return self.root / "pods"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def executor_config(self) -> Path:
        return self.root / "executor.yaml"


def kubernetes_bin(version: str | None = None) -> Path:
    """kube-apiserver, -controller-manager, -scheduler and kubectl of `version` (by default
    the one this process runs: `kubernetes_version()`)."""
    return cache_dir() / "bin" / f"kubernetes-{version or kubernetes_version()}"


def etcd_bin() -> Path:
    return cache_dir() / "bin" / f"etcd-{ETCD_VERSION}"


def gateway_api_version(version: str | None = None) -> str:
    """The Gateway API release a cluster of Kubernetes `version` (by default the one this
    process runs) gets: the pinned one, or the older pin before 1.31 (see above)."""
    if supported_minor(version or kubernetes_version()) < (1, 31):
        return GATEWAY_API_VERSION_BEFORE_1_31
    return GATEWAY_API_VERSION


def gateway_api_crds(version: str | None = None) -> Path:
    """The Gateway API's standard CRDs for Kubernetes `version`, as
    hack/build-control-plane.sh copies them."""
    return cache_dir() / f"gateway-api-{gateway_api_version(version)}" / "crds"


def lws_crds() -> Path:
    """The LeaderWorkerSet CRD, as hack/build-control-plane.sh copies it."""
    return cache_dir() / f"lws-{LWS_VERSION}" / "crds"


def kwok_bin() -> Path:
    return cache_dir() / "bin" / f"kwok-{KWOK_VERSION}"
