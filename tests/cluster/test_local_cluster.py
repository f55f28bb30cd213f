"""The local cluster behaves like a real one where our tests depend on it."""

from __future__ import annotations

import ipaddress
import json
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from infergate.runner.endpoints import LOCAL_EXECUTOR, first_ready_url, trusted_slices
from infergate_dev.localcluster import controlplane, processes
from infergate_dev.localcluster.layout import (
    EXECUTOR_POD_CIDR,
    KWOK_POD_CIDR,
    gateway_api_version,
    kubernetes_version,
)
from tests.harness import Cluster, wait_for

pytestmark = pytest.mark.cluster

SIMULATED = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NPU_TOLERATION = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}


def _deployment(name: str, resource: str, count: int, selector: dict[str, str],
                tolerations: list[dict[str, str]]) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": selector,
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "engine",
                            "image": "registry.example/engine:1",
                            "resources": {"limits": {resource: str(count)}},
                        }
                    ],
                },
            },
        },
    }


def _available(cluster: Cluster, ns: str, name: str) -> bool:
    dep = cluster.get_json("deployment", name, "-n", ns)
    conditions = dep.get("status", {}).get("conditions", [])
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def _pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", ns, "-l", selector)["items"]
    return items


@pytest.mark.matrix
def test_control_plane_reports_its_real_version(cluster: Cluster) -> None:
    """The version asked for (the default, or --kubernetes-version) is what serves."""
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == kubernetes_version()
    assert version["clientVersion"]["gitVersion"] == kubernetes_version()


@pytest.mark.matrix
def test_the_gateway_api_release_this_version_takes_is_installed(cluster: Cluster) -> None:
    """Each version gets the newest pinned Gateway API release its API server accepts (before
    1.31 one without CEL's isIP()), and serves HTTPRoute v1, which infergate writes."""
    crd = cluster.get_json("crd", "httproutes.gateway.networking.k8s.io")
    annotations = crd["metadata"]["annotations"]
    assert annotations["gateway.networking.k8s.io/bundle-version"] == gateway_api_version()
    assert annotations["gateway.networking.k8s.io/channel"] == "standard"
    assert any(v["name"] == "v1" and v["served"] for v in crd["spec"]["versions"])


def test_nodes_are_labelled_and_tainted_like_real_accelerator_pools(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.get_json("nodes")["items"]}
    gpu = [n for n in nodes.values() if n["metadata"]["labels"].get("nvidia.com/gpu.present")]
    npu = [n for n in nodes.values() if n["metadata"]["labels"].get("accelerator")]
    assert len([n for n in gpu if n["metadata"]["labels"].get("type") == "kwok"]) >= 2
    assert len([n for n in npu if n["metadata"]["labels"].get("type") == "kwok"]) >= 2
    for node in gpu:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"]
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node[
            "spec"
        ]["taints"]
    for node in npu:
        assert node["status"]["allocatable"]["huawei.com/Ascend910"] == "8"
        assert node["metadata"]["labels"]["accelerator"] == "huawei-Ascend910"
        assert node["metadata"]["labels"]["accelerator-type"] == "module-910b-8"


@pytest.mark.matrix  # KWOK's simulated nodes serve every supported version
@pytest.mark.parametrize(
    ("resource", "selector", "toleration"),
    [
        ("nvidia.com/gpu", {"nvidia.com/gpu.present": "true"}, GPU_TOLERATION),
        ("huawei.com/Ascend910", {"accelerator": "huawei-Ascend910"}, NPU_TOLERATION),
    ],
    ids=["gpu", "ascend"],
)
def test_accelerator_deployment_lands_on_its_node_kind_and_becomes_available(
    cluster: Cluster, namespace: str, resource: str, selector: dict[str, str],
    toleration: dict[str, str],
) -> None:  # fmt: skip
    selector = {**selector, "type": "kwok"}
    cluster.apply(_deployment("model", resource, 2, selector, [toleration, SIMULATED]), namespace)
    wait_for(lambda: _available(cluster, namespace, "model"), 60, "Deployment Available")
    (pod,) = _pods(cluster, namespace, "app=model")
    node = cluster.get_json("node", pod["spec"]["nodeName"])
    assert int(node["status"]["allocatable"][resource]) == 8
    assert all(node["metadata"]["labels"][k] == v for k, v in selector.items())
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(KWOK_POD_CIDR)


