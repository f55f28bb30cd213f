"""Helpers for tests that use the local cluster."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from infergate.localcluster.layout import ClusterLayout
from infergate.localcluster.rest import RestClient

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# Kinds whose finalizers a test teardown strips, so namespace deletion never hangs.
FINALIZED_KINDS = ("inferencedeployments.infergate.io", "paritychecks.infergate.io")


@dataclass
class Cluster:
    layout: ClusterLayout

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def kubectl_path(self) -> Path:
        return self.layout.bin / "kubectl"

    def kubectl(
        self,
        *args: str,
        input: str | None = None,  # noqa: A002 - the name subprocess.run uses
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", input=text)

    def rest(self) -> RestClient:
        return RestClient(self.kubeconfig)

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        path = self.layout.logs / "pods" / f"{namespace}_{pod}_{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll until `probe` returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
