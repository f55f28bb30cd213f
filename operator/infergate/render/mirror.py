"""The mirroring proxy of an InferenceDeployment, as manifests (pure).

`<name>-mirror`: a Deployment running `infergate mirror serve` (the operator's own image),
its Service (port `http` forwards to stable, port `control` takes shadow sessions), a
ServiceAccount with a Role that may only read Services and EndpointSlices of the
namespace: the proxy resolves the stable Service's ready endpoints itself (it never
dials a ClusterIP) and, for a shadow session, the endpoints of a revision Service of its
own deployment; and a NetworkPolicy that opens `http` to everyone but `control` only to
the parity runners of its namespace's checks (pods of the runner namespace labelled with
this namespace: only the operator writes there). A session's result carries the prompt and answer
token ids of live traffic, and a session is named after its check (predictable): any
other pod that could reach `control` could read users' text or end the runner's session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infergate.api.shadow import Mirror
from infergate.render.check_names import LABEL_CHECK_NAMESPACE, ROLE_RUNNER, role_labels
from infergate.render.images import pull_secret_refs
from infergate.render.labels import (
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)
from infergate.render.launch import HTTP_PORT, UNROUTE_SECONDS, pre_stop_hold

COMPONENT_MIRROR = "mirror"
CONTROL_PORT = 8001
CONTAINER = "mirror"
HEALTH_PATH = "/mirror/health"
_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}


def mirror_name(name: str) -> str:
    """Name of the mirror's Deployment, Service, ServiceAccount, Role, RoleBinding and
    NetworkPolicy."""
    return f"{name}-mirror"


def mirror_labels(name: str) -> dict[str, str]:
    """Labels of every mirror object; the pod selector is the same set."""
    return {
        LABEL_NAME: name,
        LABEL_INSTANCE: mirror_name(name),
        LABEL_COMPONENT: COMPONENT_MIRROR,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: name,
    }


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": mirror_name(name), "namespace": namespace, "labels": mirror_labels(name)}


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": "control"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def render_mirror(
    name: str,
    namespace: str,
    mirror: Mirror,
    *,
    image: str,
    runner_namespace: str,
    pull_secrets: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, NetworkPolicy, Deployment and Service of the mirror,
    in apply order (the policy before the pods: `control` is never open to all); its pods
    pull infergate's image with the operator's `pull_secrets` (`--image-pull-secret`)."""
    labels = mirror_labels(name)
    account = mirror_name(name)
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["infergate"],
        "args": [
            "mirror",
            "serve",
            "--deployment",
            name,
            "--namespace",
            namespace,
            "--host",
            "$(POD_IP)",
            "--port",
            str(HTTP_PORT),
            "--control-port",
            str(CONTROL_PORT),
        ],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "control", "containerPort": CONTROL_PORT, "protocol": "TCP"},
        ],
        "resources": mirror.resources.to_kube() if mirror.resources else _RESOURCES,
        "readinessProbe": _probe(2, 3),
        "livenessProbe": _probe(10, 6),
        # Clients reach the mirror through the stable Service: like an engine, it keeps
        # serving until they have stopped sending to it, then drains.
        "lifecycle": pre_stop_hold(),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, namespace),
        "spec": {
            "replicas": mirror.replicas,
            "selector": {"matchLabels": labels},
            "revisionHistoryLimit": 2,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "containers": [container],
                    "terminationGracePeriodSeconds": UNROUTE_SECONDS + 10,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                },
            },
        },
    }
    if pull_secrets:
        deployment["spec"]["template"]["spec"]["imagePullSecrets"] = pull_secret_refs(pull_secrets)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": labels,
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "control",
                    "port": CONTROL_PORT,
                    "targetPort": "control",
                    "protocol": "TCP",
                },
            ],
        },
    }
    policy = mirror_network_policy(name, namespace, runner_namespace=runner_namespace)
    return [*mirror_rbac(name, namespace), policy, deployment, service]


def mirror_network_policy(name: str, namespace: str, *, runner_namespace: str) -> dict[str, Any]:
    """Ingress of the mirror's pods: `http` (what clients and gateways call) from anywhere,
    `control` (shadow sessions and their results) only from the parity runner pods of this
    namespace's checks: pods of `runner_namespace` whose labels name this namespace (only
    the operator writes there; a pod of this namespace labelled as a runner gets nothing).

    The kubelet's probes also call `control` (HEALTH_PATH); they need no rule: traffic
    from the node a pod runs on is always allowed, whatever the policies say (Kubernetes'
    NetworkPolicy documentation), so a probe is never cut off by this policy.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(name, namespace),
        "spec": {
            "podSelector": {"matchLabels": mirror_labels(name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"protocol": "TCP", "port": HTTP_PORT}]},
                {
                    # Every runner pod of this namespace's checks: checks come and go, the
                    # policy stays.
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": runner_namespace}
                            },
                            "podSelector": {
                                "matchLabels": {
                                    **role_labels(ROLE_RUNNER),
                                    LABEL_CHECK_NAMESPACE: namespace,
                                }
                            },
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": CONTROL_PORT}],
                },
            ],
        },
    }


def mirror_rbac(name: str, namespace: str) -> list[dict[str, Any]]:
    """The mirror's identity: it reads Services and EndpointSlices of its namespace, nothing
    else (it never writes to the API server)."""
    account = mirror_name(name)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _metadata(name, namespace),
            "automountServiceAccountToken": True,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(name, namespace),
            "rules": [
                {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]
