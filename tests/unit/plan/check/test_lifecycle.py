"""The ParityCheck controller's decisions on plain data: sides, probes, runner (and the
NetworkPolicy confining it), deadline, end, and children that are not the check's own."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infergate.api.golden import GoldenSpec
from infergate.plan.check.lifecycle import decide
from infergate.plan.check.observed import (
    CheckChild,
    observe_child,
    observe_parity_check,
    previous_report,
)
from infergate.plan.check.sides import RevisionConfig, RevisionSeen, SideView, side_view
from infergate.plan.check.state import CheckState
from infergate.render.check_names import child_labels, runner_labels
from infergate.render.mirror import CONTROL_PORT, mirror_network_policy
from infergate.render.network import Peer, api_server_peers

CREATED = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
UID = "u1"
NAME = "qwen-bbbbbbbbbb"
RUNNERS = "infergate-system"
RUNNER = f"check-{UID}-runner"
"""The runner's Job, ServiceAccount and NetworkPolicy, in the runner namespace."""
TEMPLATE = {
    "metadata": {"name": "qwen-aaaaaaaaaa"},
    "spec": {"template": {"spec": {"containers": [{"name": "engine", "args": ["serve", "/m"]}]}}},
}
VLLM = RevisionConfig(
    engine="vllm", dtype="bfloat16", served_model_name="q", overrides={}, image=None
)
MINDFORMERS = RevisionConfig(
    engine="mindformers", dtype="float16", served_model_name="q", overrides={}, image=None
)


def check(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {
            "name": NAME,
            "namespace": "llm",
            "uid": UID,
            "generation": 1,
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-02T12:00:00Z",
        },
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
            "suite": {"inline": [{"id": "p", "text": "hello"}]},
            "deadlineSeconds": 600,
            "runner": {"activeDeadlineSeconds": 300},
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


READY_SIDES = {
    "baseline": SideView(
        deployment="qwen",
        revision="aaaaaaaaaa",
        object_name="qwen-aaaaaaaaaa",
        needs_probe=True,
        probe_template=TEMPLATE,
    ),
    "candidate": SideView(deployment="qwen", revision="bbbbbbbbbb", object_name="qwen-bbbbbbbbbb"),
}


def state(
    body: dict[str, Any],
    *,
    minutes: float = 1,
    sides: dict[str, SideView] | None = None,
    children: list[CheckChild] | None = None,
    api_server: tuple[Peer, ...] = (),
) -> CheckState:
    return CheckState(
        check=observe_parity_check(body),
        sides=sides if sides is not None else READY_SIDES,  # type: ignore[arg-type]
        children=children or [],
        runner_image="ghcr.io/infergate/infergate:0.1.0",
        now=CREATED + timedelta(minutes=minutes),
        api_server=api_server,
        runner_namespace=RUNNERS,
    )


def child(kind: str, name: str, role: str, *, owner: str = UID, **status: Any) -> CheckChild:
    """A child in the check's namespace, owned (by reference) by `owner`."""
    body: dict[str, Any] = {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "llm",
            "uid": f"{name}-uid",
            "labels": child_labels(NAME, role),
            "ownerReferences": [
                {"kind": "ParityCheck", "name": NAME, "uid": owner, "controller": True}
            ],
        },
        "status": status,
    }
    return observe_child(body, RUNNERS)


def runner_child(
    kind: str, *, check_uid: str = UID, name: str = RUNNER, **status: Any
) -> CheckChild:
    """A runner object in the runner namespace: its check's uid in its labels, no owner."""
    body: dict[str, Any] = {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": RUNNERS,
            "uid": f"{name}-{kind}-uid",
            "labels": runner_labels("llm", NAME, check_uid),
        },
        "status": status,
    }
    return observe_child(body, RUNNERS)


def probe(*, ready: bool = False, restarts: int = 0) -> CheckChild:
    return child(
        "Pod",
        f"{NAME}-probe-baseline",
        "probe",
        phase="Running",
        conditions=[{"type": "Ready", "status": "True" if ready else "False"}],
        containerStatuses=[
            {
                "restartCount": restarts,
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}} if restarts else {},
            }
        ],
    )


def job(condition: str | None = None, reason: str = "", message: str = "") -> CheckChild:
    conditions = (
        [{"type": condition, "status": "True", "reason": reason, "message": message}]
        if condition
        else []
    )
    return runner_child("Job", conditions=conditions)


