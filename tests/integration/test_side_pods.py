"""A tenant with the namespace's `edit` role cannot have a harmful canary judged on the
stable's answers by making a pod that wears the canary's labels: admission refuses the
pod, and where the policies are not installed, the parity runner refuses its address.

The pod runs the stable's template under the canary's labels; the cluster's own
EndpointSlice controller publishes it in the canary Service's slice like any pod the
Service selects (a trusted publisher, controlled by the Service), so only the pod's
origin tells it apart.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import Cluster, namespace_for, release_namespace, wait_for
from tests.integration.admission_support import AdmissionSession, wait_until_enforced
from tests.integration.controller_support import idep_namespace, operator
from tests.integration.test_admission_policies import admission
from tests.integration.test_paritycheck_controller import (
    _check,
    _condition,
    _Described,
    _stable_and_its_float16_revision,
)

pytestmark = pytest.mark.cluster
__all__ = ["admission", "idep_namespace", "operator"]

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


def test_without_the_policies_the_runner_refuses_a_look_alike_pods_address(
    cluster: Cluster, idep_namespace: str
) -> None:
    from infergate.kube.client import KubeClient, load_api_client
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.run import EXIT_DONE, Connector, RunOptions, run_check

    _edit_role(cluster, idep_namespace)
    idep, stable, canary = _stable_and_its_float16_revision(cluster, idep_namespace)
    idep.apply(dtype="float16")
    assert idep.wait_check(timeout=90)[0] == canary
    name = f"qwen-{canary}"
    stable_template = cluster.get_json("deployment", f"qwen-{stable}", "-n", idep_namespace)[
        "spec"
    ]["template"]
    canary_labels = cluster.get_json("deployment", name, "-n", idep_namespace)["spec"]["template"][
        "metadata"
    ]["labels"]
    pod = _look_alike(stable_template, canary_labels, "look-alike")
    made = cluster.kubectl(
        f"--as={TENANT}", "create", "-n", idep_namespace, "-f", "-", input=json.dumps(pod)
    )
    assert made.returncode == 0

    def published() -> bool:
        slices = cluster.get_json(
            "endpointslices", "-n", idep_namespace, "-l", f"kubernetes.io/service-name={name}"
        )["items"]
        return any(
            (e.get("targetRef") or {}).get("name") == "look-alike"
            and (e.get("conditions") or {}).get("ready") is not False
            for s in slices
            for e in s.get("endpoints") or []
        )

    wait_for(published, 90, "the look-alike in the canary Service's slices")
    api = CheckClient(KubeClient(load_api_client(str(cluster.kubeconfig))), idep_namespace)
    options = RunOptions(wait_for_sides=60.0, progress_interval=0.0)
    assert run_check(api, name, options, connector=Connector(info=_Described())) == EXIT_DONE

    body = _check(cluster, idep_namespace, name)
    assert body["status"]["phase"] == "Error"
    error = _condition(body, "Error")
    assert error["reason"] == "SideObjectNotOurs"
    assert f"Pod {idep_namespace}/look-alike is not made by a ReplicaSet" in error["message"]
    status = idep.wait_phase("RolledBack", timeout=90)
    assert status["stableRevision"] == stable
