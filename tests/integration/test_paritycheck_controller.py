"""The ParityCheck controller and the gate's binding on the real local cluster, with both
controllers running as the installed operator pod: what a check waits for, what it starts,
what it frees when it ends, and what it refuses to take for its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.plan.deployment.desired import revision_of
from infergate.render.check_names import runner_account_name
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    idep_namespace,
    operator,
    settle,
)

pytestmark = pytest.mark.cluster
__all__ = ["idep_namespace", "operator"]


def _check(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get_json("pcheck", name, "-n", namespace)
    return found


def _wait_check(
    cluster: Cluster,
    namespace: str,
    name: str,
    probe: Callable[[dict[str, Any]], bool],
    timeout: float,
    *,
    what: str,
) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        body = _check(cluster, namespace, name)
        return body if probe(body) else None

    return wait_for(seen, timeout, f"{name}: {what}")


def _condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(
        (c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_), {}
    )


def _labelled(cluster: Cluster, namespace: str, kind: str, check: str) -> list[str]:
    listed = cluster.get_json(kind, "-n", namespace, "-l", f"infergate.io/paritycheck={check}")
    return sorted(item["metadata"]["name"] for item in listed["items"])


def _runner_objects(
    cluster: Cluster, operator: OperatorInstall, kind: str, check: str, namespace: str
) -> list[str]:
    """The check's runner objects of `kind` in the runner namespace (the operator's)."""
    selector = f"infergate.io/paritycheck={check},infergate.io/paritycheck-namespace={namespace}"
    listed = cluster.get_json(kind, "-n", operator.namespace, "-l", selector)
    return sorted(item["metadata"]["name"] for item in listed["items"])


def _standalone(name: str, deployment: str) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": name},
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": deployment}},
            "candidate": {"inferenceDeploymentRef": {"name": deployment}},
            "suite": {"inline": [{"id": "p", "text": "hello"}]},
        },
    }


def test_a_check_waits_for_its_sides_and_says_which(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    cluster.apply(_standalone("waits", "missing"), idep_namespace)
    body = _wait_check(
        cluster,
        idep_namespace,
        "waits",
        lambda b: _condition(b, "Complete").get("reason") == "WaitingForSides",
        60,
        what="the check to say it waits for its sides",
    )
    assert body["status"]["phase"] == "Pending"
    assert "InferenceDeployment missing does not exist" in _condition(body, "Complete")["message"]
    assert _labelled(cluster, idep_namespace, "jobs", "waits") == []
    assert _runner_objects(cluster, operator, "jobs", "waits", idep_namespace) == []


def test_a_canary_check_starts_probes_and_runner_and_frees_them_when_it_ends(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    idep.wait_stable()
    idep.apply(dtype="float16")
    _, check = idep.wait_check()
    name = check["metadata"]["name"]
    # vLLM sides: a hidden-state probe each, then the runner under its own account, in the
    # runner namespace (the operator's), granted a Role in the check's namespace.
    runner = runner_account_name(check["metadata"]["uid"])
    wait_for(
        lambda: _runner_objects(cluster, operator, "jobs", name, idep_namespace),
        90,
        f"the runner Job of {name}",
    )
    assert _runner_objects(cluster, operator, "jobs", name, idep_namespace) == [runner]
    assert _runner_objects(cluster, operator, "serviceaccounts", name, idep_namespace) == [runner]
    assert _labelled(cluster, idep_namespace, "jobs", name) == []
    assert _labelled(cluster, idep_namespace, "serviceaccounts", name) == []
    assert _labelled(cluster, idep_namespace, "pods", name)
    assert _labelled(cluster, idep_namespace, "roles", name) == [f"{name}-runner"]
    binding = cluster.get_json("rolebinding", f"{name}-runner", "-n", idep_namespace)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": runner, "namespace": operator.namespace}
    ]
    pinned = _check(cluster, idep_namespace, name)["status"]
    assert pinned["candidateRevision"] == check["spec"]["candidate"]["revision"]
    assert pinned["runnerServiceAccount"]["name"] == runner
    _assert_runner_confined(cluster, idep_namespace, operator.namespace, name)

    idep.verdict(name, "Failed", passed=False)
    ended = _wait_check(
        cluster,
        idep_namespace,
        name,
        lambda b: _condition(b, "ResourcesReleased").get("status") == "True",
        60,
        what=f"{name} to release its children",
    )
    assert ended["status"]["phase"] == "Failed"
    wait_for(
        lambda: (
            not _labelled(cluster, idep_namespace, "roles", name)
            and not [
                p
                for p in _labelled(cluster, idep_namespace, "pods", name)
                if "probe" in p and not _terminating(cluster, idep_namespace, p)
            ]
        ),
        60,
        "probes and runner RBAC deleted",
    )
    assert not _runner_objects(cluster, operator, "serviceaccounts", name, idep_namespace)
    idep.wait_phase("RolledBack")
    # The runner was stopped; once its pod is gone, so is the policy that confined it.
    wait_for(
        lambda: not _runner_objects(cluster, operator, "networkpolicies", name, idep_namespace),
        90,
        "the runner's NetworkPolicy deleted",
    )


def test_a_deleted_checks_runner_objects_are_deleted_with_it(
    cluster: Cluster, idep_namespace: str, operator: OperatorInstall
) -> None:
    """Owner references cannot reach the runner namespace: the controller deletes the
    runner's Job, ServiceAccount and NetworkPolicy there when their check goes."""
    idep = Idep(cluster, idep_namespace, deployment_manifest(name="gone"))
    idep.apply()
    idep.wait_stable()
    check = _standalone("gone", "gone")
    check["spec"]["hiddenStates"] = {"enabled": False}
    cluster.apply(check, idep_namespace)
    wait_for(
        lambda: _runner_objects(cluster, operator, "jobs", "gone", idep_namespace),
        90,
        "the runner Job",
    )
    cluster.kubectl("delete", "pcheck", "gone", "-n", idep_namespace)
    wait_for(
        lambda: (
            not any(
                _runner_objects(cluster, operator, kind, "gone", idep_namespace)
                for kind in ("jobs", "serviceaccounts", "networkpolicies")
            )
        ),
        60,
        "the deleted check's runner objects deleted",
    )


