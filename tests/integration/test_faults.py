"""Faults on the real local cluster, against the gate's promise: whatever fails, no canary
is promoted without a bound Passed verdict, the stable revision keeps serving at full size
and untouched, and no child is duplicated (fault_support has the invariants).

The first tests run the installed operator (two replicas, one acting) as pods; the others
run `infergate operator` as processes of the test, behind a fault proxy
(fault_proxy.py) that sees, stalls or fails every request they make, with the installed
replicas scaled to 0 meanwhile so that exactly the processes under test act.

Every test runs under the admission policies of manifests/admission, installed for the
module (fault_support.admission_policies) as a platform installs them: the operator, pod or
process, runs as its ServiceAccount (a token of it), and each verdict is written by the
check's own runner ServiceAccount, the one the operator recorded (fault_support.RunnerIdep),
since the policies refuse anyone else, a cluster admin included.

A user editing a running check is refused by the API server's immutability rule; that
rule is shown for every kind of edit in test_crd_admission.py; here, the edit of a check
the operator is waiting on changes nothing. A check pre-created under the canary's name
and a Passed phase without a bound verdict are in test_paritycheck_controller.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from infergate_dev.localcluster import controlplane
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    deployment_manifest,
    operator,
    settle,
)
from tests.integration.fault_proxy import Conflict, Exchange, Stall, Storm, path_matches
from tests.integration.fault_support import (
    GateWatch,
    LocalOperator,
    Rig,
    RunnerIdep,
    admission_policies,
    assert_gate_held,
    assert_no_duplicates,
    explained,
    idep_namespace,
    installed_stopped,
    mid_canary,
    rig,
    runner_jobs,
    runner_selector,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
__all__ = ["admission_policies", "idep_namespace", "installed_stopped", "operator", "rig"]
REPLICAS = 2
TERMINAL = {"Passed", "Failed", "Inconclusive", "Error"}
# How long the API server or etcd stays stopped in the "down" cases: several resyncs
# (RESYNC_SECONDS) and longer than the operator's first retries (retry.RECONCILES starts
# at 0.5s and doubles), so every client meets it more than once.
DOWN_SECONDS = 15.0
REVISION_LABEL = "infergate.io/revision"


def _report(line: str) -> None:
    print(f"fault figures: {line}")  # noqa: T201 - the figures, for the record


def _promoted(idep: Idep, canary: str, timeout: float = 90) -> None:
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout)


def _retired(idep: Idep, stable: str, canary: str) -> None:
    """The promoted canary at full size, the old stable scaled to 0 (kept in history)."""
    wanted = {stable: 0, canary: REPLICAS}
    with explained(idep):
        wait_for(lambda: idep.revisions() == wanted, 60, f"{idep.name}: old stable scaled down")


# -- the installed operator ----------------------------------------------------------------


def test_an_edit_of_a_running_check_is_refused_and_moves_nothing(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = RunnerIdep(cluster, idep_namespace, deployment_manifest())
    stable, canary, check = mid_canary(idep)
    name = check["metadata"]["name"]
    with GateWatch(cluster, idep_namespace, idep.name) as watch:
        # Point the candidate at stable (a real Passed for the wrong comparison), switch a
        # metric off: each refused by the API server itself.
        for patch in (
            {"spec": {"candidate": {"revision": stable}}},
            {"spec": {"disabledChecks": ["minTokenMatchRate"]}},
        ):
            edited = cluster.kubectl(
                "patch", "pcheck", name, "-n", idep_namespace, "--type=merge",
                "-p", json.dumps(patch), check=False,
            )  # fmt: skip
            assert edited.returncode != 0, patch
            assert "spec is immutable" in edited.stderr, edited.stderr
        settle()
        assert_gate_held(watch, stable, REPLICAS)
    after = cluster.get_json("pcheck", name, "-n", idep_namespace)
    assert after["metadata"]["generation"] == check["metadata"]["generation"]
    assert after["spec"] == check["spec"]
    assert_no_duplicates(idep, {stable, canary}, canary)


def test_a_passed_check_of_an_earlier_attempt_promotes_nothing(
    cluster: Cluster, idep_namespace: str
) -> None:
    """A Passed verdict outlives its attempt: the spec moves on, then comes back to the same
    revision. The old check compares the same stable and canary with the same spec, so only
    the uid the rollout recorded for the attempt tells it apart; it must not promote."""
    idep = RunnerIdep(cluster, idep_namespace, deployment_manifest(auto_promote=False))
    stable, first, check = mid_canary(idep)
    old = check["metadata"]["name"]
    idep.verdict(old, "Passed", passed=True)  # a real, bound verdict: waits for a person
    idep.wait(
        "awaiting promotion",
        lambda s: any(c.get("reason") == "AwaitingPromotion" for c in s.get("conditions", [])),
    )
    old_uid = check["metadata"]["uid"]
    with GateWatch(cluster, idep_namespace, idep.name) as watch:
        idep.manifest["spec"]["rollout"]["autoPromote"] = True
        idep.apply(dtype="float32")  # the spec moves on: a second canary
        idep.wait("a second canary", lambda s: s.get("canaryRevision") not in (None, first))
        idep.wait_check()  # the second canary is checked
        # The earlier check, Passed, stays (it ended); it promotes neither canary.
        assert cluster.get_json("pcheck", old, "-n", idep_namespace)["status"]["phase"] == "Passed"
        settle()
        idep.apply(dtype="float16")  # ... and back: a new attempt of the first canary
        idep.wait("the first canary again", lambda s: s.get("canaryRevision") == first)

        def replaced() -> dict[str, Any] | None:
            found = cluster.kubectl("get", "pcheck", old, "-n", idep_namespace, "-o", "json",
                                    check=False)  # fmt: skip
            body = json.loads(found.stdout) if found.returncode == 0 else None
            return body if body and body["metadata"]["uid"] != old_uid else None

        new = wait_for(replaced, 60, f"{old} made anew for the new attempt")
        assert (new.get("status") or {}).get("phase") != "Passed"
        settle()
        assert_gate_held(watch, stable, REPLICAS)
    assert_no_duplicates(idep, {stable, first}, first)
    # The gate opens for the new attempt's own verdict.
    idep.verdict(old, "Passed", passed=True)
    _promoted(idep, first)


@pytest.mark.parametrize(
    ("component", "down"),
    [
        ("kube-apiserver", 0.0),
        # Long enough that the node lifecycle controller finds the nodes' heartbeats
        # missing once the API server is back and marks their pods NotReady: the nodes
        # report them Ready again (kwokconfig's pod-ready-again stage, the executor's
        # observe), as kubelets do, before the promoted canary is available and the old
        # stable may go.
        ("kube-apiserver", DOWN_SECONDS),
        ("etcd", DOWN_SECONDS),
    ],
    ids=["apiserver-restarted", "apiserver-down", "etcd-down"],
)
def test_a_control_plane_restart_mid_canary_promotes_nothing_and_converges(
    cluster: Cluster, idep_namespace: str, component: str, down: float
) -> None:
    """The API server (or etcd behind it) stops while a check runs, stays away `down`
    seconds, and comes back with the same command line: meanwhile the operator, the
    ParityCheck controller and the runner see refused connections (or 5xx from an API
    server without its etcd)."""
    idep = RunnerIdep(cluster, idep_namespace, deployment_manifest())
    stable, canary, check = mid_canary(idep)
    with GateWatch(cluster, idep_namespace, idep.name) as watch:
        started = time.monotonic()
        controlplane.restart(cluster.layout, component, pause=down)
        back = time.monotonic()
        settle()
        assert_gate_held(watch, stable, REPLICAS)
        assert_no_duplicates(idep, {stable, canary}, canary)
        same = cluster.get_json("pcheck", check["metadata"]["name"], "-n", idep_namespace)
        assert same["metadata"]["uid"] == check["metadata"]["uid"]
    # The runner's verdict arrives after the restart: the operator acts on it.
    written = time.monotonic()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    _promoted(idep, canary, timeout=120)
    converged = time.monotonic() - written
    _retired(idep, stable, canary)
    _report(
        f"{component} stopped {down:.0f}s: down and back in {back - started:.1f}s; promotion "
        f"{converged:.1f}s after the verdict written once it served again"
    )


def _runner_pods(cluster: Cluster, namespace: str, check: str) -> list[dict[str, Any]]:
    """The runner pods of check `namespace/check` (in the runner namespace)."""
    listed: list[dict[str, Any]] = cluster.get_json(
        "pods", "-A", "-l", runner_selector(namespace, check)
    )["items"]
    return listed


def _running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(
        "running" in c["state"] and c.get("containerID") for c in statuses
    )


def _kill_containers(pod: dict[str, Any]) -> None:
    """SIGKILL the pod's container processes where the executor node runs them (its
    containerID is local://PID, the leader of the container's process group): as an OOM
    kill or a node's crash would, nothing of the runner's own runs."""
    for container in pod["status"]["containerStatuses"]:
        pid = int(str(container["containerID"]).removeprefix("local://"))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _check_phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    body = cluster.get_json("pcheck", name, "-n", namespace)
    phase = (body.get("status") or {}).get("phase")
    return str(phase) if phase else None


def test_a_runner_killed_mid_check_is_run_again_and_only_its_verdict_promotes(
    cluster: Cluster, idep_namespace: str
) -> None:
    """SIGKILL of the runner's process: its pod fails, the Job runs it again (the default
    runner.backoffLimit is 1) and the check goes on; nothing is promoted meanwhile, and the
    verdict of the run that finishes promotes."""
    idep = RunnerIdep(cluster, idep_namespace, deployment_manifest())
    stable, canary, check = mid_canary(idep)
    name = check["metadata"]["name"]
    with GateWatch(cluster, idep_namespace, idep.name) as watch:
        first = wait_for(
            lambda: next(
                (p for p in _runner_pods(cluster, idep_namespace, name) if _running(p)), None
            ),
            90,
            f"the runner of {name} running",
        )
        _kill_containers(first)
        killed = time.monotonic()
        uid = first["metadata"]["uid"]

        def failed() -> dict[str, Any] | None:
            pods = {p["metadata"]["uid"]: p for p in _runner_pods(cluster, idep_namespace, name)}
            pod = pods.get(uid)
            return pod if pod and (pod.get("status") or {}).get("phase") == "Failed" else None

        dead = wait_for(failed, 60, "the killed runner's pod Failed")
        [container] = dead["status"]["containerStatuses"]
        assert container["state"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
        second = wait_for(
            lambda: next(
                (
                    p
                    for p in _runner_pods(cluster, idep_namespace, name)
                    if p["metadata"]["uid"] != uid and _running(p)
                ),
                None,
            ),
            90,
            "the Job's second runner pod running",
        )
        rerun = time.monotonic() - killed
        assert _check_phase(cluster, idep_namespace, name) not in TERMINAL
        assert idep.status()["phase"] == "Verifying"
        settle()
        assert_gate_held(watch, stable, REPLICAS)
        assert_no_duplicates(idep, {stable, canary}, canary)
    # The second run's verdict (written as it would) is the one acted on.
    assert second["metadata"]["uid"] != uid
    idep.verdict(name, "Passed", passed=True)
    _promoted(idep, canary)
    _retired(idep, stable, canary)
    _report(f"runner killed: its Job ran it again {rerun:.1f}s later")


def test_a_side_that_never_answers_ends_the_check_in_error_and_the_canary_rolls_back(
    cluster: Cluster, idep_namespace: str
) -> None:
    """Both sides' pods are Ready (simulated) but nothing listens behind them: the runner
    waits for their health, gives up naming the side, and with no retry left (backoffLimit
    0) the check ends in Error; the canary is rolled back, the stable never moves, and
    nothing of the check keeps running."""
    manifest = deployment_manifest()
    manifest["spec"]["rollout"]["parity"]["runner"] = {"backoffLimit": 0}
    idep = RunnerIdep(cluster, idep_namespace, manifest)
    stable, canary, check = mid_canary(idep)
    name = check["metadata"]["name"]
    with GateWatch(cluster, idep_namespace, idep.name) as watch:
        status = idep.wait_phase("RolledBack", timeout=300)
        assert_gate_held(watch, stable, REPLICAS)
    ended = cluster.get_json("pcheck", name, "-n", idep_namespace)["status"]
    assert ended["phase"] == "Error"
    error = next(c for c in ended["conditions"] if c["type"] == "Error")
    assert error["reason"] == "RunnerFailed", error
    assert "SideUnreachable" in error["message"], error["message"]
    assert status["stableRevision"] == stable
    assert "canaryRevision" not in status
    record = {r["hash"]: r for r in status["revisions"]}[canary]
    assert record["rejected"] is True
    assert record["verdict"] == "Error"
    wait_for(lambda: idep.revisions() == {stable: REPLICAS}, 60, "the canary removed")
    wait_for(
        lambda: not any(_running(p) for p in _runner_pods(cluster, idep_namespace, name)),
        60,
        "no runner running",
    )
    assert len(runner_jobs(cluster, idep_namespace, name)) <= 1


# -- operator processes behind the fault proxy ------------------------------------------------


def test_two_replicas_started_together_only_one_acts(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """Both start before either holds the Lease; each behind its own proxy, so every write
    each makes is counted: the one that does not hold the Lease writes nothing but its bids
    for it."""
    cluster.kubectl(
        "delete", "lease", "infergate-operator", "-n", rig.install.namespace, "--ignore-not-found"
    )
    proxies = [rig.proxy(), rig.proxy()]
    # Started back to back, with no Lease: neither holds it before both run.
    replicas = [
        rig.operator(proxy, f"replica-{i}", leader_election=True) for i, proxy in enumerate(proxies)
    ]

    def holder() -> str | None:
        found = cluster.kubectl("get", "lease", "infergate-operator", "-n",
                                rig.install.namespace, "-o", "json", check=False)  # fmt: skip
        if found.returncode != 0:
            return None
        return json.loads(found.stdout)["spec"].get("holderIdentity") or None

    leader_identity = wait_for(holder, 90, "a replica holding the Lease")
    [leader] = [r for r in replicas if leader_identity.startswith(f"{r.name}_")]
    [follower] = [r for r in replicas if r is not leader]

    idep = RunnerIdep(cluster, idep_namespace, deployment_manifest())
    stable, canary, check = mid_canary(idep)
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    _promoted(idep, canary)
    _retired(idep, stable, canary)
    assert_no_duplicates(idep, {stable, canary}, canary)
    assert holder() == leader_identity  # one term, never handed over

    def writes(replica: LocalOperator) -> list[str]:
        return [
            f"{e.method} {e.path} {e.status} {e.agent}"
            for e in replica.proxy.exchanges()
            if e.write and "/leases" not in e.path
        ]

    assert writes(leader), "the leader wrote nothing"
    assert writes(follower) == [], writes(follower)
    assert leader.metric("infergate_leader") == 1.0
    assert follower.metric("infergate_leader") == 0.0
    _report(
        f"two replicas started together: {len(writes(leader))} writes by the leader, "
        f"{len(writes(follower))} by the follower"
    )


def test_an_operator_killed_mid_write_converges_without_duplicates_or_promotion(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """SIGKILL at three points between two writes that belong together, each held by the
    proxy so the kill lands exactly there: the second write never reaches the API server.
    A new process (as a restarted pod would be) must finish the work from what it observes."""
    proxy = rig.proxy()
    ns, name = idep_namespace, "qwen"
    runners = rig.install.namespace  # the runner namespace: the operator's own
    check_name = ""
    idep = RunnerIdep(cluster, ns, deployment_manifest(name))
    runs = [rig.operator(proxy, "run-0")]
    idep.apply()
    stable = idep.wait_stable(timeout=90)
    status_put = path_matches("PUT", rf"/namespaces/{ns}/inferencedeployments/{name}/status$")

    def answered(method: str, pattern: str, status: int) -> Callable[[Exchange], bool]:
        matches = path_matches(method, pattern)
        return lambda e: matches(e) and e.status == status

    def kill_and_restart(*next_stalls: Stall) -> float:
        """SIGKILL the running process, drop what it left held, start a new one."""
        runs[-1].kill()
        proxy.release_stalled()
        proxy.stalls[:] = list(next_stalls)
        killed = time.monotonic()
        runs.append(rig.operator(proxy, f"run-{len(runs)}"))
        return killed

    with GateWatch(cluster, ns, name) as watch:
        # 1. After the status that names the canary, before a child that waits for it (a
        # canary Service; its ConfigMap and Deployment go out beside the status write, as
        # creates only, kube.writer).
        first = Stall(
            matches=path_matches("POST", rf"/namespaces/{ns}/services$"),
            after=(lambda e: status_put(e) and e.status == 200,),
        )
        # The Service's create goes to the background and the reconcile goes on: hold the
        # check's create too, or a slow test finds it made before the second point.
        no_check_yet = Stall(matches=path_matches("POST", rf"/namespaces/{ns}/paritychecks$"))
        proxy.stalls.extend([first, no_check_yet])
        idep.apply(dtype="float16")
        first.wait(90)
        canary = idep.status()["canaryRevision"]
        check_name = f"{name}-{canary}"
        assert first.taken is not None
        assert first.taken.created
        held_service = first.taken.created
        # The status is written, the held Service is not.
        missing = cluster.kubectl("get", "service", held_service, "-n", ns, check=False)
        assert missing.returncode != 0, missing.stdout
        assert "NotFound" in missing.stderr, missing.stderr

        # 2. After the canary's ParityCheck is created, before its uid is recorded (and
        # before its runner's ServiceAccount is made: that create is held too).
        created = answered("POST", rf"/namespaces/{ns}/paritychecks$", 201)
        second = Stall(matches=status_put, after=(created,))
        account_held = Stall(
            matches=path_matches("POST", rf"/namespaces/{runners}/serviceaccounts$"),
            after=(created,),
        )
        kill_and_restart(second, account_held)
        second.wait(120)
        unbound = cluster.get_json("pcheck", check_name, "-n", ns)
        record = {r["hash"]: r for r in idep.status()["revisions"]}[canary]
        assert record.get("parityCheckUid") != unbound["metadata"]["uid"]

        # 3. After the runner's ServiceAccount is created, before the check records it. The
        # check made before the kill is bound, not replaced: its spec is the one the
        # attempt recorded before creating it.
        third = Stall(
            matches=path_matches("PATCH", rf"/namespaces/{ns}/paritychecks/{check_name}/status$"),
            after=(answered("POST", rf"/namespaces/{runners}/serviceaccounts$", 201),),
        )
        kill_and_restart(third)
        third.wait(120)
        replaced = cluster.get_json("pcheck", check_name, "-n", ns)
        assert replaced["metadata"]["uid"] == unbound["metadata"]["uid"]
        record = {r["hash"]: r for r in idep.status()["revisions"]}[canary]
        assert record.get("parityCheckUid") == unbound["metadata"]["uid"]
        assert not (replaced.get("status") or {}).get("runnerServiceAccount")

        # The last process finishes: the runner recorded, its Job started, once.
        restarted = kill_and_restart()

        def running() -> dict[str, Any] | None:
            body: dict[str, Any] = cluster.get_json("pcheck", check_name, "-n", ns)
            account = (body.get("status") or {}).get("runnerServiceAccount")
            return body if account and runner_jobs(cluster, ns, check_name) else None

        body = wait_for(running, 120, "the runner recorded and its Job started")
        converged = time.monotonic() - restarted
        settle()
        assert_gate_held(watch, stable, REPLICAS)
    assert_no_duplicates(idep, {stable, canary}, canary)
    assert body["metadata"]["uid"] == replaced["metadata"]["uid"]
    assert len(runner_jobs(cluster, ns, check_name)) == 1
    idep.verdict(check_name, "Passed", passed=True)
    _promoted(idep, canary)
    _report(
        f"killed mid-write at 3 points; from the last restart to the runner started: "
        f"{converged:.1f}s"
    )


def test_an_operator_killed_mid_promotion_finishes_it_once_and_promotes_nothing_else(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """The verdict passes; the operator writes the promotion into status, then is killed
    with SIGKILL before it resizes a single Deployment (the proxy holds that write). A new
    process finishes the promotion from what it observes: the passed canary at full size,
    the old stable scaled to 0 and kept, one ParityCheck, nothing else promoted."""
    proxy = rig.proxy()
    ns, name = idep_namespace, "qwen"
    idep = RunnerIdep(cluster, ns, deployment_manifest(name))
    runs = [rig.operator(proxy, "run-0")]
    stable, canary, check = mid_canary(idep)
    status_put = path_matches("PUT", rf"/namespaces/{ns}/inferencedeployments/{name}/status$")
    # The promotion's Deployment writes go out at once (kube.writer's pool): each held.
    held, held_stable = (
        Stall(
            matches=path_matches("PATCH", rf"/namespaces/{ns}/deployments/{name}-{revision}$"),
            after=(lambda e: status_put(e) and e.status == 200,),
        )
        for revision in (canary, stable)
    )
    with GateWatch(cluster, ns, name) as watch:
        proxy.stalls += [held, held_stable]
        idep.verdict(check["metadata"]["name"], "Passed", passed=True)
        held.wait(90)
        runs[-1].kill()
        proxy.release_stalled()
        proxy.stalls.clear()
        # Killed between the decision and its first child write: status says promoted, the
        # Deployments are as they were.
        assert idep.status()["stableRevision"] == canary
        assert idep.revisions() == {stable: REPLICAS, canary: 1}
        restarted = time.monotonic()
        runs.append(rig.operator(proxy, "run-1"))
        _retired(idep, stable, canary)
        converged = time.monotonic() - restarted
        settle()
        assert watch.stables() == {stable, canary}, watch.stables()
        assert watch.sizes(canary) <= {1, REPLICAS}, watch.sizes(canary)
    status = idep.wait_phase("Stable")
    assert status["stableRevision"] == canary
    assert {r["hash"] for r in status["revisions"] if r.get("promotedAt")} == {stable, canary}
    assert idep.revisions() == {stable: 0, canary: REPLICAS}
    assert_no_duplicates(idep, {stable, canary}, canary)
    _report(f"killed mid-promotion: promotion finished {converged:.1f}s after the restart")


def test_a_promotion_whose_service_write_meets_conflicts_keeps_the_old_stable_serving(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """The canary's check passes; every write of the stable Service is answered 409 Conflict
    (as a write from a stale copy is) while the promotion moves traffic. The promoted
    revision grows to full size, the move is retried and refused, and meanwhile the Service
    selects the old stable and the old stable keeps every pod. Once the writes go through,
    the old stable keeps its pods scaleDownDelaySeconds more after the Service was seen
    moved, then is scaled to 0."""
    proxy = rig.proxy()
    ns, name, delay = idep_namespace, "qwen", 10
    idep = RunnerIdep(cluster, ns, deployment_manifest(name, scale_down_delay=delay))
    rig.operator(proxy, "run-0")
    stable, canary, check = mid_canary(idep)
    conflict = Conflict(path_matches("PATCH", rf"/namespaces/{ns}/services/{name}$"))
    proxy.conflicts.append(conflict)
    with GateWatch(cluster, ns, name) as watch:
        idep.verdict(check["metadata"]["name"], "Passed", passed=True)
        _promoted(idep, canary)
        with explained(idep):
            wait_for(lambda: conflict.answered >= 3, 90, "the Service's move refused, retried")
            settle()
            status = idep.status()
            assert status["promotion"]["step"] == "Switching", status["promotion"]
            assert idep.condition("Progressing")["reason"] == "PromotionSwitching"
            assert idep.revisions() == {stable: REPLICAS, canary: REPLICAS}
            service = cluster.get_json("service", name, "-n", ns)
            assert service["spec"]["selector"]["infergate.io/revision"] == stable
            assert idep.condition("Available")["status"] == "True"
        refused = conflict.answered
        lifted = time.monotonic()
        conflict.lift()
        _retired(idep, stable, canary)
        settle()
    moved = watch.first_selected(canary)
    dropped = watch.first_size(stable, 0)
    assert moved is not None, "the Service was never seen selecting the promoted revision"
    assert dropped is not None, watch.sizes(stable)
    # The old stable was at full size in every state served until the move, and went only
    # the delay after it (a second of slack for the two watches' own clocks).
    assert moved > lifted
    assert dropped - moved >= delay - 1, f"scaled down {dropped - moved:.1f}s after the move"
    assert watch.sizes(stable) == {REPLICAS, 0}, watch.sizes(stable)
    assert watch.stables() == {stable, canary}
    status = idep.wait_phase("Stable")
    assert "promotion" not in status
    assert_no_duplicates(idep, {stable, canary}, canary)
    _report(
        f"promotion under a refused Service write: {refused} writes refused; old stable scaled "
        f"down {dropped - moved:.1f}s after the Service was seen moved (delay {delay}s)"
    )


class Endpoints:
    """The stable Service's selected revision and how many pods it selects are Ready and
    not terminating (what the EndpointSlice controller publishes as ready endpoints),
    sampled every half second. The local cluster publishes no slices for KWOK's pods
    (their addresses are loopback ones, which the API server refuses in EndpointSlices),
    so the pods are counted as the controller would count them."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.samples: list[tuple[float, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            service = self.cluster.kubectl(
                "get", "service", self.name, "-n", self.namespace, "-o", "json", check=False
            )  # fmt: skip
            if service.returncode == 0:
                selector = json.loads(service.stdout)["spec"]["selector"]
                pods = self.cluster.kubectl(
                    "get", "pods", "-n", self.namespace, "-o", "json",
                    "-l", ",".join(f"{k}={v}" for k, v in sorted(selector.items())), check=False,
                )  # fmt: skip
                if pods.returncode == 0:
                    ready = sum(
                        1
                        for pod in json.loads(pods.stdout)["items"]
                        if not pod["metadata"].get("deletionTimestamp")
                        and any(
                            c["type"] == "Ready" and c["status"] == "True"
                            for c in (pod.get("status") or {}).get("conditions") or []
                        )
                    )
                    self.samples.append((time.monotonic(), selector[REVISION_LABEL], ready))
            self._stop.wait(0.5)

    def __enter__(self) -> Endpoints:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _node_of(cluster: Cluster, namespace: str, name: str, revision: str) -> dict[str, int]:
    """Node -> pods of the revision on it (pods not being deleted)."""
    pods = cluster.get_json(
        "pods", "-n", namespace,
        "-l", f"infergate.io/deployment={name},infergate.io/revision={revision}",
    )["items"]  # fmt: skip
    placed: dict[str, int] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and not pod["metadata"].get("deletionTimestamp"):
            placed[node] = placed.get(node, 0) + 1
    return placed