def policy() -> CheckChild:
    return runner_child("NetworkPolicy")


def runner_pod(phase: str = "Running", **status: Any) -> CheckChild:
    """A pod of the runner Job (owned by it, in the runner namespace)."""
    body: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {
            "name": f"{RUNNER}-x1",
            "namespace": RUNNERS,
            "uid": "pod-uid",
            "labels": runner_labels("llm", NAME, UID),
            "ownerReferences": [
                {"kind": "Job", "name": RUNNER, "uid": "job-uid", "controller": True}
            ],
        },
        "status": {"phase": phase, **status},
    }
    return observe_child(body, RUNNERS)


def by_type(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in fields["conditions"]}


def kinds(manifests: list[dict[str, Any]]) -> list[str]:
    return [m["kind"] for m in manifests]


# -- sides -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "deployment_exists", "stable", "expected"),
    [
        (RevisionSeen(), False, None, "InferenceDeployment qwen does not exist"),
        (RevisionSeen(), True, None, "has no stable revision yet"),
        (RevisionSeen(), True, "aaaaaaaaaa", "ConfigMap qwen-aaaaaaaaaa of revision aaaaaaaaaa"),
        (RevisionSeen(config=VLLM), True, "aaaaaaaaaa", "its Deployment does not exist (yet)"),
        (RevisionSeen(config=VLLM, available=0), True, "aaaaaaaaaa", "no pod ready"),
        (
            RevisionSeen(config=VLLM, available=1, template=TEMPLATE),
            True,
            "aaaaaaaaaa",
            "Service qwen-aaaaaaaaaa does not exist (yet)",
        ),
    ],
)
def test_a_side_waits_saying_for_what(
    seen: RevisionSeen, deployment_exists: bool, stable: str | None, expected: str
) -> None:
    spec = observe_parity_check(check(baseline={"inferenceDeploymentRef": {"name": "qwen"}})).spec
    assert spec is not None
    view = side_view(
        spec, "baseline", pinned=None, deployment_exists=deployment_exists, stable=stable,
        seen=lambda _: seen,
    )  # fmt: skip
    assert view.waiting is not None
    assert expected in view.waiting
    assert not view.needs_probe


def test_a_vllm_side_needs_a_probe_and_a_mindformers_side_does_not() -> None:
    spec = observe_parity_check(check()).spec
    assert spec is not None
    for config, probe_wanted in ((VLLM, True), (MINDFORMERS, False)):
        seen = RevisionSeen(config=config, available=1, template=TEMPLATE, service=True)
        view = side_view(
            spec, "baseline", pinned=None, deployment_exists=True, stable=None,
            seen=lambda _, s=seen: s,  # type: ignore[misc]
        )  # fmt: skip
        assert view.waiting is None
        assert view.revision == "aaaaaaaaaa"
        assert view.needs_probe is probe_wanted
        assert (view.probe_template is not None) is probe_wanted


def test_an_unreadable_pinned_config_is_invalid_not_waited_on() -> None:
    spec = observe_parity_check(check()).spec
    assert spec is not None
    view = side_view(
        spec, "baseline", pinned=None, deployment_exists=True, stable=None,
        seen=lambda _: RevisionSeen(config="ConfigMap qwen-aaaaaaaaaa: no key 'engine.json'"),
    )  # fmt: skip
    plan = decide(state(check(), sides={"baseline": view, "candidate": READY_SIDES["candidate"]}))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    assert "no key 'engine.json'" in plan.terminal["verdict"]["reasons"][0]["message"]


def test_the_stable_side_is_pinned_when_the_check_starts() -> None:
    spec = observe_parity_check(check(baseline={"inferenceDeploymentRef": {"name": "qwen"}})).spec
    assert spec is not None
    seen = RevisionSeen(config=MINDFORMERS, available=1, service=True)
    pinned = side_view(
        spec, "baseline", pinned="1111111111", deployment_exists=True, stable="2222222222",
        seen=lambda _: seen,
    )  # fmt: skip
    assert pinned.revision == "1111111111"  # the stable moved on; the check did not


# -- before the runner -----------------------------------------------------------------------