def _pods(cluster: Cluster, namespace: str, labels: dict[str, str]) -> set[str]:
    """The pods a label selector picks, as the API server evaluates it."""
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    listed = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return {p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")}


def _assert_runner_confined(
    cluster: Cluster, namespace: str, runner_namespace: str, check: str
) -> None:
    """The runner's NetworkPolicy, as stored by the API server (no implementation enforces
    it on the local cluster): beside the runner in the runner namespace, it selects exactly
    the runner's pods, and its pod rules exactly the two sides' engine pods and probes of
    the check's namespace; the rest is the API server and DNS."""
    name = runner_account_name(_check(cluster, namespace, check)["metadata"]["uid"])
    policy = cluster.get_json("networkpolicy", name, "-n", runner_namespace)
    runner = wait_for(
        lambda: _pods(cluster, runner_namespace, {"job-name": name}), 60, "the runner pod"
    )
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert _pods(cluster, runner_namespace, selected) == runner
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert not policy["spec"].get("ingress")
    in_check_namespace = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    pod_rules = [
        peer["podSelector"]["matchLabels"]
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "podSelector" in peer and peer.get("namespaceSelector") == in_check_namespace
    ]
    reachable = set().union(*(_pods(cluster, namespace, labels) for labels in pod_rules))
    body = _check(cluster, namespace, check)
    sides = {body["spec"][side]["revision"] for side in ("baseline", "candidate")}
    engines = {
        p["metadata"]["name"]
        for p in cluster.get_json("pods", "-n", namespace, "-l", "infergate.io/revision")["items"]
        if p["metadata"]["labels"]["infergate.io/revision"] in sides
        and not p["metadata"].get("deletionTimestamp")
    }
    probes = {f"{check}-probe-baseline", f"{check}-probe-candidate"}
    assert reachable == engines | probes
    assert not reachable & runner
    blocks = [
        (peer["ipBlock"]["cidr"], rule["ports"][0]["port"])
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    ]
    server = urlsplit(
        yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    )
    # The executor gives pods the API server's own address as the kubernetes Service's.
    assert (f"{server.hostname}/32", server.port) in blocks


def _terminating(cluster: Cluster, namespace: str, pod: str) -> bool:
    found = cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
    return found.returncode != 0 or bool(
        json.loads(found.stdout)["metadata"].get("deletionTimestamp")
    )


def test_a_runner_role_made_by_someone_else_is_not_used_and_not_deleted(
    cluster: Cluster, idep_namespace: str
) -> None:
    """The runner's Role is made in the check's namespace, where its users may make one of
    that name first: it is neither used nor deleted, and the check says so. (The runner's
    Job and ServiceAccount live in the runner namespace, where they cannot.)"""
    foreign = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "borrowed-runner"},
        "rules": [],
    }
    cluster.apply(foreign, idep_namespace)
    idep = Idep(cluster, idep_namespace, deployment_manifest(name="borrowed"))
    idep.apply()
    idep.wait_stable()
    check = _standalone("borrowed", "borrowed")
    check["spec"]["hiddenStates"] = {"enabled": False}
    cluster.apply(check, idep_namespace)
    body = _wait_check(
        cluster,
        idep_namespace,
        "borrowed",
        lambda b: (b.get("status") or {}).get("phase") == "Error",
        90,
        what="the check to end in Error",
    )
    assert _condition(body, "Error")["reason"] == "ChildNotOurs"
    assert "Role borrowed-runner" in _condition(body, "Error")["message"]
    role = cluster.get_json("role", "borrowed-runner", "-n", idep_namespace)
    assert "ownerReferences" not in role["metadata"]  # untouched


def _stable_and_its_float16_revision(cluster: Cluster, namespace: str) -> tuple[Idep, str, str]:
    """The test deployment made stable, with that revision and the one a change of its dtype
    to float16 will make (not applied yet)."""
    manifest = deployment_manifest()
    idep = Idep(cluster, namespace, manifest)
    idep.apply()
    stable = idep.wait_stable()
    changed = json.loads(json.dumps(manifest["spec"]))
    changed["engine"]["dtype"] = "float16"
    return idep, stable, revision_of(InferenceDeploymentSpec.model_validate(changed))


