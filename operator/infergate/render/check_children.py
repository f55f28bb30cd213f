"""What a ParityCheck starts, as manifests (pure): probe Pods and Services, the runner Job,
its least-privilege ServiceAccount, Role and RoleBinding, the NetworkPolicy that confines
it, and the empty report ConfigMap.

Probes, the report and the runner's Role and RoleBinding live in the check's namespace,
owned by the check (garbage-collected with it) and labelled with it. The runner's Job,
ServiceAccount and NetworkPolicy live in the runner namespace (the operator's), which
no tenant can write to: a namespace's users could otherwise mint the runner's token
(`kubectl create token`), run a pod as it, or read what its pod is given, and so write
any verdict. Owner references cannot cross namespaces: these carry the check's
namespace, name and uid as labels (`check_names.runner_labels`), and the controller
deletes them (`plan.check.cleanup`).

A probe serves the last-layer hidden states of a vLLM revision: the revision's own pod
template (same image, same pinned flags, same accelerator, node selection and
tolerations) with vLLM's pooling runner switched on, our fingerprint server beside it,
and, where it can run, the transformers stand-in that answers the per-layer probe for
vLLM (`render.layer_stand_in`). It carries only probe labels, so neither the revision's
Service nor the stable Service ever sends it traffic.

The runner's Role names every object it may read (`resourceNames`), and may write only
its own check's status and its own report ConfigMap: a compromised runner can neither
read other ConfigMaps nor change any rollout. Its RoleBinding names the runner's
ServiceAccount in the runner namespace (a subject may be another namespace's account).

Its NetworkPolicy admits no traffic to it and lets it open connections only to the pods
of the two revisions it compares and of their probes (by their namespace and labels, on
the engine port), to the API server (the addresses the operator is given) and to the
cluster DNS. A side given as an `endpoint` URL gets no rule: a check's author could
otherwise aim the runner at any address; a cluster administrator who wants such a check
to run adds a NetworkPolicy of their own in the runner namespace selecting that check's
runner pods (policies add up).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.api.base import (
    API_VERSION,
    GROUP,
    INFERENCE_DEPLOYMENTS_PLURAL,
    PARITY_CHECK_KIND,
    PARITY_CHECKS_PLURAL,
)
from infergate.api.golden import GoldenSpec
from infergate.api.parity_check import RUNNER_CONCURRENCY_DEFAULT
from infergate.golden.settings import GOLDEN_CONFIG_ENV, GOLDEN_MOUNT_PATH
from infergate.jsontypes import JSON
from infergate.render.check_names import (
    LABEL_SIDE,
    ROLE_PROBE,
    ROLE_RUNNER,
    SideName,
    child_labels,
    probe_name,
    report_name,
    runner_account_name,
    runner_labels,
    runner_name,
)
from infergate.render.images import pull_secret_refs
from infergate.render.launch import CONFIG_PATH, POD_IP_REF
from infergate.render.layer_stand_in import (
    ANNOTATION_LAYER_STAND_IN,
    LAYERS_PORT,
    LAYERS_PORT_NAME,
    StandInDecision,
    stand_in_container,
)
from infergate.render.network import Peer
from infergate.render.objects import SHM_VOLUME
from infergate.render.vllm import pooling_args

RUNNER_CONTAINER = "runner"
_GOLDEN_VOLUME = "golden"
_RUNNER_UID = 1000
_SCRATCH_VOLUME = "scratch"
_SCRATCH_PATH = "/var/lib/infergate/scratch"
"""The runner's TMPDIR when it keeps golden records: an emptyDir (the root is read-only)."""
PROBE_CONTAINER = "engine"
_RUNNER_RESOURCES: JSON = {
    "requests": {"cpu": "100m", "memory": "512Mi"},
    "limits": {"memory": "4Gi"},
}
# A finished runner's Job (and its log) is kept this long, then removed by the TTL controller.
_FINISHED_JOB_TTL = 3600


