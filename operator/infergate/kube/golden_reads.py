"""What `infergate golden` asks of the cluster, with the caller's own credentials.

- `prune`: which InferenceDeployments exist. Golden-record retention deletes the records
  of a deleted deployment only when a listing that covers its namespace succeeded and did
  not return it; any failure here is a `KubeError` for the caller to stop on (never an
  empty listing).
- `list` without `--store`: the ParityChecks of a namespace, whose `status.golden` says
  which records a Passed check stored (`infergate.golden.recorded`). Reading them needs
  only `get/list paritychecks`, never the store's credentials or its volume.
"""

from __future__ import annotations

from kubernetes.config.config_exception import ConfigException

from infergate.errors import KubeError
from infergate.jsontypes import JSON
from infergate.kube.client import (
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    KubeClient,
    kubeconfig_namespace,
)


class GoldenReads:
    """Lists InferenceDeployments and ParityChecks with in-cluster or kubeconfig credentials."""

    def __init__(self, kube: KubeClient, default_namespace: str = "default") -> None:
        self.kube = kube
        self.default_namespace = default_namespace
        """The kubeconfig context's namespace: what kubectl would use without -n."""

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None, context: str | None) -> GoldenReads:
        """A reader with in-cluster or kubeconfig credentials; `KubeError` when there are none."""
        try:
            kube = KubeClient.from_environment(kubeconfig, context)
        except (ConfigException, OSError) as err:
            raise KubeError(f"no credentials for the cluster: {err}") from err
        return cls(kube, kubeconfig_namespace(kubeconfig, context))

    def inference_deployments(self, namespace: str | None) -> list[JSON]:
        """Every InferenceDeployment of `namespace` (None: of every namespace)."""
        return self.kube.list(INFERENCE_DEPLOYMENTS, namespace)

    def parity_checks(self, namespace: str | None) -> list[JSON]:
        """Every ParityCheck of `namespace` (None: of every namespace)."""
        return self.kube.list(PARITY_CHECKS, namespace)

    def close(self) -> None:
        self.kube.close()
