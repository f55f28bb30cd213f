"""Which InferenceDeployments exist: what `infergate golden prune` asks of the cluster.

Golden-record retention deletes the records of a deleted deployment only when a listing
that covers its namespace succeeded and did not return it; any failure here is a
`KubeError` for the caller to stop on (never an empty listing).
"""

from __future__ import annotations

from kubernetes.config.config_exception import ConfigException

from infergate.errors import KubeError
from infergate.jsontypes import JSON
from infergate.kube.client import INFERENCE_DEPLOYMENTS, KubeClient


class DeploymentReads:
    """Lists InferenceDeployments with the caller's own credentials (kubeconfig)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None, context: str | None) -> DeploymentReads:
        """A reader with in-cluster or kubeconfig credentials; `KubeError` when there are none."""
        try:
            return cls(KubeClient.from_environment(kubeconfig, context))
        except (ConfigException, OSError) as err:
            raise KubeError(f"no credentials for the cluster: {err}") from err

    def inference_deployments(self, namespace: str | None) -> list[JSON]:
        """Every InferenceDeployment of `namespace` (None: of every namespace)."""
        return self.kube.list(INFERENCE_DEPLOYMENTS, namespace)

    def close(self) -> None:
        self.kube.close()