def test_a_side_not_ready_keeps_the_check_pending_saying_why_and_pins_revisions() -> None:
    sides = {
        "baseline": SideView(deployment="qwen", revision="aaaaaaaaaa"),
        "candidate": SideView(
            deployment="qwen", revision="bbbbbbbbbb", waiting="Service qwen-bbbbbbbbbb has no pod"
        ),
    }
    plan = decide(state(check(), sides=sides))  # type: ignore[arg-type]
    assert plan.status is not None
    assert plan.status["phase"] == "Pending"
    assert plan.status["baselineRevision"] == "aaaaaaaaaa"
    assert (
        "candidate: Service qwen-bbbbbbbbbb has no pod"
        in by_type(plan.status)["Complete"]["message"]
    )
    assert plan.create == []
    assert plan.terminal is None
    assert plan.wake_in == 9 * 60  # the deadline is scheduled, not polled


def test_unchanged_pending_status_is_not_written_again() -> None:
    sides = {"baseline": SideView(deployment="qwen", waiting="x"), "candidate": SideView()}
    first = decide(state(check(), sides=sides))  # type: ignore[arg-type]
    assert first.status is not None
    again = decide(state(check(status=first.status), minutes=2, sides=sides))  # type: ignore[arg-type]
    assert again.status is None
    assert again.quiet


def test_a_vllm_side_gets_a_probe_and_the_runner_waits_for_it() -> None:
    plan = decide(state(check()))
    assert kinds(plan.create) == ["Service", "Pod"]
    assert plan.create[1]["metadata"]["name"] == f"{NAME}-probe-baseline"
    assert plan.create[1]["metadata"]["ownerReferences"][0]["uid"] == UID
    assert not any(m["kind"] == "Job" for m in plan.create)
    waiting = decide(state(check(), children=[probe()]))
    assert waiting.create == []
    assert waiting.status is not None
    assert "baseline probe" in by_type(waiting.status)["Complete"]["message"]


def test_the_runner_starts_once_every_probe_is_ready_with_rbac_naming_what_it_reads() -> None:
    plan = decide(state(check(), children=[probe(ready=True)]))
    assert kinds(plan.create) == [
        "NetworkPolicy", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job",
    ]  # fmt: skip
    role = plan.create[2]
    readable = {
        name
        for rule in role["rules"]
        if rule["resources"] == ["services"]
        for name in rule["resourceNames"]
    }
    assert readable == {"qwen-aaaaaaaaaa", "qwen-bbbbbbbbbb", f"{NAME}-probe-baseline"}
    job_manifest = plan.create[-1]
    container = job_manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/infergate/infergate:0.1.0"
    assert job_manifest["spec"]["activeDeadlineSeconds"] == 300
    assert plan.terminal is None


@pytest.mark.parametrize(
    ("golden", "verbs"),
    [
        (None, [["get"]]),
        ({"store": {"pvc": {"claimName": "golden"}}}, [["get"]]),
        (
            {"store": {"pvc": {"claimName": "golden"}}, "retention": {"whenDeleted": "Delete"}},
            [["get"], ["list"]],
        ),
    ],
    ids=["no golden records", "whenDeleted Retain", "whenDeleted Delete"],
)
def test_the_runner_may_list_deployments_only_to_prune_the_deleted_ones_records(
    golden: dict[str, Any] | None, verbs: list[list[str]]
) -> None:
    settings = GoldenSpec.model_validate(golden) if golden is not None else None
    plan = decide(replace(state(check(), children=[probe(ready=True)]), golden=settings))
    role = next(m for m in plan.create if m["kind"] == "Role")
    rules = [r for r in role["rules"] if r["resources"] == ["inferencedeployments"]]
    assert [r["verbs"] for r in rules] == verbs
    assert rules[0]["resourceNames"] == ["qwen"]


def test_a_crash_looping_probe_ends_the_check_in_error_and_frees_the_probe() -> None:
    crashing = probe(restarts=3)
    plan = decide(state(check(), children=[crashing]))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    assert (
        "restarted 3 times (last exit code 1, Error)"
        in plan.terminal["verdict"]["reasons"][0]["message"]
    )
    assert plan.delete == [crashing]


# -- with the runner -------------------------------------------------------------------------