def owner_reference(check: Mapping[str, Any]) -> JSON:
    """The check as the controlling owner of a child."""
    meta = check["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": PARITY_CHECK_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(check: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> JSON:
    return {
        "name": name,
        "namespace": check["metadata"]["namespace"],
        "labels": dict(labels),
        "ownerReferences": [owner_reference(check)],
    }


def _runner_labels(check: Mapping[str, Any]) -> dict[str, str]:
    meta = check["metadata"]
    return runner_labels(meta["namespace"], meta["name"], meta["uid"])


def _runner_metadata(check: Mapping[str, Any], runner_namespace: str) -> JSON:
    """Metadata of a runner object in the runner namespace: no owner reference (it cannot
    name an owner in another namespace), the check's identity in its labels."""
    return {
        "name": runner_account_name(check["metadata"]["uid"]),
        "namespace": runner_namespace,
        "labels": _runner_labels(check),
    }


FINGERPRINT_CONTAINER = "fingerprints"
FINGERPRINT_PORT = 8001


def _fingerprint_container(engine: Mapping[str, Any], image: str) -> JSON:
    """Our fingerprint server beside a vLLM side: it reads the revision's pinned engine.json
    and the very model directory the engine mounts, and serves what they hold."""
    mounts = [m for m in engine.get("volumeMounts") or [] if m.get("name") != SHM_VOLUME]
    return {
        "name": FINGERPRINT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["infergate"],
        "args": [
            "fingerprints",
            "--engine-config",
            CONFIG_PATH,
            "--host",
            POD_IP_REF,
            "--port",
            str(FINGERPRINT_PORT),
        ],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "fingerprints", "containerPort": FINGERPRINT_PORT, "protocol": "TCP"}],
        "volumeMounts": [{**m, "readOnly": True} for m in mounts],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "fingerprints"},
            "periodSeconds": 5,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def probe_pod(
    check: Mapping[str, Any],
    side: SideName,
    revision_deployment: Mapping[str, Any],
    *,
    hidden_states: bool = True,
    fingerprint_image: str,
    stand_in: StandInDecision | None = None,
    pull_secrets: Sequence[str] = (),
) -> JSON:
    """The probe of one vLLM side, from its revision's Deployment: the same pod template,
    with (for hidden states) the engine switched to vLLM's pooling runner, and beside it
    our fingerprint server and (`stand_in` with an image) the transformers stand-in that
    answers the layer probe (`render.layer_stand_in`). Without hidden states the engine
    does not run, and the pod requests no accelerator."""
    name = check["metadata"]["name"]
    template = copy.deepcopy(revision_deployment["spec"]["template"])
    spec: JSON = template["spec"]
    containers = spec["containers"]
    engine = next((c for c in containers if c.get("name") == PROBE_CONTAINER), containers[0])
    sidecars = [_fingerprint_container(engine, fingerprint_image)]
    if stand_in is not None and stand_in.image is not None:
        sidecars.append(stand_in_container(engine, stand_in.image))
    if hidden_states:
        engine["args"] = pooling_args(engine.get("args") or [])
        spec["containers"] = [engine, *sidecars]
    else:
        spec["containers"] = sidecars
    labels = {**child_labels(name, ROLE_PROBE), LABEL_SIDE: side}
    annotations = {
        k: v
        for k, v in (template.get("metadata") or {}).get("annotations", {}).items()
        if not k.startswith("prometheus.io/")
    }
    annotations[f"{GROUP}/probe-of"] = revision_deployment["metadata"]["name"]
    spec["restartPolicy"] = "Always"
    # The engine's pull secrets (placement), and the operator's for its own image.
    secrets = [s["name"] for s in spec.get("imagePullSecrets") or []]
    secrets += [name for name in pull_secrets if name not in secrets]
    if secrets:
        spec["imagePullSecrets"] = pull_secret_refs(secrets)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **_metadata(check, probe_name(name, side), labels),
            "annotations": annotations,
        },
        "spec": spec,
    }


def probe_service(
    check: Mapping[str, Any],
    side: SideName,
    port: int,
    *,
    hidden_states: bool = True,
    stand_in: StandInDecision | None = None,
) -> JSON:
    """The Service the runner resolves a probe by (its EndpointSlices, like any side); with
    `stand_in`, its layers port when the stand-in runs and an annotation saying whether
    it does, or why not (the runner reads it into the report)."""
    name = check["metadata"]["name"]
    labels = {**child_labels(name, ROLE_PROBE), LABEL_SIDE: side}
    ports = [
        {
            "name": "fingerprints",
            "port": FINGERPRINT_PORT,
            "targetPort": "fingerprints",
            "protocol": "TCP",
        }
    ]
    if hidden_states:
        ports.insert(0, {"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"})
    metadata = _metadata(check, probe_name(name, side), labels)
    if stand_in is not None:
        metadata["annotations"] = {ANNOTATION_LAYER_STAND_IN: stand_in.annotation}
        if stand_in.image is not None:
            ports.append(
                {
                    "name": LAYERS_PORT_NAME,
                    "port": LAYERS_PORT,
                    "targetPort": LAYERS_PORT_NAME,
                    "protocol": "TCP",
                }
            )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": "ClusterIP", "selector": labels, "ports": ports},
    }