def test_more_gpus_than_any_node_has_stays_pending_unschedulable(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        _deployment("huge", "nvidia.com/gpu", 9, {}, [GPU_TOLERATION, SIMULATED]), namespace
    )

    def unschedulable() -> dict[str, Any] | None:
        for pod in _pods(cluster, namespace, "app=huge"):
            for cond in pod.get("status", {}).get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return pod
        return None

    pod = wait_for(unschedulable, 60, "PodScheduled=False/Unschedulable")
    assert pod["status"]["phase"] == "Pending"
    message = next(c["message"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "nvidia.com/gpu" in message
    assert not _available(cluster, namespace, "huge")


def _job(name: str, script: str, **pod_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"infergate.io/local-executor": "true"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "python:3.11-slim",
                            "command": ["python3", "-c", textwrap.dedent(script)],
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            ],
                        }
                    ],
                    **pod_extra,
                },
            },
        },
    }  # fmt: skip


def _job_condition(cluster: Cluster, ns: str, name: str) -> str | None:
    job = cluster.get_json("job", name, "-n", ns)
    for cond in job.get("status", {}).get("conditions", []):
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return None


def test_job_on_the_executor_runs_a_real_process_and_ends_by_its_exit_code(
    cluster: Cluster, namespace: str, tmp_path: Any
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    volume = {
        "volumes": [{"name": "out", "hostPath": {"path": str(out)}}],
    }
    ok = _job(
        "ok",
        """
        import os, pathlib
        pathlib.Path("/out/ran").write_text(os.environ["POD_NAME"] + " " + os.environ["POD_IP"])
        """,
        **volume,
    )
    ok["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "out", "mountPath": "/out"}
    ]
    cluster.apply(ok, namespace)
    cluster.apply(_job("fails", "import sys; sys.exit(3)"), namespace)
    assert wait_for(lambda: _job_condition(cluster, namespace, "ok"), 60, "Job ok") == "Complete"
    assert wait_for(lambda: _job_condition(cluster, namespace, "fails"), 60, "Job fails") == (
        "Failed"
    )
    pod_name, pod_ip = (out / "ran").read_text().split()
    assert pod_name.startswith("ok-")
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(EXECUTOR_POD_CIDR)
    (failed_pod,) = _pods(cluster, namespace, "job-name=fails")
    terminated = failed_pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert failed_pod["status"]["phase"] == "Failed"
    # A finished pod's deletion is confirmed like any other: nothing stays Terminating.
    cluster.kubectl("delete", "job", "ok", "fails", "-n", namespace, "--cascade=foreground")
    wait_for(lambda: not _pods(cluster, namespace, "batch.kubernetes.io/job-name"), 30, "pods gone")


def test_service_endpointslice_lists_a_loopback_pod_ip_that_answers(
    cluster: Cluster, namespace: str
) -> None:
    page = "served from a ConfigMap volume\n"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "site"},
            "data": {"index.html": page},
        },
        namespace,
    )
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "nodeSelector": {"infergate.io/local-executor": "true"},
                        "volumes": [{"name": "site", "configMap": {"name": "site"}}],
                        "containers": [
                            {
                                "name": "web",
                                "image": "python:3.11-slim",
                                "command": ["python3", "-m", "http.server"],
                                "args": ["--bind", "$(POD_IP)", "--directory", "/srv/www", "8080"],
                                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "volumeMounts": [{"name": "site", "mountPath": "/srv/www", "readOnly": True}],
                                "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1},
                            }
                        ],
                    },
                },
            },
        },
        namespace,
    )  # fmt: skip
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
        namespace,
    )

    def ready_addresses() -> list[str]:
        slices = cluster.get_json(
            "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=web"
        )["items"]
        return [
            address
            for s in slices
            for e in s.get("endpoints") or []
            if e.get("conditions", {}).get("ready")
            for address in e["addresses"]
        ]

    addresses = wait_for(lambda: len(ready_addresses()) == 2 and ready_addresses(), 60, "2 ready")
    assert len(set(addresses)) == 2
    for address in addresses:
        assert ipaddress.ip_address(address) in ipaddress.ip_network(EXECUTOR_POD_CIDR)
        response = httpx.get(f"http://{address}:8080/index.html", timeout=5)
        assert response.status_code == 200
        assert response.text == page
    # The parity runner and the mirror read only slices the cluster published: the
    # executor's are among them, so what it publishes is what they call.
    service = cluster.get_json("service", "web", "-n", namespace)
    listed = cluster.get_json(
        "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=web"
    )["items"]
    trusted, ignored = trusted_slices(service, listed)
    assert ignored == []
    assert any(
        s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == LOCAL_EXECUTOR
        for s in trusted
    )
    assert first_ready_url(service, listed, port=80) in {f"http://{a}:8080" for a in addresses}