def test_a_failed_runner_job_is_error_with_the_runner_reason() -> None:
    failed_attempt = {
        "type": "RunnerError",
        "status": "True",
        "reason": "SideUnreachable",
        "message": "candidate completion of 'p': ConnectError: refused",
        "lastTransitionTime": "2026-12-02T12:01:00Z",
    }
    body = check(status={"phase": "Running", "conditions": [failed_attempt]})
    exited = runner_pod(
        "Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]
    )
    failed = job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    plan = decide(state(body, children=[failed, exited]))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    assert plan.terminal["verdict"]["passed"] is False
    message = plan.terminal["verdict"]["reasons"][0]["message"]
    assert "BackoffLimitExceeded" in message
    assert "ConnectError: refused" in message
    assert f"{RUNNER}-x1 exited 3" in message
    assert by_type(plan.terminal)["Error"]["reason"] == "RunnerFailed"


def test_a_runner_that_completes_without_a_verdict_is_error() -> None:
    plan = decide(state(check(status={"phase": "Running"}), children=[job("Complete")]))
    assert plan.terminal is not None
    assert (
        "completed without writing a verdict" in plan.terminal["verdict"]["reasons"][0]["message"]
    )


def test_a_running_job_is_left_alone() -> None:
    plan = decide(state(check(status={"phase": "Running"}), children=[job(), policy()]))
    assert plan.quiet


def test_the_check_deadline_counts_from_creation_waiting_included_and_stops_the_runner() -> None:
    body = check(status={"phase": "Running", "progress": {"done": 3, "total": 8}})
    running = job()
    assert decide(state(body, minutes=9.9, children=[running])).terminal is None
    plan = decide(state(body, minutes=10, children=[running]))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    message = plan.terminal["verdict"]["reasons"][0]["message"]
    assert "no verdict within deadlineSeconds=600" in message
    assert "3/8 prompts done" in message
    assert by_type(plan.terminal)["Error"]["reason"] == "DeadlineExceeded"
    assert plan.delete == [running]


# -- the end ---------------------------------------------------------------------------------


def test_an_ended_check_releases_its_children_once_and_says_so() -> None:
    body = check(
        status={"phase": "Passed", "verdict": {"passed": True, "summary": "Passed: 8 prompts"}}
    )
    rbac = child("Role", f"{NAME}-runner", "runner")
    finished = job("Complete")
    plan = decide(state(body, children=[rbac, finished]))
    assert plan.delete == [rbac]  # a finished Job stays for its log
    assert plan.status is not None
    assert by_type(plan.status)["ResourcesReleased"]["status"] == "True"
    assert plan.events == [(False, "CheckPassed", "Passed: 8 prompts")]
    released = check(status={"phase": "Passed", "conditions": plan.status["conditions"]})
    assert decide(state(released, children=[finished])).quiet


@pytest.mark.parametrize("phase", ["Failed", "Inconclusive", "Error"])
def test_every_verdict_ends_the_check_and_warns(phase: str) -> None:
    body = check(status={"phase": phase, "verdict": {"passed": False, "summary": f"{phase}!"}})
    plan = decide(state(body))
    assert plan.terminal is None
    assert plan.events == [(True, f"Check{phase}", f"{phase}!")]


def test_an_invalid_check_is_error_never_pending_forever() -> None:
    plan = decide(state(check(suite={})))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    assert "spec is invalid" in plan.terminal["verdict"]["reasons"][0]["message"]


# -- what is not the check's own -------------------------------------------------------------


def test_a_child_made_by_someone_else_is_neither_used_nor_deleted() -> None:
    impostor = child("Role", f"{NAME}-runner", "runner", owner="someone-else")
    plan = decide(state(check(), children=[probe(ready=True), impostor]))
    assert plan.terminal is not None
    assert plan.terminal["phase"] == "Error"
    assert by_type(plan.terminal)["Error"]["reason"] == "ChildNotOurs"
    assert impostor not in plan.delete
    assert not any(m["kind"] == "Job" for m in plan.create)


def test_the_previous_report_is_the_last_passing_check_of_the_same_deployment() -> None:
    def ended(name: str, phase: str, at: str, deployment: str = "qwen") -> Any:
        body = check(
            status={"phase": phase, "completionTime": at, "reportRef": {"name": f"{name}-report"}},
            candidate={"inferenceDeploymentRef": {"name": deployment}},
        )
        body["metadata"]["name"] = name
        return observe_parity_check(body)

    me = observe_parity_check(check())
    others = [
        ended("a", "Passed", "2026-12-01T10:00:00Z"),
        ended("b", "Passed", "2026-12-01T11:00:00Z"),
        ended("c", "Failed", "2026-12-01T12:00:00Z"),
        ended("d", "Passed", "2026-12-01T13:00:00Z", deployment="other"),
    ]
    assert previous_report(me, others) == "b-report"


