"""A tenant with the namespace's `edit` role cannot have a harmful canary judged on the
stable's answers by making a pod that wears the canary's labels: admission refuses the
pod, and any workload whose pods would wear them.

Where the policies are not installed, the parity runner refuses such a pod's address
(tests/unit/runner/test_side_pods.py). That is not shown on the local cluster: KWOK gives
its pods loopback addresses, which the API server keeps out of the EndpointSlice
controller's IPv4 slices, so no simulated pod, real or look-alike, is ever published
there. The attacker's other attempts, with a real runner, are in test_tenant_sides.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import Cluster, namespace_for, release_namespace
from tests.integration.admission_support import AdmissionSession, wait_until_enforced
from tests.integration.test_admission_policies import admission

pytestmark = pytest.mark.cluster
__all__ = ["admission"]

TENANT = "tenant-editor"


def _edit_role(cluster: Cluster, namespace: str) -> None:
    """The tenant gets Kubernetes' built-in `edit` role in `namespace`, nothing else."""
    cluster.kubectl(
        "create", "rolebinding", f"{TENANT}-edit", "--clusterrole=edit",
        f"--user={TENANT}", "-n", namespace,
    )  # fmt: skip


def _look_alike(template: dict[str, Any], labels: dict[str, str], name: str) -> dict[str, Any]:
    """A bare pod running `template` (the stable's) and wearing `labels` (the canary's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": copy.deepcopy(template["spec"]),
    }


@pytest.fixture
def tenant(
    admission: AdmissionSession, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace the session's policies are bound to, where the tenant may `edit`."""
    name = admission.tenant_namespace(namespace_for(request.node.name, "sides", 30))
    _edit_role(cluster, name)
    yield name
    release_namespace(cluster, name)


def test_a_pod_wearing_infergate_labels_is_refused_at_admission(
    admission: AdmissionSession, tenant: str
) -> None:
    labels = {
        "app.kubernetes.io/managed-by": "infergate",
        "infergate.io/deployment": "qwen",
        "infergate.io/revision": "bbbbbbbbbb",
    }
    template = {"spec": {"containers": [{"name": "engine", "image": "busybox:1.36"}]}}
    pod = _look_alike(template, labels, "look-alike")

    def create(body: dict[str, Any]) -> Any:
        return admission.as_user(TENANT, "create", "-n", tenant, "-f", "-", input=json.dumps(body))

    wait_until_enforced(lambda: create(pod), "infergate-managed-pods to be enforced")
    refused = create(pod)
    assert not refused.allowed
    assert "wears infergate.io metadata" in refused.stderr
    # The edit role does let the tenant make pods: only the infergate labels are refused.
    plain = _look_alike(template, {"app": "mine"}, "mine")
    assert create(plain).allowed, "the edit role should let the tenant create plain pods"
    # Nor a workload whose pods would wear them.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "look-alikes"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }
    refused = create(deployment)
    assert not refused.allowed
    assert "wears infergate.io metadata" in refused.stderr