def report_config_map(check: Mapping[str, Any]) -> JSON:
    """The (empty) report ConfigMap, made before the runner starts so its Role can name it."""
    name = check["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(check, report_name(name), child_labels(name, "report")),
        "data": {},
    }


def _rule(
    group: str, resource: str, verbs: list[str], names: Sequence[str] | None = None
) -> JSON | None:
    rule: JSON = {"apiGroups": [group], "resources": [resource], "verbs": verbs}
    if names is not None:
        unique = sorted({n for n in names if n})
        if not unique:
            return None  # an empty resourceNames would grant every object
        rule["resourceNames"] = unique
    return rule


def runner_rbac(
    check: Mapping[str, Any],
    *,
    runner_namespace: str,
    deployments: Sequence[str],
    services: Sequence[str],
    config_maps: Sequence[str],
    list_deployments: bool = False,
    account_annotations: Mapping[str, str] | None = None,
    pull_secrets: Sequence[str] = (),
) -> list[JSON]:
    """ServiceAccount of the runner (in `runner_namespace`), and the Role and RoleBinding
    in the check's namespace that grant it only what this check needs.

    `list_deployments`: the runner may list the namespace's InferenceDeployments, which
    golden-record retention under `whenDeleted: Delete` needs to tell a deleted deployment
    from one still there (a list cannot be narrowed to names). `account_annotations` and
    `pull_secrets` come from the operator's install (`--runner-service-account-annotation`,
    `--image-pull-secret`): a cloud identity for the golden store (IRSA's
    eks.amazonaws.com/role-arn) and the registry credentials of infergate's image.
    """
    name = check["metadata"]["name"]
    role_name = runner_name(name)
    account = runner_account_name(check["metadata"]["uid"])
    labels = child_labels(name, ROLE_RUNNER)
    report = report_name(name)
    rules = [
        _rule(GROUP, PARITY_CHECKS_PLURAL, ["get"], [name]),
        _rule(GROUP, f"{PARITY_CHECKS_PLURAL}/status", ["patch", "update"], [name]),
        _rule(GROUP, INFERENCE_DEPLOYMENTS_PLURAL, ["get"], deployments),
        _rule(GROUP, INFERENCE_DEPLOYMENTS_PLURAL, ["list"]) if list_deployments else None,
        _rule("", "services", ["get"], services),
        _rule("discovery.k8s.io", "endpointslices", ["list"]),
        # An endpoint is called only when its pod, and the ReplicaSet that made it, are
        # the side's own (runner.side_pods); their names are known only once published.
        _rule("", "pods", ["get"]),
        _rule("apps", "replicasets", ["get"]),
        # A multi-node revision's leaders: made by its LeaderWorkerSet's StatefulSet.
        _rule("apps", "statefulsets", ["get"]),
        _rule("", "configmaps", ["get"], [*config_maps, report]),
        _rule("", "configmaps", ["patch"], [report]),
    ]
    service_account: JSON = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _runner_metadata(check, runner_namespace),
        "automountServiceAccountToken": True,
    }
    if account_annotations:
        service_account["metadata"]["annotations"] = dict(account_annotations)
    if pull_secrets:
        service_account["imagePullSecrets"] = pull_secret_refs(pull_secrets)
    return [
        service_account,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(check, role_name, labels),
            "rules": [r for r in rules if r is not None],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(check, role_name, labels),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": role_name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": runner_namespace}
            ],
        },
    ]