def test_the_runner_account_is_recorded_so_only_it_may_write_the_verdict() -> None:
    account = runner_child("ServiceAccount")
    running = check(status={"phase": "Running"})
    plan = decide(state(running, children=[job(), account]))
    assert plan.status == {
        "runnerServiceAccount": {"name": RUNNER, "uid": f"{RUNNER}-ServiceAccount-uid"}
    }
    recorded = check(
        status={"phase": "Running", "runnerServiceAccount": plan.status["runnerServiceAccount"]}
    )
    assert decide(state(recorded, children=[job(), account, policy()])).quiet
    impostor = runner_child("ServiceAccount", check_uid="someone-else")
    assert decide(state(running, children=[job(), impostor])).terminal is not None


# -- the runner's NetworkPolicy --------------------------------------------------------------


CHECK_NAMESPACE = {"matchLabels": {"kubernetes.io/metadata.name": "llm"}}


def _egress(manifest: dict[str, Any]) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    """(what, ports) per rule: pod labels (of the check's namespace), an IP block, or DNS."""
    rules = []
    for rule in manifest["spec"]["egress"]:
        [target] = rule["to"]
        ports = tuple((p["protocol"], p["port"]) for p in rule["ports"])
        if "ipBlock" in target:
            rules.append((target["ipBlock"]["cidr"], ports))
        elif target["podSelector"]["matchLabels"].get("k8s-app") == "kube-dns":
            rules.append(("dns", ports))
        else:
            # The runner runs in the runner namespace: every pod it reaches is named by
            # the check's namespace as well as by its labels.
            assert target["namespaceSelector"] == CHECK_NAMESPACE, target
            labels = target["podSelector"]["matchLabels"]
            what = labels.get("infergate.io/revision") or labels.get("infergate.io/side")
            rules.append((str(what), ports))
    return rules


