"""Where the local cluster keeps its binaries, state, certificates and logs.

Binaries are built once per version under the cache (see
hack/build-control-plane.sh); everything of one running cluster lives in the
repository's git-ignored `.cluster/` directory.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# The Gateway API CRDs (standard channel) the cluster gets; the same version as
# hack/build-control-plane.sh fetches (v1.7 needs a newer Go than the machine has).
GATEWAY_API_VERSION = "v1.6.3"
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
        override = os.environ.get("INFERGATE_CLUSTER_DIR")
        return cls(Path(override) if override else repo_root() / ".cluster")

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


def kubernetes_bin() -> Path:
    return cache_dir() / "bin" / f"kubernetes-{K8S_VERSION}"


def etcd_bin() -> Path:
    return cache_dir() / "bin" / f"etcd-{ETCD_VERSION}"


def gateway_api_crds() -> Path:
    """The Gateway API's standard CRDs, as hack/build-control-plane.sh copies them."""
    return cache_dir() / f"gateway-api-{GATEWAY_API_VERSION}" / "crds"


def lws_crds() -> Path:
    """The LeaderWorkerSet CRD, as hack/build-control-plane.sh copies it."""
    return cache_dir() / f"lws-{LWS_VERSION}" / "crds"


def kwok_bin() -> Path:
    return cache_dir() / "bin" / f"kwok-{KWOK_VERSION}"
