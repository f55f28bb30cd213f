"""The operator's life around a rollout: a restart mid-canary, drift reverted, deletion with
and without the operator, its metrics, and the least privilege it runs with."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from infergate.render.launch import HTTP_PORT
from infergate.render.mirror import CONTROL_PORT
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    idep_namespace,
    operator,
)

pytestmark = pytest.mark.cluster
__all__ = ["idep_namespace", "operator"]


def test_restart_in_the_middle_of_a_canary_reaches_the_same_outcome(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.wait_phase("Verifying")

    operator.scale(0)  # the verdict arrives while no operator runs
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    assert idep.status()["canaryRevision"] == canary
    operator.scale(1)

    idep.wait("promotion after the restart", lambda s: s.get("stableRevision") == canary)
    idep.wait("old stable scaled down", lambda _: idep.revisions() == {stable: 0, canary: 2})
    # One check for the canary, not a second one made by the new process.
    checks = cluster.get_json("pcheck", "-n", idep_namespace)["items"]
    assert [c["metadata"]["name"] for c in checks] == [f"qwen-{canary}"]

    idep.apply(dtype="float32")
    third, check = idep.wait_check()
    operator.restart()  # killed with a canary under check
    idep.verdict(check["metadata"]["name"], "Failed", passed=False)
    status = idep.wait_phase("RolledBack")
    assert status["stableRevision"] == canary
    assert {r["hash"]: r for r in status["revisions"]}[third]["rejected"] is True


def _container(cluster: Cluster, namespace: str, deployment: str) -> dict:
    body = cluster.get_json("deployment", deployment, "-n", namespace)
    return body["spec"]["template"]["spec"]["containers"][0]


def test_edits_of_owned_objects_are_reverted_and_reported(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    deployment = f"qwen-{stable}"
    image = _container(cluster, idep_namespace, deployment)["image"]

    cluster.kubectl(
        "set", "image", f"deployment/{deployment}", "-n", idep_namespace,
        "engine=vllm/vllm-openai:v9.9.9",
    )  # fmt: skip
    wait_for(
        lambda: _container(cluster, idep_namespace, deployment)["image"] == image,
        30,
        "the image edit to be reverted",
    )
    drifted = idep.condition("ConfigDrifted")
    assert drifted["status"] == "True"
    assert drifted["reason"] == "DriftReverted"
    assert "image" in drifted["message"]
    event = idep.wait_event("DriftReverted")
    assert event["type"] == "Warning"
    assert "spec.template.spec.containers[engine].image" in event["message"]
    assert "v9.9.9" in event["message"]

    cluster.kubectl("set", "env", f"deployment/{deployment}", "-n", idep_namespace, "VLLM_X=1")
    cluster.kubectl("scale", f"deployment/{deployment}", "-n", idep_namespace, "--replicas=5")
    wait_for(
        lambda: (
            cluster.get_json("deployment", deployment, "-n", idep_namespace)["spec"]["replicas"]
            == 2
            and all(
                e["name"] != "VLLM_X"
                for e in _container(cluster, idep_namespace, deployment).get("env", [])
            )
        ),
        30,
        "the env and replicas edits to be reverted",
    )
    messages = " ".join(e["message"] for e in idep.events() if e["reason"] == "DriftReverted")
    assert "spec.replicas" in messages
    assert "containers[engine].env" in messages

    # The pinned config cannot be edited in place (immutable) ...
    refused = cluster.kubectl(
        "patch", "configmap", deployment, "-n", idep_namespace, "--type=merge",
        "-p", '{"data":{"engine.json":"{}"}}', check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "immutable" in refused.stderr
    # ... and one replaced while no operator runs is replaced back when it returns.
    operator.scale(0)
    config_map = cluster.get_json("configmap", deployment, "-n", idep_namespace)
    pinned = config_map["data"]["engine.json"]
    config = json.loads(pinned)
    config["dtype"] = "float16"
    config_map["data"]["engine.json"] = json.dumps(config)
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        config_map["metadata"].pop(key, None)
    cluster.kubectl(
        "replace", "--force", "-f", "-", "-n", idep_namespace, input=json.dumps(config_map)
    )
    operator.scale(1)
    wait_for(
        lambda: (
            cluster.get_json("configmap", deployment, "-n", idep_namespace)["data"]["engine.json"]
            == pinned
        ),
        30,
        "the pinned config to be restored",
    )
    wait_for(
        lambda: any(
            "data.engine.json" in e["message"]
            for e in idep.events()
            if e["reason"] == "DriftReverted"
        ),
        30,
        "a DriftReverted Event naming data.engine.json",
    )


def _owned(cluster: Cluster, namespace: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind in ("deployments", "services", "configmaps", "paritychecks"):
        items = cluster.get_json(kind, "-n", namespace, "-l", "infergate.io/deployment=qwen")[
            "items"
        ]
        found[kind] = [i["metadata"]["name"] for i in items]
    return found


@pytest.mark.parametrize("operator_running", [True, False], ids=["operator-up", "operator-down"])
def test_deletion_takes_everything_owned_with_it(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall, operator_running: bool
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    idep.wait_stable()
    idep.apply(dtype="float16")
    idep.wait_check()
    owned = _owned(cluster, idep_namespace)
    assert all(owned.values()), owned
    assert not idep.get()["metadata"].get("finalizers")

    if not operator_running:
        operator.scale(0)
    try:
        cluster.kubectl("delete", "idep", "qwen", "-n", idep_namespace, "--timeout=30s")
        wait_for(
            lambda: not any(_owned(cluster, idep_namespace).values()),
            60,
            "garbage collection of everything qwen owned",
        )
    finally:
        if not operator_running:
            operator.scale(1)


def test_the_mirrors_control_port_is_fenced_and_the_fence_goes_with_the_mirror(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    """The mirror's NetworkPolicy as the API server stores it (the local cluster runs no
    network plugin that enforces it): clients reach `http`, only the parity runner pods of
    the namespace's checks (in the runner namespace, the operator's) reach `control`;
    opened by hand, it is closed again; it goes with the mirror."""
    manifest = deployment_manifest()
    rollout = manifest["spec"]["rollout"]
    idep = Idep(cluster, idep_namespace, manifest)
    idep.apply(rollout={**rollout, "mirror": {"replicas": 1}})
    name = "qwen-mirror"

    def stored() -> dict[str, Any] | None:
        found = cluster.kubectl(
            "get", "networkpolicy", name, "-n", idep_namespace, "-o", "json", check=False
        )
        return json.loads(found.stdout) if found.returncode == 0 else None

    policy = wait_for(stored, 60, "the mirror's NetworkPolicy")
    mirror = cluster.get_json("deployment", name, "-n", idep_namespace)
    pod_labels = mirror["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"] == {"matchLabels": pod_labels}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    http, control = policy["spec"]["ingress"]
    assert http == {"ports": [{"protocol": "TCP", "port": HTTP_PORT}]}
    assert control["ports"] == [{"protocol": "TCP", "port": CONTROL_PORT}]
    runners = {
        "app.kubernetes.io/managed-by": "infergate",
        "app.kubernetes.io/component": "parity-runner",
        "infergate.io/paritycheck-role": "runner",
        "infergate.io/paritycheck-namespace": idep_namespace,
    }
    assert control["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": operator.namespace}
            },
            "podSelector": {"matchLabels": runners},
        }
    ]
    [owner] = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("InferenceDeployment", idep.get()["metadata"]["uid"])

    cluster.kubectl(
        "patch", "networkpolicy", name, "-n", idep_namespace, "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/ingress/1/from"}]',
    )  # fmt: skip
    wait_for(
        lambda: (found := stored()) is not None and found["spec"]["ingress"] == [http, control],
        30,
        "the control port closed again",
    )

    idep.apply(rollout=rollout)
    wait_for(lambda: stored() is None, 60, "the mirror's NetworkPolicy removed with the mirror")


def _sample(metrics: str, metric: str, **labels: str) -> float | None:
    for line in metrics.splitlines():
        if not line.startswith(metric + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_tell_phase_promotions_rollbacks_and_verdicts(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    idep.wait_stable()
    idep.apply(dtype="float16")
    _, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait_phase("Stable")
    idep.apply(dtype="float32")
    _, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Failed", passed=False)
    idep.wait_phase("RolledBack")

    ours = {"namespace": idep_namespace, "name": "qwen"}

    def scraped() -> str | None:
        text = operator.metrics()
        phase = _sample(text, "infergate_rollout_phase", **ours, phase="RolledBack")
        return text if phase == 1.0 else None

    text = wait_for(scraped, 30, "the RolledBack phase in /metrics")
    assert _sample(text, "infergate_rollout_phase", **ours, phase="Stable") == 0.0
    assert _sample(text, "infergate_promotions_total", **ours, reason="ParityPassed") == 1.0
    assert _sample(text, "infergate_rollbacks_total", **ours, reason="ParityFailed") == 1.0
    assert _sample(text, "infergate_parity_verdicts_total", **ours, outcome="Passed") == 1.0
    assert _sample(text, "infergate_parity_verdicts_total", **ours, outcome="Failed") == 1.0
    assert _sample(text, "infergate_revisions", **ours) == 3.0
    count = _sample(text, "infergate_reconcile_duration_seconds_count", result="ok")
    assert count is not None
    assert count > 0
    assert "infergate_api_errors_total" in text


@pytest.mark.parametrize(
    ("ask", "allowed"),
    [
        # `patch x/status` would ask about an object named "status": name the subresource.
        (("update", "inferencedeployments.infergate.io", "--subresource=status"), True),
        (("patch", "inferencedeployments.infergate.io", "--subresource=status"), False),
        (("create", "paritychecks.infergate.io"), True),
        (("create", "deployments.apps"), True),
        (("update", "inferencedeployments.infergate.io"), False),  # never the spec
        (("delete", "inferencedeployments.infergate.io"), False),
        (("create", "pods"), True),  # hidden-state probes (the ParityCheck controller's role)
        (("get", "secrets"), False),
        (("create", "jobs.batch"), True),  # runner Jobs (the ParityCheck controller's role)
        (("create", "clusterroles.rbac.authorization.k8s.io"), False),
    ],
)
def test_operator_runs_with_least_privilege(
    cluster: Cluster, operator: OperatorInstall, ask: tuple[str, ...], allowed: bool
) -> None:
    pod = operator.wait_ready()
    assert pod["spec"]["serviceAccountName"] == "infergate-operator"
    answer = cluster.kubectl(
        "auth", "can-i", *ask, "-n", "default", f"--as={operator.service_account}", check=False
    )
    assert answer.stdout.strip() == ("yes" if allowed else "no")