def test_the_runner_may_reach_only_its_sides_the_api_server_and_dns() -> None:
    api = api_server_peers("10.96.0.1", "443", ["10.0.0.10/32:6443"])
    plan = decide(state(check(), children=[probe(ready=True)], api_server=api))
    manifest = next(m for m in plan.create if m["kind"] == "NetworkPolicy")
    job_manifest = next(m for m in plan.create if m["kind"] == "Job")
    # It selects the runner's pods (the Job's pod labels), admits nothing in, ...
    assert (
        manifest["spec"]["podSelector"]["matchLabels"]
        == (job_manifest["spec"]["template"]["metadata"]["labels"])
    )
    assert manifest["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in manifest["spec"]
    # ... and lets out only: both revisions' engine pods on the engine port, the baseline's
    # probe on the engine's and the fingerprint server's, the API server, DNS.
    engine = (("TCP", 8000),)
    assert _egress(manifest) == [
        ("aaaaaaaaaa", engine),
        ("baseline", engine),
        ("baseline", (("TCP", 8001),)),
        ("bbbbbbbbbb", engine),
        ("10.96.0.1/32", (("TCP", 443),)),
        ("10.0.0.10/32", (("TCP", 6443),)),
        ("dns", (("UDP", 53), ("TCP", 53))),
    ]
    revision_rule = manifest["spec"]["egress"][0]["to"][0]["podSelector"]["matchLabels"]
    assert revision_rule == {
        "infergate.io/deployment": "qwen",
        "infergate.io/revision": "aaaaaaaaaa",
        "app.kubernetes.io/component": "engine",
    }
    # It lives beside the runner, in the runner namespace, and names its check in labels.
    assert (manifest["metadata"]["namespace"], manifest["metadata"]["name"]) == (RUNNERS, RUNNER)
    assert job_manifest["metadata"]["namespace"] == RUNNERS
    assert "ownerReferences" not in manifest["metadata"]
    selected = manifest["spec"]["podSelector"]["matchLabels"]
    assert selected["infergate.io/paritycheck-namespace"] == "llm"
    assert selected["infergate.io/paritycheck-uid"] == UID


def test_the_runner_objects_go_to_the_runner_namespace_and_the_grant_to_the_checks() -> None:
    plan = decide(state(check(), children=[probe(ready=True)]))
    where = {m["kind"]: m["metadata"]["namespace"] for m in plan.create}
    assert where == {
        "NetworkPolicy": RUNNERS,
        "ServiceAccount": RUNNERS,
        "Job": RUNNERS,
        "Role": "llm",
        "RoleBinding": "llm",
        "ConfigMap": "llm",
    }
    binding = next(m for m in plan.create if m["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RUNNER, "namespace": RUNNERS}]
    job_manifest = next(m for m in plan.create if m["kind"] == "Job")
    assert job_manifest["spec"]["template"]["spec"]["serviceAccountName"] == RUNNER


def test_a_runner_job_in_the_checks_namespace_is_not_the_runner() -> None:
    """A tenant may make a Job of the runner's name and labels in its own namespace (and
    give it an owner reference to its check): it is neither waited on nor its account
    recorded; the runner is started in the runner namespace."""
    forged_job = child("Job", RUNNER, "runner", conditions=[])
    forged_account = child("ServiceAccount", RUNNER, "runner")
    plan = decide(state(check(), children=[probe(ready=True), forged_job, forged_account]))
    assert "Job" in kinds(plan.create)
    assert plan.status is not None
    assert "runnerServiceAccount" not in plan.status


def test_a_shadow_checks_runner_may_reach_the_mirrors_control_port() -> None:
    # The window ends before the runner's deadline (300 s), as admission requires.
    body = check(source="shadow", shadow={"minRequests": 10, "windowSeconds": 120})
    del body["spec"]["suite"]
    baseline = replace(READY_SIDES["baseline"], needs_probe=False)
    sides = {"baseline": baseline, "candidate": READY_SIDES["candidate"]}
    plan = decide(state(body, sides=sides))
    manifest = next(m for m in plan.create if m["kind"] == "NetworkPolicy")
    job_manifest = next(m for m in plan.create if m["kind"] == "Job")
    mirror = mirror_network_policy("qwen", "llm", runner_namespace=RUNNERS)
    mirror_pods = mirror["spec"]["podSelector"]["matchLabels"]
    to_mirror = [
        rule["ports"]
        for rule in manifest["spec"]["egress"]
        if rule["to"]
        == [{"namespaceSelector": CHECK_NAMESPACE, "podSelector": {"matchLabels": mirror_pods}}]
    ]
    assert to_mirror == [[{"protocol": "TCP", "port": CONTROL_PORT}]]
    # The mirror's policy lets this runner's pods in on that port (the runner namespace,
    # labels naming the mirror's namespace).
    [control] = [r for r in mirror["spec"]["ingress"] if r["ports"][0]["port"] == CONTROL_PORT]
    [peer] = control["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": RUNNERS}}
    runner_pods = job_manifest["spec"]["template"]["metadata"]["labels"]
    assert job_manifest["metadata"]["namespace"] == RUNNERS
    assert peer["podSelector"]["matchLabels"].items() <= runner_pods.items()
    # A suite check's runner gets no way to the mirror.
    suite = decide(state(check(), children=[probe(ready=True)]))
    policy = next(m for m in suite.create if m["kind"] == "NetworkPolicy")
    targets = [rule["to"][0].get("podSelector", {}) for rule in policy["spec"]["egress"]]
    assert {"matchLabels": mirror_pods} not in targets


def test_an_endpoint_side_gets_no_way_out() -> None:
    sides = {"baseline": SideView(), "candidate": READY_SIDES["candidate"]}
    plan = decide(state(check(), sides=sides))
    manifest = next(m for m in plan.create if m["kind"] == "NetworkPolicy")
    assert [what for what, _ in _egress(manifest)] == ["bbbbbbbbbb", "dns"]


def test_the_policy_stays_until_no_runner_pod_runs() -> None:
    body = check(status={"phase": "Error", "verdict": {"passed": False, "summary": "late"}})
    running = job()
    # The check ended with its runner running: the Job goes first, the policy stays ...
    assert decide(state(body, children=[running, policy()])).delete == [running]
    released = check(status={"phase": "Error", "conditions": [
        {"type": "ResourcesReleased", "status": "True", "reason": "ChildrenDeleted"}
    ]})  # fmt: skip
    # ... while its pod is being stopped, and goes once no runner pod runs.
    assert decide(state(released, children=[policy(), runner_pod("Running")])).quiet
    gone = decide(state(released, children=[policy(), runner_pod("Failed")]))
    assert gone.delete == [policy()]


def test_a_missing_policy_is_made_again_while_the_runner_runs() -> None:
    plan = decide(state(check(status={"phase": "Running"}), children=[job()]))
    assert kinds(plan.create) == ["NetworkPolicy"]
    finished = decide(state(check(status={"phase": "Running"}), children=[job("Complete")]))
    assert "NetworkPolicy" not in kinds(finished.create)


def test_a_policy_someone_else_made_under_the_runners_name_stops_the_check() -> None:
    foreign = runner_child("NetworkPolicy", check_uid="someone-else")
    plan = decide(state(check(), children=[probe(ready=True), foreign]))
    assert plan.terminal is not None
    assert by_type(plan.terminal)["Error"]["reason"] == "ChildNotOurs"
    assert foreign not in plan.delete


@pytest.mark.parametrize(
    ("host", "port", "extra", "expected"),
    [
        ("10.96.0.1", "443", [], [Peer(443, cidr="10.96.0.1/32")]),
        ("fd00::1", "443", [], [Peer(443, cidr="fd00::1/128")]),
        (None, None, ["10.0.0.0/29:6443"], [Peer(6443, cidr="10.0.0.0/29")]),
        (None, None, [], []),
    ],
)
def test_api_server_addresses_come_from_the_pod_and_the_operators_flags(
    host: str | None, port: str | None, extra: list[str], expected: list[Peer]
) -> None:
    assert list(api_server_peers(host, port, extra)) == expected


@pytest.mark.parametrize("bad", ["10.0.0.10", "10.0.0.10/32:http", "apiserver:6443", "1.2.3.4:0"])
def test_an_api_server_address_that_is_not_cidr_and_port_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape("give CIDR:PORT, e.g. 10.0.0.10/32:6443")):
        api_server_peers(None, None, [bad])


# -- the layer stand-in of a vLLM side -----------------------------------------------------

STAND_IN_TEMPLATE = {
    "metadata": {"name": "qwen-aaaaaaaaaa"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "engine",
                        "image": "vllm/vllm-openai:v0.32.0",
                        "args": ["serve", "/models/qwen"],
                        "volumeMounts": [{"name": "model", "mountPath": "/models"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "model",
                        "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
                    }
                ],
            }
        }
    },
}