def test_pod_service_account_token_is_allowed_and_denied_as_its_role_says(
    cluster: Cluster, namespace: str
) -> None:
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader-reads-configmaps"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "read-configmaps"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader"}],
        },
    ]  # fmt: skip
    for obj in rbac:
        cluster.apply(obj, namespace)
    probe = f"""
        import json, os, ssl, sys, urllib.error, urllib.request
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        token = open(sa + "/token").read()
        ns = open(sa + "/namespace").read()
        assert ns == "{namespace}", ns
        ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
        host = os.environ["KUBERNETES_SERVICE_HOST"] + ":" + os.environ["KUBERNETES_SERVICE_PORT"]
        def status(path):
            req = urllib.request.Request("https://" + host + path,
                                         headers={{"Authorization": "Bearer " + token}})
            try:
                return urllib.request.urlopen(req, context=ctx).status
            except urllib.error.HTTPError as err:
                return err.code
        got = {{"configmaps": status("/api/v1/namespaces/" + ns + "/configmaps"),
               "secrets": status("/api/v1/namespaces/" + ns + "/secrets")}}
        print(json.dumps(got))
        sys.exit(0 if got == {{"configmaps": 200, "secrets": 403}} else 1)
    """
    job = _job("rbac", probe, serviceAccountName="reader")
    cluster.apply(job, namespace)
    result = wait_for(lambda: _job_condition(cluster, namespace, "rbac"), 60, "Job rbac")
    (pod,) = _pods(cluster, namespace, "job-name=rbac")
    log = cluster.pod_log(namespace, pod["metadata"]["name"], "main")
    assert result == "Complete", log
    assert '{"configmaps": 200, "secrets": 403}' in log


def test_deleting_a_pod_stops_its_process(cluster: Cluster, namespace: str) -> None:
    job = _job("sleeper", "import time; time.sleep(600)")
    cluster.apply(job, namespace)

    def running_pod() -> dict[str, Any] | None:
        pods = _pods(cluster, namespace, "job-name=sleeper")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None

    pod = wait_for(running_pod, 60, "sleeper Running")
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
    cluster.kubectl("delete", "job", "sleeper", "-n", namespace, "--cascade=foreground",
                    "--wait=true", timeout=60)  # fmt: skip

    def gone() -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat.split(") ")[1].startswith("Z")
        except FileNotFoundError:
            return True

    assert wait_for(gone, 30, "process exit")


def test_cluster_up_again_starts_nothing_new(cluster: Cluster) -> None:
    before = {n: processes.running(cluster.layout.run, n) for n in controlplane.COMPONENTS}
    assert all(before.values())
    controlplane.up(cluster.layout, say=False)
    after = {n: processes.running(cluster.layout.run, n) for n in controlplane.COMPONENTS}
    assert after == before
