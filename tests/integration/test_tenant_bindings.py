"""A namespace's own team, as the attacker, against what a verdict is bound to.

The same setting as test_tenant_adversary.py (whose fixtures this module uses): the
operator installed from manifests/operator and manifests/runner as a real pod, keeping
golden records; the admission policies of manifests/admission bound to it and to the
team's namespace; one user holding the built-in `edit` role by a RoleBinding, plus the
tenant roles of manifests/tenant aggregated into it; every request of the team made by
impersonation, so the API server's RBAC and admission decide.

Verdicts are written as the runner writes them, under a real token of the check's own
runner ServiceAccount (made by the operator in the runner namespace). Where the runner's
own reading decides (the suite's content), the real parity runner runs here against the
API server with that token; the simulated pods answer nothing, and a side it would call is
recorded, never dialled. Each test's docstring names the hole it closes (experiments/
SECURITY.md, the issue-30 table).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from infergate.render.check_names import runner_account_name
from tests.harness import wait_for
from tests.integration.admission_support import recorded_runner_account
from tests.integration.controller_support import Idep, deployment_manifest, settle
from tests.integration.test_tenant_adversary import (
    Setting,
    _assert_not_promoted,
    _bound_verdict,
    _canary_in_flight,
    _runner_writes,
    installed,
    setting,
)
from tests.integration.test_tenant_sides import _Recording

pytestmark = pytest.mark.cluster
__all__ = ["installed", "setting"]

SUITE = "parity-prompts"
KEY = "suite.jsonl"
# What the canary is judged on, and what the team swaps in once the check was made.
JUDGED = [
    {"id": "capital", "text": "The capital of France is"},
    {"id": "sum", "text": "Two plus two equals"},
]
HARMLESS = [{"id": "hello", "text": "Hello"}]


def _suite_map(prompts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SUITE},
        "data": {KEY: "\n".join(json.dumps(p) for p in prompts) + "\n"},
    }


def _digest(prompts: list[dict[str, Any]]) -> str:
    from infergate.suite import config_map_suite

    return config_map_suite(_suite_map(prompts), SUITE, KEY).content_digest()


def _condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def _run_the_runner(setting: Setting, check: str) -> _Recording:
    """The check's real parity runner, under a real token of the ServiceAccount the operator
    recorded for it (in the runner namespace); what it would have dialled is recorded."""
    from infergate.kube.client import KubeClient, load_api_client
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.run import Connector, RunOptions, run_check

    account, where = wait_for(
        lambda: recorded_runner_account(setting.cluster, setting.namespace, check, setting.runners),
        120,
        f"{check}: the recorded runner ServiceAccount",
    )
    config = setting.admission.token_kubeconfig(where, account)
    api = CheckClient(KubeClient(load_api_client(str(config))), setting.namespace)
    recording = _Recording()
    run_check(
        api,
        check,
        RunOptions(wait_for_sides=5.0, progress_interval=0.0),
        connector=Connector(info=recording, health=recording.health),
    )
    return recording


def test_a_suite_swapped_after_the_check_was_made_ends_it_in_error(setting: Setting) -> None:
    """Hole: the suite ConfigMap's content was read at run time, while the spec digest
    covered only its name: swapping in harmless prompts after the check was made passed a
    harmful canary. The team, which may edit its ConfigMaps, swaps them once the operator
    made the canary's check. The check pins the content it was made for
    (spec.suite.digest); the real runner, reading the ConfigMap, ends it in Error
    (SuiteChanged) before it calls either side; the canary is rolled back, never promoted,
    and the stable keeps serving."""
    made = setting.team_applies(_suite_map(JUDGED))
    assert made.allowed, made.stderr
    manifest = deployment_manifest()
    manifest["spec"]["rollout"]["parity"]["suite"] = {"configMapRef": {"name": SUITE, "key": KEY}}
    idep, stable, canary, check = _canary_in_flight(setting, manifest)
    name = check["metadata"]["name"]
    assert check["spec"]["suite"] == {
        "configMapRef": {"name": SUITE, "key": KEY},
        "digest": _digest(JUDGED),
    }

    swapped = setting.team_applies(_suite_map(HARMLESS))
    assert swapped.allowed, swapped.stderr
    recording = _run_the_runner(setting, name)

    assert recording.urls == [], "the runner called a side of a check whose suite was swapped"
    body = setting.cluster.get_json("pcheck", name, "-n", setting.namespace)
    assert body["status"]["phase"] == "Error"
    assert body["status"]["verdict"]["passed"] is False
    error = _condition(body, "Error")
    assert error["reason"] == "SuiteChanged", error
    assert _digest(HARMLESS) in error["message"]
    assert _digest(JUDGED) in error["message"]
    status = idep.wait_phase("RolledBack", timeout=90)
    assert status["stableRevision"] == stable
    assert {r["hash"]: r for r in status["revisions"]}[canary]["verdict"] == "Error"
    idep.wait("the canary removed", lambda _: canary not in idep.revisions(), 90)
    _assert_not_promoted(setting, idep, stable, canary)


# -- drift runs ----------------------------------------------------------------------------


def _entry(setting: Setting, revision: str, role: str) -> str:
    """A golden store entry name, as the runner reports what it stored."""
    when = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{setting.namespace}/qwen/{revision}-{when}-{role}-0a1b2c3d"


def _drifted(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def _verdict_by_its_runner(setting: Setting, run: dict[str, Any], *, passed: bool) -> None:
    """The run's own runner (the operator makes one for every check, the team's too) writes
    a bound verdict for it."""
    name = run["metadata"]["name"]
    account, _ = wait_for(
        lambda: recorded_runner_account(setting.cluster, setting.namespace, name, setting.runners),
        120,
        f"{name}: the recorded runner ServiceAccount",
    )
    written = _runner_writes(setting, account, name, _bound_verdict(run, passed=passed))
    assert written.allowed, written.stderr


def _forge(setting: Setting, real: dict[str, Any], stable: str) -> dict[str, Any]:
    """The team's copy of the operator's drift run `real`: its labels, annotations (the
    stamped spec digest among them), controller ownerReference and spec, under the next
    free run name; as created (the name taken meanwhile by the operator: the one after)."""
    taken = {
        c["metadata"]["name"]
        for c in setting.cluster.get_json("pcheck", "-n", setting.namespace)["items"]
    }
    number = 1
    for attempt in range(3):
        while f"qwen-{stable}-drift{number}" in taken:
            number += 1
        name = f"qwen-{stable}-drift{number}"
        metadata = real["metadata"]
        forged = {
            "apiVersion": real["apiVersion"],
            "kind": "ParityCheck",
            "metadata": {
                "name": name,
                "labels": dict(metadata.get("labels") or {}),
                "annotations": {
                    k: v
                    for k, v in (metadata.get("annotations") or {}).items()
                    if k != "kubectl.kubernetes.io/last-applied-configuration"
                },
                "ownerReferences": metadata["ownerReferences"],
            },
            "spec": real["spec"],
        }
        made = setting.team("create", "-f", "-", input=json.dumps(forged))
        if made.allowed:
            body: dict[str, Any] = setting.cluster.get_json("pcheck", name, "-n", setting.namespace)
            return body
        assert "already exists" in made.stderr, (attempt, made.stderr)
        taken.add(name)
    raise AssertionError("no free drift run name in three tries")


def _ignored(idep: Idep, name: str) -> dict[str, Any]:
    return idep.wait(
        f"{name} listed as ignored",
        lambda s: name in ((s.get("drift") or {}).get("ignored") or []),
        90,
    )


def _not_bound_event(idep: Idep, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: next(
            (
                e
                for e in idep.events()
                if e["reason"] == "DriftCheckNotBound" and name in e["message"]
            ),
            None,
        ),
        60,
        f"a DriftCheckNotBound Event naming {name}",
    )


def test_a_forged_drift_run_neither_rolls_the_stable_back_nor_clears_a_real_drift(
    setting: Setting,
) -> None:
    """Hole: drift runs carried no recorded uid and their spec was never compared with the
    operator's: a user who may create ParityChecks made one named and labelled like a drift
    run, with the deployment's ownerReference copied, and its verdict rolled the stable
    back (a Failed) or cleared a real Drifted (a Passed).

    The team copies the operator's own run (labels, annotations with the stamped digest,
    controller ownerReference, the very spec) under the next run name; the operator makes
    its runner like any check's, and that runner writes a bound verdict. With onDrift
    rollback, the forged Failed rolls nothing back; after a real drift (the operator's own
    run Failed), a forged Passed clears nothing. Each forged run is listed in
    status.drift.ignored and announced (Warning DriftCheckNotBound)."""
    idep, first, canary, check = _canary_in_flight(setting)
    passed = _bound_verdict(check, passed=True) | {
        "golden": {
            "stored": True,
            "entries": [
                _entry(setting, first, "baseline"),
                _entry(setting, canary, "candidate"),
            ],
        }
    }
    written = _runner_writes(setting, check["status"]["runnerServiceAccount"]["name"],
                             check["metadata"]["name"], passed)  # fmt: skip
    assert written.allowed, written.stderr
    idep.wait("the canary promoted", lambda s: s.get("stableRevision") == canary, 90)
    stable = canary

    # The team asks for a drift run every minute, rolled back to the first revision on drift.
    parity = idep.manifest["spec"]["rollout"]["parity"]
    parity["watch"] = {"schedule": "* * * * *"}
    parity["onDrift"] = {"action": "rollback", "rollbackTo": first}
    idep.manifest["spec"]["engine"]["dtype"] = "float16"  # the promoted revision's
    applied = setting.team_applies(idep.manifest)
    assert applied.allowed, applied.stderr
    real_name = f"qwen-{stable}-drift1"
    real = wait_for(
        lambda: next(
            (
                c
                for c in setting.cluster.get_json(
                    "pcheck", "-n", setting.namespace, "-l", "infergate.io/check-purpose=drift"
                )["items"]
                if c["metadata"]["name"] == real_name
            ),
            None,
        ),
        150,
        f"the operator's drift run {real_name}",
    )
    recorded = idep.wait(
        "the run's uid recorded",
        lambda s: (s.get("drift") or {}).get("checkUid") == real["metadata"]["uid"],
        60,
    )
    assert recorded["drift"]["check"] == real_name

    # A forged Failed, under onDrift rollback.
    failed = _forge(setting, real, stable)
    _verdict_by_its_runner(setting, failed, passed=False)
    _ignored(idep, failed["metadata"]["name"])
    event = _not_bound_event(idep, failed["metadata"]["name"])
    assert event["type"] == "Warning"
    settle()
    status = idep.status()
    assert (status["stableRevision"], status["phase"]) == (stable, "Stable")
    assert _drifted(status).get("status") != "True", _drifted(status)
    assert idep.revisions()[stable] == idep.manifest["spec"]["replicas"]
    service = setting.cluster.get_json("service", idep.name, "-n", setting.namespace)
    assert service["spec"]["selector"]["infergate.io/revision"] == stable
    assert not [e for e in idep.events() if e["reason"] in ("DriftDetected", "DriftRollback")]

    # A real drift: the operator's own run Failed (alert only, so the stable stays).
    parity["onDrift"] = {"action": "alert"}
    applied = setting.team_applies(idep.manifest)
    assert applied.allowed, applied.stderr
    generation = idep.get()["metadata"]["generation"]
    idep.wait("the alert setting seen", lambda s: s.get("observedGeneration") == generation, 60)
    _verdict_by_its_runner(setting, real, passed=False)
    drifted = idep.wait("Drifted", lambda s: _drifted(s).get("status") == "True", 90)
    assert _drifted(drifted)["reason"] == "DriftDetected"
    assert real_name in _drifted(drifted)["message"]

    # A forged Passed does not clear it.
    cleared = _forge(setting, real, stable)
    _verdict_by_its_runner(setting, cleared, passed=True)
    _ignored(idep, cleared["metadata"]["name"])
    _not_bound_event(idep, cleared["metadata"]["name"])
    settle()
    status = idep.status()
    assert _drifted(status).get("status") == "True", _drifted(status)
    assert _drifted(status)["reason"] == "DriftDetected"
    assert status["drift"]["lastVerdictCheck"] != cleared["metadata"]["name"]
    assert not [e for e in idep.events() if e["reason"] == "NoDriftDetected"]
    assert status["stableRevision"] == stable


def _copy_of(check: dict[str, Any], name: str) -> dict[str, Any]:
    """The team's copy of the operator's check under `name`: its labels, annotations (the
    stamped spec digest among them), controller ownerReference and spec."""
    metadata = check["metadata"]
    return {
        "apiVersion": check["apiVersion"],
        "kind": "ParityCheck",
        "metadata": {
            "name": name,
            "labels": dict(metadata.get("labels") or {}),
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": metadata["ownerReferences"],
        },
        "spec": check["spec"],
    }


def test_a_canary_check_copied_with_its_owner_reference_never_promotes(setting: Setting) -> None:
    """Hole: "is this ours" rested on controller ownerReference uids, which can be copied.
    The team copies the operator's check of the canary (labels, annotations with the
    stamped digest, the controller ownerReference naming the InferenceDeployment, the very
    spec) under another name; then deletes the operator's check, which `edit` may, and
    makes a copy judging harmless prompts under its name. Each copy's own runner (the
    operator makes one for every check) writes a bound Passed: the canary is not promoted;
    the operator makes its check again (another uid, recorded, its own spec), and only that
    one's verdict counts."""
    idep, stable, canary, check = _canary_in_flight(setting)
    name = check["metadata"]["name"]

    beside = setting.team("create", "-f", "-", input=json.dumps(_copy_of(check, f"{name}-b")))
    assert beside.allowed, beside.stderr
    copy_beside = setting.cluster.get_json("pcheck", f"{name}-b", "-n", setting.namespace)
    _verdict_by_its_runner_of(setting, copy_beside, passed=True)
    _assert_not_promoted(setting, idep, stable, canary)

    weaker = _copy_of(check, name)
    weaker["spec"] = {**check["spec"], "suite": {"inline": HARMLESS}}
    gone = setting.team("delete", "pcheck", name, "--wait=true")
    assert gone.allowed, gone.stderr
    made = setting.team("create", "-f", "-", input=json.dumps(weaker))
    copied = _found(setting, name) if made.allowed else None
    if copied is not None and copied["spec"] == weaker["spec"]:
        # The copy's runner writes a bound Passed, unless the operator replaced the copy
        # first (then the policy refuses that runner on the operator's check).
        account = runner_account_name(copied["metadata"]["uid"])

        def runner_or_replaced() -> bool:
            runner = setting.cluster.kubectl(
                "get", "serviceaccount", account, "-n", setting.runners, check=False
            )
            now = _found(setting, name)
            gone = now is None or now["metadata"]["uid"] != copied["metadata"]["uid"]
            return runner.returncode == 0 or gone

        wait_for(runner_or_replaced, 60, f"{name}: the copy's runner, or the copy replaced")
        there = setting.cluster.kubectl(
            "get", "serviceaccount", account, "-n", setting.runners, check=False
        )
        if there.returncode == 0:
            _runner_writes(setting, account, name, _bound_verdict(copied, passed=True))
    if not made.allowed:
        assert "already exists" in made.stderr, made.stderr
    _assert_not_promoted(setting, idep, stable, canary)

    def replaced() -> dict[str, Any] | None:
        uid = {r["hash"]: r for r in idep.status()["revisions"]}[canary].get("parityCheckUid")
        body = _found(setting, name)
        if body is None or body["metadata"]["uid"] != uid:
            return None
        return body if body["metadata"]["uid"] != check["metadata"]["uid"] else None

    own = wait_for(replaced, 90, f"{name} made again by the operator and its uid recorded")
    assert own["spec"] == check["spec"]
    assert (own.get("status") or {}).get("phase") != "Passed"
    _assert_not_promoted(setting, idep, stable, canary)
    # The operator's own check, judged by its own runner, still counts.
    _verdict_by_its_runner_of(setting, own, passed=True)
    promoted = idep.wait("the canary promoted", lambda s: s.get("stableRevision") == canary, 90)
    assert promoted["stableRevision"] == canary


def _found(setting: Setting, name: str) -> dict[str, Any] | None:
    """The check `name` as stored, None when there is none."""
    found = setting.cluster.kubectl(
        "get", "pcheck", name, "-n", setting.namespace, "-o", "json", check=False
    )
    return json.loads(found.stdout) if found.returncode == 0 else None


def _verdict_by_its_runner_of(setting: Setting, check: dict[str, Any], *, passed: bool) -> None:
    """A canary check's own runner writes a bound verdict for it."""
    name = check["metadata"]["name"]
    account, _ = wait_for(
        lambda: recorded_runner_account(setting.cluster, setting.namespace, name, setting.runners),
        120,
        f"{name}: the recorded runner ServiceAccount",
    )
    written = _runner_writes(setting, account, name, _bound_verdict(check, passed=passed))
    assert written.allowed, written.stderr