def test_a_vllm_side_with_mounted_weights_gets_the_stand_in_and_the_runner_may_reach_it() -> None:
    sides = {
        **READY_SIDES,
        "baseline": SideView(
            deployment="qwen",
            revision="aaaaaaaaaa",
            object_name="qwen-aaaaaaaaaa",
            needs_probe=True,
            probe_template=STAND_IN_TEMPLATE,
        ),
    }
    plan = decide(state(check(), sides=sides))
    service, pod = plan.create
    assert [c["name"] for c in pod["spec"]["containers"]] == ["engine", "fingerprints", "layers"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "fingerprints", "layers"]
    assert service["metadata"]["annotations"]["infergate.io/layer-stand-in"] == "transformers"
    started = decide(state(check(), sides=sides, children=[probe(ready=True)]))
    manifest = next(m for m in started.create if m["kind"] == "NetworkPolicy")
    assert ("baseline", (("TCP", 8002),)) in _egress(manifest)


def test_a_vllm_side_without_mounted_weights_gets_no_stand_in_and_no_port_for_it() -> None:
    plan = decide(state(check()))  # TEMPLATE: no model volume (an hf:// or s3:// revision)
    service, pod = plan.create
    assert [c["name"] for c in pod["spec"]["containers"]] == ["engine", "fingerprints"]
    said = service["metadata"]["annotations"]["infergate.io/layer-stand-in"]
    assert said.startswith("none: the weights are not a mounted directory")
    started = decide(state(check(), children=[probe(ready=True)]))
    manifest = next(m for m in started.create if m["kind"] == "NetworkPolicy")
    assert all(("TCP", 8002) not in ports for _, ports in _egress(manifest))


def test_a_deadline_met_while_measuring_the_baseline_says_so() -> None:
    """The runner measured the baseline revision's own noise first (none was kept): the
    Error says the prompts were driven for that, not for the check."""
    progress = {"done": 5, "total": 8, "stage": "BaselineNoise"}
    body = check(status={"phase": "Running", "progress": progress})
    plan = decide(state(body, minutes=10, children=[job()]))
    assert plan.terminal is not None
    message = plan.terminal["verdict"]["reasons"][0]["message"]
    assert "5/8 prompts done measuring the baseline revision's own noise" in message