def test_a_node_lost_between_the_switch_and_the_scale_down_keeps_the_stable_serving(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """The promoted revision is at full size and the Service moved to it; during the
    scaleDownDelaySeconds that follow, the node of one of its pods is lost (its Node object
    deleted, as a cloud provider's node controller does for a vanished machine; the pod
    garbage collector then deletes the pods bound to it). The Service keeps selecting a
    revision with a Ready pod at every moment sampled, the promotion ends, and the new
    stable is back at full size on the remaining nodes.

    The pods are KWOK's (no engine runs): serving is judged by the Ready pods the
    Service selects, the endpoints a client is sent to."""
    proxy = rig.proxy()
    ns, name, delay = idep_namespace, "qwen", 30
    idep = RunnerIdep(cluster, ns, deployment_manifest(name, scale_down_delay=delay))
    rig.operator(proxy, "run-0")
    stable, canary, check = mid_canary(idep)
    lost: dict[str, Any] | None = None
    try:
        with Endpoints(cluster, ns, name) as endpoints:
            idep.verdict(check["metadata"]["name"], "Passed", passed=True)
            _promoted(idep, canary)
            with explained(idep):
                idep.wait(
                    "the move seen, the old stable kept for the delay",
                    lambda s: (s.get("promotion") or {}).get("step") == "ScaleDownDelay",
                    90,
                )
            switched = time.monotonic()
            assert idep.revisions() == {stable: REPLICAS, canary: REPLICAS}
            placed = _node_of(cluster, ns, name, canary)
            # A node holding one of the new stable's pods, the other elsewhere if the
            # scheduler spread them.
            node = min(placed, key=lambda n: placed[n])
            lost = cluster.get_json("node", node)
            cluster.kubectl("delete", "node", node, "--wait=false")
            deleted = time.monotonic()
            with explained(idep):
                wait_for(
                    lambda: node not in _node_of(cluster, ns, name, canary) or None,
                    120,
                    f"the new stable's pods on {node} gone",
                )
                gone = time.monotonic()
                _retired(idep, stable, canary)
                wait_for(
                    lambda: sum(_node_of(cluster, ns, name, canary).values()) == REPLICAS or None,
                    120,
                    "the new stable back at full size",
                )
                status = idep.wait_phase("Stable", timeout=60)
            settle()
    finally:
        if lost is not None:
            _restore_node(cluster, lost)
    assert status["stableRevision"] == canary
    assert "promotion" not in status
    after = [(t, rev, ready) for t, rev, ready in endpoints.samples if t >= switched]
    assert after, "no endpoint sampled after the switch"
    empty = [(round(t - deleted, 1), rev) for t, rev, ready in after if ready == 0]
    assert empty == [], f"the Service selected no Ready pod (s after the node loss): {empty}"
    assert {rev for _, rev, _ in after} == {canary}, {rev for _, rev, _ in after}
    assert_no_duplicates(idep, {stable, canary}, canary)
    _report(
        f"node {node} lost {deleted - switched:.1f}s into the scale-down delay ({delay}s): "
        f"its pods gone {gone - deleted:.1f}s later; the Service selected a Ready pod in all "
        f"{len(after)} samples after the switch (min {min(r for _, _, r in after)})"
    )


def _restore_node(cluster: Cluster, node: dict[str, Any]) -> None:
    """The lost node registered again (as its machine coming back would), Ready."""
    from infergate_dev.localcluster.nodes import NODES, node_object

    name = node["metadata"]["name"]
    wait_for(
        lambda: cluster.kubectl("get", "node", name, check=False).returncode != 0 or None,
        60,
        f"node {name} deleted",
    )
    [shape] = [n for n in NODES if n.name == name]
    cluster.kubectl("create", "-f", "-", input=json.dumps(node_object(shape)))

    def ready() -> bool | None:
        body = cluster.get_json("node", name)
        conditions = (body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) or None

    wait_for(ready, 60, f"node {name} Ready again")


def test_a_storm_of_conflicts_throttling_and_server_errors_is_ridden_out_with_backoff(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """Three deployments start canaries into a storm of 429s and 503s (Retry-After 2s), 500s
    and 409s on two of three requests, for 20 seconds or 400 answers: no stable moves,
    each rollout completes once it passes, the operator backs off meanwhile and never
    retries a request sooner than the server asked."""
    proxy = rig.proxy()
    rig.operator(proxy, "storm")
    ideps = [RunnerIdep(cluster, idep_namespace, deployment_manifest(f"qwen{i}")) for i in range(3)]
    for idep in ideps:
        idep.apply()
    stables = [idep.wait_stable(timeout=90) for idep in ideps]
    storm = Storm(seconds=20, count=400, retry_after=2)
    proxy.storms.append(storm)
    with contextlib.ExitStack() as stack:
        watches = [stack.enter_context(GateWatch(cluster, idep_namespace, i.name)) for i in ideps]
        storm.start()
        for idep in ideps:
            idep.apply(dtype="float16")
        wait_for(lambda: storm.ended, 60, "the storm to end")
        with explained(*ideps):
            checks = [idep.wait_check(timeout=120) for idep in ideps]
        for watch, stable in zip(watches, stables, strict=True):
            assert_gate_held(watch, stable, REPLICAS)
    for idep, stable, (canary, check) in zip(ideps, stables, checks, strict=True):
        idep.verdict(check["metadata"]["name"], "Passed", passed=True)
        _promoted(idep, canary)
        _retired(idep, stable, canary)
        assert_no_duplicates(idep, {stable, canary}, canary)

    exchanges = proxy.exchanges()
    assert storm.started is not None
    end = storm.ended or storm.started + storm.seconds
    during = [e for e in exchanges if storm.started <= e.at < end and not e.watch]
    injected = [e for e in during if e.injected]
    assert 0 < len(injected) <= storm.count
    assert {e.status for e in injected} == {409, 429, 500, 503}
    # Retry-After honoured: a request answered 429 is not sent again sooner, by anyone; nor
    # one answered 503 by the operator's own client. kopf (its watches' lists) honours
    # Retry-After on 429 only (kopf/_cogs/clients/api.py), and backs off 1s, 2s, 4s on a 5xx.
    early = []
    for index, answered in enumerate(exchanges):
        if answered.retry_after is None:
            continue
        if answered.status == 503 and answered.agent.startswith("kopf/"):
            continue
        again = next(
            (
                e
                for e in exchanges[index + 1 :]
                if (e.method, e.path, e.agent, e.created)
                == (answered.method, answered.path, answered.agent, answered.created)
            ),
            None,
        )
        if again is not None and again.at - answered.at < answered.retry_after - 0.05:
            gap = again.at - answered.at
            early.append(f"{answered.method} {answered.path} again after {gap:.2f}s")
    assert early == [], early
    seconds = end - storm.started
    before = [e for e in exchanges if storm.started - seconds <= e.at < storm.started]
    counts = ", ".join(
        f"{sum(e.status == code for e in injected)} x {code}" for code in (409, 429, 500, 503)
    )
    _report(
        f"storm over {seconds:.1f}s: {len(injected)} injected answers ({counts}), "
        f"{len(during) / seconds:.2f} requests/s through the proxy during it "
        f"(peak {_peak(during):d} in one second), {len(before) / seconds:.2f}/s in as long "
        "before it"
    )


def _peak(exchanges: list[Exchange]) -> int:
    """The most requests in any one-second window."""
    times = sorted(e.at for e in exchanges)
    return max((sum(1 for t in times if start <= t < start + 1) for start in times), default=0)


def test_sigterm_mid_call_ends_the_operator_within_seconds_and_gives_up_the_lease(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    """A pod's termination while a reconcile's status write hangs in the API server (the
    proxy holds it unanswered): kopf stops, its cleanup gives the Lease up, and the process
    ends within seconds, not when the held call times out or its threads are joined."""
    proxy = rig.proxy()
    ns, name = idep_namespace, "qwen"
    idep = RunnerIdep(cluster, ns, deployment_manifest(name))
    process = rig.operator(proxy, "sigterm", leader_election=True)
    idep.apply()
    idep.wait_stable(timeout=90)
    held = Stall(
        matches=path_matches("PUT", rf"/namespaces/{ns}/inferencedeployments/{name}/status$")
    )
    proxy.stalls.append(held)
    idep.apply(dtype="float16")  # a new revision: the reconcile writes status, which is held
    held.wait(60)
    assert process.process is not None
    os.kill(process.process.pid, signal.SIGTERM)
    sent = time.monotonic()
    process.process.wait(60)
    took = time.monotonic() - sent
    proxy.release_stalled()
    proxy.stalls.clear()
    assert took < 10, f"the operator took {took:.1f}s to exit after SIGTERM"
    lease = cluster.get_json("lease", "infergate-operator", "-n", rig.install.namespace)
    assert not lease["spec"].get("holderIdentity"), lease["spec"]
    _report(f"SIGTERM with a status write held: exited after {took:.1f}s")