# Set by the API server on every Namespace (v1.22+): a namespaceSelector a tenant cannot fake.
_NAMESPACE_NAME = "kubernetes.io/metadata.name"
# The cluster DNS: CoreDNS (and kube-dns before it) pods carry k8s-app=kube-dns in
# kube-system on kubeadm, kind, EKS, GKE and AKS alike.
_DNS_PEER: JSON = {
    "namespaceSelector": {"matchLabels": {_NAMESPACE_NAME: "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def runner_network_policy(
    check: Mapping[str, Any], peers: Sequence[Peer], *, runner_namespace: str
) -> JSON:
    """The runner pods' NetworkPolicy, in `runner_namespace`: no ingress; egress to `peers`
    (pods of the check's namespace by their labels, or address blocks) and the cluster DNS."""
    namespace = check["metadata"]["namespace"]
    egress: list[JSON] = []
    for peer in peers:
        target: JSON = (
            {
                "namespaceSelector": {"matchLabels": {_NAMESPACE_NAME: namespace}},
                "podSelector": {"matchLabels": dict(peer.pods)},
            }
            if peer.pods is not None
            else {"ipBlock": {"cidr": peer.cidr}}
        )
        egress.append({"to": [target], "ports": [{"protocol": "TCP", "port": peer.port}]})
    egress.append(
        {
            "to": [_DNS_PEER],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _runner_metadata(check, runner_namespace),
        "spec": {
            "podSelector": {"matchLabels": _runner_labels(check)},
            "policyTypes": ["Ingress", "Egress"],
            "egress": egress,
        },
    }


@dataclass(frozen=True)
class RunnerSettings:
    """What the runner Job is rendered with (from the check's spec.runner)."""

    active_deadline_seconds: int
    backoff_limit: int
    resources: Mapping[str, Any] | None = None
    concurrency: int = RUNNER_CONCURRENCY_DEFAULT


def runner_job(
    check: Mapping[str, Any],
    runner: RunnerSettings,
    *,
    image: str,
    runner_namespace: str,
    previous_report: str | None = None,
    golden: GoldenSpec | None = None,
    pull_secrets: Sequence[str] = (),
) -> JSON:
    """The runner Job, in `runner_namespace`: `infergate parity run --check NS/NAME` under
    the check's own account there. Its image is the operator's (`image`), never the
    check's: a ParityCheck sets only the runner's resources, deadline, retries and
    concurrency (`RunnerSettings`), nothing that chooses what runs as its identity.

    With the operator's golden store (`golden`), the Job also gets the store's settings
    as JSON, the claim mounted at GOLDEN_MOUNT_PATH or the S3 Secret's keys as env (the
    claim and the Secret are the runner namespace's, out of the tenants' reach), and a
    scratch TMPDIR (the root filesystem is read-only; S3 records are staged there).
    """
    meta = check["metadata"]
    name = meta["name"]
    labels = _runner_labels(check)
    args = ["parity", "run", "--check", f"{meta['namespace']}/{name}"]
    args += ["--concurrency", str(runner.concurrency)]
    if previous_report:
        args += ["--previous-report", previous_report]
    resources = dict(runner.resources) if runner.resources else _RUNNER_RESOURCES
    env, volumes, mounts = _golden_wiring(golden)
    container: JSON = {
        "name": RUNNER_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["infergate"],
        "args": args,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *env],
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod: JSON = {
        "serviceAccountName": runner_account_name(meta["uid"]),
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": _RUNNER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    if volumes:
        container["volumeMounts"] = mounts
        pod["volumes"] = volumes
    if pull_secrets:
        # Also on its ServiceAccount; here too, so no pod depends on which came first.
        pod["imagePullSecrets"] = pull_secret_refs(pull_secrets)
    if golden is not None and golden.store.pvc is not None:
        # The runner (uid 1000) writes to the claim: its files belong to that group.
        pod["securityContext"]["fsGroup"] = _RUNNER_UID
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _runner_metadata(check, runner_namespace),
        "spec": {
            "backoffLimit": runner.backoff_limit,
            "activeDeadlineSeconds": runner.active_deadline_seconds,
            "ttlSecondsAfterFinished": _FINISHED_JOB_TTL,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _golden_wiring(golden: GoldenSpec | None) -> tuple[list[JSON], list[JSON], list[JSON]]:
    """Env entries, volumes and mounts that hand the operator's golden store to the runner."""
    if golden is None:
        return [], [], []
    env: list[JSON] = [
        {"name": GOLDEN_CONFIG_ENV, "value": json.dumps(golden.to_kube(), sort_keys=True)},
        {"name": "TMPDIR", "value": _SCRATCH_PATH},
    ]
    volumes: list[JSON] = [{"name": _SCRATCH_VOLUME, "emptyDir": {}}]
    mounts: list[JSON] = [{"name": _SCRATCH_VOLUME, "mountPath": _SCRATCH_PATH}]
    store = golden.store
    if store.pvc is not None:
        volumes.append(
            {
                "name": _GOLDEN_VOLUME,
                "persistentVolumeClaim": {"claimName": store.pvc.claim_name},
            }
        )
        mounts.append({"name": _GOLDEN_VOLUME, "mountPath": GOLDEN_MOUNT_PATH})
    elif store.s3 is not None and store.s3.secret_ref is not None:
        # credentials: Secret. With Environment the runner's own environment (its
        # ServiceAccount's cloud identity) holds them: nothing to wire here.
        ref = store.s3.secret_ref
        for variable, key in (
            ("AWS_ACCESS_KEY_ID", ref.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", ref.secret_access_key_key),
        ):
            env.append(
                {
                    "name": variable,
                    "valueFrom": {"secretKeyRef": {"name": ref.name, "key": key}},
                }
            )
    return env, volumes, mounts
