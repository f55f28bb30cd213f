"""End-to-end support: the operator installed from manifests/, engines as pods, checks.

The operator runs as a pod on the local executor, under the ServiceAccount and the
cluster roles of manifests/operator and manifests/runner (a missing permission fails
a test), limited to this session's namespaces (`e2e-<session>-*`) so it never touches
other people's objects. Engine pods run for real on the executor; the runner Job too.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.fixture.generate import default_model_dir, is_complete
from infergate.render.check_names import runner_account_name
from infergate.runner.report_store import read_report
from tests.harness import REPO, Cluster, apply_crds, install_for_session, wait_for

MANIFEST_DIRS = (REPO / "manifests" / "operator", REPO / "manifests" / "runner")
TERMINAL = ("Passed", "Failed", "Inconclusive", "Error")
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
MODEL_NAME = "fixture"


def fixture_model() -> Path:
    """The cached fixture model (`make engines` makes it); the test fails without it."""
    model = default_model_dir()
    if not is_complete(model):
        pytest.fail(f"fixture model missing at {model}: run `make engines`")
    return model


@dataclass
class Operator:
    cluster: Cluster
    session: str
    namespace: str
    cluster_roles: tuple[str, ...]

    @property
    def pattern(self) -> str:
        return f"e2e-{self.session}-*"

    def pod(self) -> dict[str, Any] | None:
        pods = self.cluster.get_json(
            "pods", "-n", self.namespace, "-l", "app.kubernetes.io/name=infergate-operator"
        )["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None

    def wait_ready(self, timeout: float = 180) -> None:
        def ready() -> bool:
            conditions = ((self.pod() or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_for(ready, timeout, "the operator pod to be Ready")

    def restart(self, timeout: float = 180) -> None:
        """Delete the operator pod and wait until its replacement (another pod) is Ready."""
        pod = self.pod()
        assert pod is not None, "no operator pod to restart"
        old = pod["metadata"]["uid"]
        self.cluster.kubectl(
            "delete", "pod", "-n", self.namespace, pod["metadata"]["name"], "--wait=true"
        )
        wait_for(
            lambda: (self.pod() or {"metadata": {"uid": old}})["metadata"]["uid"] != old,
            timeout,
            "a new operator pod",
        )
        self.wait_ready(timeout)

    def log(self) -> str:
        pod = self.pod()
        return (
            ""
            if pod is None
            else self.cluster.pod_log(self.namespace, pod["metadata"]["name"], "operator")
        )


def install_operator(cluster: Cluster, extra_args: Sequence[str] = ()) -> Iterator[Operator]:
    """An operator of its own session (`e2e-<session>-*` namespaces) started with the usual
    arguments and `extra_args` (a golden store, another host directory for file:// models)."""
    apply_crds(cluster)
    documents = []
    for directory in MANIFEST_DIRS:
        built = cluster.kubectl("kustomize", str(directory)).stdout
        documents += [d for d in yaml.safe_load_all(built) if d]
    session = uuid.uuid4().hex[:6]
    renamed = install_for_session(
        documents,
        namespace=f"infergate-e2e-{session}",
        cluster_role=lambda name: f"{name}-e2e-{session}",
        operator_args=[
            f"--namespace=e2e-{session}-*",
            "--resync-seconds=2",
            # The fixture model is a file:// model in the cache: the one directory allowed.
            f"--allow-host-path={default_model_dir().parent}",
            *extra_args,
        ],
    )
    operator = Operator(
        cluster=cluster,
        session=session,
        namespace=f"infergate-e2e-{session}",
        cluster_roles=tuple(d["metadata"]["name"] for d in renamed if d["kind"] == "ClusterRole"),
    )
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in renamed))
    try:
        operator.wait_ready()
        yield operator
    finally:
        cluster.kubectl("delete", "namespace", operator.namespace, "--wait=false", check=False)
        for role in operator.cluster_roles:
            cluster.kubectl("delete", "clusterrolebinding", role, check=False)
            cluster.kubectl("delete", "clusterrole", role, check=False)


# -- engines as plain pods -----------------------------------------------------------------


def adapter_pod(
    name: str,
    *,
    engine: str = "transformers",
    dtype: str = "float32",
    config: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Our adapter server (transformers from the vLLM venv) as a pod on the executor."""
    model = str(fixture_model())
    args = [
        "--engine",
        engine,
        "--model",
        model,
        "--dtype",
        dtype,
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "$(POD_IP)",
        "--port",
        "8000",
    ]
    for key, value in (config or {}).items():
        args += ["--config", f"{key}={value}"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": VLLM_IMAGE,
                    "command": ["python", "-m", "infergate.commands.serve"],
                    "args": args,
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": "http"},
                        "periodSeconds": 2,
                    },
                    "volumeMounts": [{"name": "model", "mountPath": model, "readOnly": True}],
                }
            ],
            "volumes": [{"name": "model", "hostPath": {"path": model, "type": "Directory"}}],
        },
    }


def wait_pod_ready(
    cluster: Cluster, namespace: str, name: str, timeout: float = 300
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = cluster.get_json("pod", name, "-n", namespace)
        conditions = (pod.get("status") or {}).get("conditions") or []
        return (
            pod if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None
        )

    try:
        return wait_for(ready, timeout, f"pod {namespace}/{name} to be Ready", interval=1.0)
    except AssertionError as err:
        raise AssertionError(
            f"{err}\nlog:\n{cluster.pod_log(namespace, name, 'engine')[-3000:]}"
        ) from None


# -- checks --------------------------------------------------------------------------------


def check_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The check's status; empty while the operator has not created the check yet."""
    result = cluster.kubectl(
        "get", "paritychecks.infergate.io", name, "-n", namespace, "-o", "json",
        "--ignore-not-found",
    )  # fmt: skip
    if not result.stdout.strip():
        return {}
    status: dict[str, Any] = json.loads(result.stdout).get("status") or {}
    return status


def wait_check_ended(cluster: Cluster, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        status = check_status(cluster, namespace, name)
        return status if status.get("phase") in TERMINAL else None

    return wait_for(ended, timeout, f"ParityCheck {namespace}/{name} to end", interval=1.0)


def report(cluster: Cluster, namespace: str, status: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A check's HTML report and result document, from the ConfigMap its status names."""
    ref = status["reportRef"]
    config_map = cluster.get_json("configmap", ref["name"], "-n", namespace)
    # Plain or gzip-compressed, as the runner stored them (runner/report_store.py).
    documents = read_report(config_map.get("data"), config_map.get("binaryData"))
    return documents["report.html"], json.loads(documents["result.json"])


def runner_log(cluster: Cluster, namespace: str) -> str:
    """The runner logs of the checks of `namespace`: their pods run in the runner namespace
    (the operator's), named after each check's uid."""
    listed = cluster.kubectl(
        "get", "paritychecks.infergate.io", "-n", namespace, "-o", "json", check=False
    )
    items = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
    pods = cluster.layout.logs / "pods"
    logs = sorted(
        path
        for check in items
        for path in pods.glob(f"*_{runner_account_name(check['metadata']['uid'])}-*_runner.log")
    )
    return "\n".join(p.read_text(errors="replace") for p in logs)


class Stopwatch:
    """Wall time of the steps of a test, printed at the end (pytest -s shows it)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, what: str) -> None:
        self.marks.append((what, time.monotonic() - self.start))
        print(f"[e2e {time.monotonic() - self.start:7.1f}s] {what}", flush=True)  # noqa: T201