def test_a_check_pre_created_under_the_canarys_name_is_not_adopted(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep, stable, canary = _stable_and_its_float16_revision(cluster, idep_namespace)
    squatter = _standalone(f"qwen-{canary}", "qwen")
    squatter["spec"]["baseline"]["revision"] = stable
    squatter["spec"]["candidate"]["revision"] = stable
    cluster.apply(squatter, idep_namespace)
    uid = _check(cluster, idep_namespace, f"qwen-{canary}")["metadata"]["uid"]
    idep.apply(dtype="float16")
    idep.wait(
        "the squatter reported",
        lambda s: any(c["reason"] == "CheckNotBound" for c in s.get("conditions", [])),
        90,
    )
    # Even a Passed written on it (by someone with status rights) promotes nothing.
    cluster.kubectl(
        "patch", "pcheck", f"qwen-{canary}", "-n", idep_namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"phase": "Passed",
        "verdict": {"passed": True, "outcome": "Passed"}}}),
    )  # fmt: skip
    settle()
    assert idep.status()["stableRevision"] == stable
    assert _check(cluster, idep_namespace, f"qwen-{canary}")["metadata"]["uid"] == uid


def test_a_phase_passed_without_a_bound_verdict_never_promotes(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True, bound=False)
    status = idep.wait_phase("RolledBack", timeout=60)
    assert status["stableRevision"] == stable
    record = {r["hash"]: r for r in status["revisions"]}[canary]
    assert record["verdict"] == "Error"
    assert idep.condition("ParityPassed")["reason"] == "CheckNotBound"
    assert idep.wait_event("CheckNotBound")["type"] == "Warning"


class _Described:
    """What the sides' engines say of themselves: the simulated pods never answer, so the
    runner is told that each serves our adapter (it then needs no probe of its own)."""

    def describe(self, url: str) -> Any:  # noqa: ARG002
        from infergate.runner.sides import EndpointDescription

        return EndpointDescription("vllm", "0.32.0", "bfloat16", effective_config={})

    def fingerprints(self, url: str) -> dict[str, Any]:  # noqa: ARG002
        return {}

    def probe_ids(self, url: str, model: str) -> list[int]:  # noqa: ARG002
        return []


def test_a_canary_configmap_someone_else_made_ends_the_check_in_error_and_keeps_the_stable(
    cluster: Cluster, idep_namespace: str
) -> None:
    """A tenant who may create ConfigMaps, not edit the InferenceDeployment, makes
    `qwen-<canary>` first, pinning what the stable pins. The operator leaves it alone
    (NameTaken); the parity runner, run here against the real API server (the runner Job
    the controller starts stays unscheduled), reads the stable's objects and the slices
    Kubernetes published for its pods, refuses the tenant's ConfigMap, and ends the check
    in Error, SideObjectNotOurs; the canary is rolled back, the stable untouched."""
    from infergate.kube.client import KubeClient, load_api_client
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.run import EXIT_DONE, Connector, RunOptions, run_check

    idep, stable, canary = _stable_and_its_float16_revision(cluster, idep_namespace)
    pinned = cluster.get_json("configmap", f"qwen-{stable}", "-n", idep_namespace)
    forged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"qwen-{canary}", "labels": dict(pinned["metadata"]["labels"])},
        "data": dict(pinned["data"]),
    }
    forged["metadata"]["labels"]["infergate.io/revision"] = canary
    cluster.apply(forged, idep_namespace)
    idep.apply(dtype="float16")
    assert idep.wait_check(timeout=90)[0] == canary
    name = f"qwen-{canary}"

    api = CheckClient(KubeClient(load_api_client(str(cluster.kubeconfig))), idep_namespace)
    options = RunOptions(wait_for_sides=60.0, progress_interval=0.0)
    connector = Connector(info=_Described())
    assert run_check(api, name, options, connector=connector) == EXIT_DONE

    body = _check(cluster, idep_namespace, name)
    assert body["status"]["phase"] == "Error"
    error = _condition(body, "Error")
    assert error["reason"] == "SideObjectNotOurs"
    assert (
        f"ConfigMap {idep_namespace}/qwen-{canary} is not controlled by InferenceDeployment qwen"
        in error["message"]
    )
    assert "it has no controller" in error["message"]
    status = idep.wait_phase("RolledBack", timeout=90)
    assert status["stableRevision"] == stable
    assert {r["hash"]: r for r in status["revisions"]}[canary]["verdict"] == "Error"
    idep.wait("canary removed", lambda _: idep.revisions() == {stable: 2})
    kept = cluster.get_json("configmap", f"qwen-{stable}", "-n", idep_namespace)
    assert kept["data"] == pinned["data"]
    assert kept["metadata"]["ownerReferences"] == pinned["metadata"]["ownerReferences"]
    theirs = cluster.get_json("configmap", f"qwen-{canary}", "-n", idep_namespace)
    assert "ownerReferences" not in theirs["metadata"]  # left alone
