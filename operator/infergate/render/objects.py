"""One revision's desired objects: ConfigMap, workload, revision Service, stable Service.

The workload is a Deployment of one-pod replicas, or, when `spec.topology.nodes` is above 1,
a LeaderWorkerSet of groups (render/group.py) whose leaders the Services select. Every
object is named `<name>-<revision>` but the LeaderWorkerSet, `<name>-<revision>-group`
(`labels.group_set_name` says why).

Pure: a spec in, plain Kubernetes manifests (dicts) out, for `kube/` to apply.
Owner references are added by the controller, not here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infergate.api.enums import EngineKind
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.api.model_uri import parse_model_uri
from infergate.render.accelerators import PRESETS
from infergate.render.disruption import spread_affinity
from infergate.render.group import leader_worker_set
from infergate.render.images import resolved_image
from infergate.render.labels import (
    ANNOTATION_REVISION_HASH,
    LABEL_DEPLOYMENT,
    LABEL_REVISION,
    engine_pod_selector,
    group_set_name,
    revision_labels,
    revision_object_name,
)
from infergate.render.launch import (
    CONFIG_DIR,
    CONFIG_KEY,
    CONFIG_PATH,
    ENGINE_GRACE_SECONDS,
    HEALTH_PATH,
    HTTP_PORT,
    EngineLaunch,
    RevisionInput,
    env_value,
    pre_stop_hold,
)
from infergate.render.mindformers import mindformers_launch
from infergate.render.model_weights import ModelWeights, model_weights
from infergate.render.pod_security import (
    cache_env,
    container_security,
    home_volume,
    pod_security,
)
from infergate.render.revision import revision_hash, short_revision
from infergate.render.traffic import stable_service
from infergate.render.vllm import vllm_launch

CONTAINER_NAME = "engine"
CONFIG_VOLUME = "engine-config"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"  # noqa: S108 - the pod's shared-memory mount, not a temp file
# Model loading can take many minutes on a cold node; the startup probe allows 30.
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURE_THRESHOLD = 180
DEFAULT_REQUESTS: dict[str, str] = {"cpu": "2", "memory": "6Gi"}
"""CPU and memory an engine container requests unless spec.resources names the resource:
the requests of vLLM's own Kubernetes guide (docs.vllm.ai, deployment/k8s, the NVIDIA GPU
example: cpu 2, memory 6G), for MindFormers too, whose adapter likewise holds a server
process and the weights' host copy while loading. No default limit: a memory limit below
what loading a model takes kills the pod, and the right one depends on the model."""

_LAUNCHERS: dict[EngineKind, Callable[[RevisionInput], EngineLaunch]] = {
    EngineKind.VLLM: vllm_launch,
    EngineKind.MINDFORMERS: mindformers_launch,
}


@dataclass(frozen=True)
class RevisionObjects:
    """The desired objects of one revision, and its identity."""

    revision: str
    revision_hash: str
    config_map: dict[str, Any]
    deployment: dict[str, Any]
    """The workload: a Deployment, or a LeaderWorkerSet for a multi-node topology."""
    service: dict[str, Any]
    stable_service: dict[str, Any]

    def manifests(self) -> list[dict[str, Any]]:
        """All objects, in apply order (the ConfigMap before the pods that mount it)."""
        return [self.config_map, self.deployment, self.service, self.stable_service]


def render_revision(
    name: str,
    namespace: str,
    spec: InferenceDeploymentSpec,
    *,
    replicas: int | None = None,
) -> RevisionObjects:
    """Render the revision `spec` describes; `replicas` defaults to `spec.replicas` (the
    controller passes `rollout.canaryReplicas` for a canary, 0 for a retired revision)."""
    full_hash = revision_hash(spec)
    revision = short_revision(full_hash)
    image = resolved_image(spec.engine)
    weights = model_weights(parse_model_uri(spec.model.uri), spec.model.uri)
    launch = _LAUNCHERS[spec.engine.kind](RevisionInput(name, revision, spec, image, weights))

    labels = revision_labels(name, revision, spec.engine.kind)
    annotations = {ANNOTATION_REVISION_HASH: f"sha256:{full_hash}"}
    object_name = revision_object_name(name, revision)

    def metadata(named: str = object_name) -> dict[str, Any]:
        return {
            "name": named,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        }

    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(),
        # The revision's name is its content: the ConfigMap never changes in place.
        "immutable": True,
        "data": {CONFIG_KEY: json.dumps(launch.engine_config, indent=2, sort_keys=True) + "\n"},
    }
    template = _pod_template(
        spec,
        launch,
        labels=labels,
        annotations=annotations,
        image=image,
        weights=weights,
        config_map_name=object_name,
    )
    count = spec.replicas if replicas is None else replicas
    topology = spec.layout
    deployment: dict[str, Any]
    if topology.multi_node:
        tensor = spec.engine.tensor_parallel_size
        deployment = leader_worker_set(
            # A name of its own: the LWS controller's headless Service takes it.
            metadata(group_set_name(name, revision)),
            engine=spec.engine.kind,
            template=template,
            replicas=count,
            size=topology.nodes,
            group_devices=topology.world(spec.accelerator.count, tensor),
            pod_devices=topology.devices_per_pod(spec.accelerator.count, tensor),
            # A restarted group is re-checked before it serves again only when the drift
            # watch is on; without it the group renders as it always did.
            checked_gate=spec.rollout.parity is not None and spec.rollout.parity.watch is not None,
        )
    else:
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(),
            "spec": {
                "replicas": count,
                "selector": {"matchLabels": engine_pod_selector(name, revision)},
                # Accelerator-bound pods cannot surge on full nodes: replace one at a time.
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                },
                "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
                "revisionHistoryLimit": 2,
                "template": template,
            },
        }
    service = _service(metadata(), engine_pod_selector(name, revision))
    # The stable Service as it is while this revision serves (see render.traffic).
    stable = stable_service(name, namespace, spec.rollout.traffic.mode, revision)
    return RevisionObjects(revision, full_hash, config_map, deployment, service, stable)


def _pod_template(
    spec: InferenceDeploymentSpec,
    launch: EngineLaunch,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    image: str,
    weights: ModelWeights,
    config_map_name: str,
) -> dict[str, Any]:
    preset = PRESETS[spec.accelerator.kind]
    placement = spec.placement
    kind = spec.engine.kind
    taken = {var["name"] for var in [*weights.env, *launch.env]}
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        env_value("INFERGATE_DEPLOYMENT", labels[LABEL_DEPLOYMENT]),
        env_value("INFERGATE_REVISION", labels[LABEL_REVISION]),
        env_value("INFERGATE_ENGINE_CONFIG", CONFIG_PATH),
        # Pod-level, not pinned in engine.json: where caches go changes no numerics.
        *cache_env(kind, taken),
        *weights.env,
        *launch.env,
    ]
    home_volumes, home_mounts = home_volume(kind)
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": launch.command,
        "args": launch.args,
        "env": env,
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": SHM_PATH},
            *home_mounts,
            *weights.mounts,
            *(
                {"name": mount.name, "mountPath": mount.path, "readOnly": True}
                for mount in preset.host_mounts
            ),
        ],
        # Engines need no privilege (render.pod_security says which level admits them).
        "securityContext": container_security(),
        "startupProbe": _health_probe(STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD),
        "readinessProbe": _health_probe(5, 3),
        "livenessProbe": _health_probe(10, 6),
        "lifecycle": pre_stop_hold(),
    }
    volumes = [
        {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name}},
        # Collective communication and tokenizer workers use shared memory.
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        *home_volumes,
        *weights.volumes,
        # hostPath: the Ascend driver's read-only mounts, the one reason (with a file://
        # model) an engine pod needs a `privileged` Pod Security namespace.
        *(
            {"name": mount.name, "hostPath": {"path": mount.path, "type": mount.kind}}
            for mount in preset.host_mounts
        ),
    ]
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": {**preset.node_selector, **placement.node_selector},
        "tolerations": [*preset.tolerations, *(t.to_kube() for t in placement.tolerations)],
        "terminationGracePeriodSeconds": ENGINE_GRACE_SECONDS,
        # An engine never calls the API server: no ServiceAccount token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": pod_security(kind, image),
        # Unless placement says otherwise, a revision's pods prefer distinct nodes: a node
        # lost or drained takes one replica, not all of them.
        "affinity": (
            placement.affinity
            if placement.affinity is not None
            else spread_affinity(
                engine_pod_selector(labels[LABEL_DEPLOYMENT], labels[LABEL_REVISION])
            )
        ),
    }
    if placement.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [ref.to_kube() for ref in placement.image_pull_secrets]
    if placement.priority_class_name is not None:
        pod_spec["priorityClassName"] = placement.priority_class_name
    if placement.service_account_name is not None:
        pod_spec["serviceAccountName"] = placement.service_account_name
    return {
        "metadata": {
            "labels": {**placement.pod_labels, **labels},
            "annotations": {
                **placement.pod_annotations,
                **annotations,
                # The engines serve Prometheus metrics on the API port.
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(HTTP_PORT),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": pod_spec,
    }


def _resources(spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """CPU and memory as given, `DEFAULT_REQUESTS` for a resource given neither a request nor a
    limit (a limit alone is its request too); the accelerator devices of one pod: count x
    the parallel sizes on one node, topology.acceleratorsPerNode in a group."""
    resource = PRESETS[spec.accelerator.kind].resource
    devices = str(
        spec.layout.devices_per_pod(spec.accelerator.count, spec.engine.tensor_parallel_size)
    )
    given = spec.resources.to_kube() if spec.resources is not None else {}
    named = {*given.get("requests", {}), *given.get("limits", {})}
    defaults = {k: v for k, v in DEFAULT_REQUESTS.items() if k not in named}
    return {
        "requests": {**defaults, **given.get("requests", {}), resource: devices},
        "limits": {**given.get("limits", {}), resource: devices},
    }


def _health_probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _service(metadata: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
