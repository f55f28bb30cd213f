"""The drift watch on real engines: quiet on an unchanged stable revision, and a drift
flagged when the model files the stable pods load change under them with no spec change.

An operator of its own keeps golden records on a claim of its own namespace, the runners'
(tests/e2e/golden.py), and allows file:// models from a directory the test owns: the engines load a copy of the
fixture model made for this test, so changing its weights never touches the shared cache.

The first revision is never checked, so it has no golden record and the watch says so
(`NoGoldenRecord`). A benign canary (another seed: bit-identical on MindFormers float32)
passes its check, which stores both sides' records, and is promoted: the watched stable
revision has a record. Runs then every minute, back to back (each outlasts the minute).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infergate.fixture.variants import WEIGHTS, corrupt_layer
from tests.e2e.canary import Rollout, engines_start, mindformers_deployment
from tests.e2e.golden import golden_namespace as golden_claim_namespace
from tests.e2e.golden import install_golden_operator
from tests.e2e.support import Operator, Stopwatch, fixture_model, wait_check_ended
from tests.harness import Cluster, wait_for

__all__ = ["engines_start"]  # autouse: this module's tests need startable engine pods

# The canary's check (36 prompts on two MindFormers engines) and several drift runs (36
# prompts on one engine each, back to back): 15 minutes or more on 2 cores, past the
# default per-test timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

EVERY_MINUTE = {"schedule": "* * * * *"}
# Between the quiet runs and the change, the watch is held off (once a day) so that no run
# is in flight while the stable pods restart; a watch edit makes no new revision.
HELD_OFF = {"intervalSeconds": 86400}
QUIET_RUNS = 3


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test's own copy of the fixture model: the only files it changes."""
    model = tmp_path_factory.mktemp("drift-models") / fixture_model().name
    shutil.copytree(fixture_model(), model)
    return model


@pytest.fixture(scope="module")
def golden_operator(cluster: Cluster, model_copy: Path) -> Iterator[Operator]:
    """An operator of its own that keeps golden records and allows the model copy."""
    yield from install_golden_operator(
        cluster, extra_args=[f"--allow-host-path={model_copy.parent}"]
    )


@pytest.fixture
def golden_namespace(
    golden_operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace of that operator; its runner Jobs mount the claim of the operator's."""
    yield from golden_claim_namespace(golden_operator, cluster, request)


def _deployment(model: Path, watch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    manifest = mindformers_deployment(**kwargs)
    manifest["spec"]["model"]["uri"] = f"file://{model}"
    manifest["spec"]["rollout"]["parity"]["watch"] = copy.deepcopy(watch)
    return manifest


def _drifted(status: dict[str, Any]) -> dict[str, Any]:
    """The Drifted condition of a status (empty when absent)."""
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def _events(rollout: Rollout) -> list[dict[str, Any]]:
    listed = rollout.cluster.get_json(
        "events", "-n", rollout.namespace,
        "--field-selector", f"involvedObject.kind=InferenceDeployment,involvedObject.name={rollout.name}",
    )["items"]  # fmt: skip
    return list(listed)


def _drift_warning(event: dict[str, Any]) -> bool:
    return event["type"] == "Warning" and str(event["reason"]).startswith("Drift")


def _run(rollout: Rollout, name: str) -> dict[str, Any]:
    """The drift run `name` once the watch has made it."""

    def made() -> dict[str, Any] | None:
        found = rollout.cluster.kubectl(
            "get", "paritychecks.infergate.io", name, "-n", rollout.namespace, "-o", "json",
            "--ignore-not-found",
        ).stdout  # fmt: skip
        return json.loads(found) if found.strip() else None

    try:
        return wait_for(made, 300, f"drift run {name}", interval=1.0)
    except AssertionError as err:
        raise AssertionError(f"{err}\nstatus: {rollout.status()}") from None


def _ended(rollout: Rollout, name: str, clock: Stopwatch) -> dict[str, Any]:
    try:
        status = wait_check_ended(rollout.cluster, rollout.namespace, name, 1200)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{rollout.logs()}") from None
    verdict = status.get("verdict") or {}
    reasons = [r.get("message") or r.get("metric") for r in verdict.get("reasons") or []]
    clock.mark(
        f"{name}: {status['phase']}, progress {status.get('progress')}, summary: "
        f"{verdict.get('summary')}, reasons: {reasons}, metrics: {status.get('metrics')}"
    )
    return status


def _verdict_seen(rollout: Rollout, name: str) -> dict[str, Any]:
    """The deployment's status once the watch has counted run `name`'s verdict."""
    return rollout.wait(
        lambda s: (s.get("drift") or {}).get("lastVerdictCheck") == name,
        120,
        f"the drift watch to count {name}",
    )


def test_the_drift_watch_is_quiet_on_an_unchanged_stable_and_flags_changed_weights(
    cluster: Cluster, golden_namespace: str, model_copy: Path
) -> None:
    rollout, clock = Rollout(cluster, golden_namespace), Stopwatch()
    rollout.apply(_deployment(model_copy, EVERY_MINUTE))
    first = rollout.wait_stable()
    clock.mark(f"stable revision {first}")
    # Never checked, so no record of it exists: the watch cannot run.
    status = rollout.wait(
        lambda s: _drifted(s).get("reason") == "NoGoldenRecord", 120, "NoGoldenRecord"
    )
    assert _drifted(status)["status"] == "Unknown"

    # A benign canary: its Passed check stores both sides' records, and it is promoted.
    rollout.apply(_deployment(model_copy, EVERY_MINUTE, seed=43))
    stable = rollout.wait_canary()
    clock.mark(f"canary revision {stable}")
    rollout.wait(
        lambda s: _drifted(s).get("reason") == "DriftWatchPaused", 120, "the watch to pause"
    )
    check = rollout.wait_check(stable)
    clock.mark(f"canary check {check['phase']}, golden {check.get('golden')}")
    assert check["phase"] == "Passed", check
    assert check["metrics"]["tokenMatchRate"] == 1.0
    assert check["golden"]["stored"] is True, check["golden"]
    assert len(check["golden"]["entries"]) == 2
    rollout.wait(
        lambda s: s.get("stableRevision") == stable and s.get("phase") == "Stable",
        300,
        "the canary to be promoted",
    )
    clock.mark("promoted")
    revisions = sorted(r["hash"] for r in rollout.status()["revisions"])

    # (a) The unchanged stable revision, run after run: each Passed, Drifted False.
    for number in range(1, QUIET_RUNS + 1):
        name = f"qwen-{stable}-drift{number}"
        run = _run(rollout, name)
        assert run["spec"]["baseline"] == {"golden": {"revision": stable}}
        assert run["spec"]["candidate"]["revision"] == stable
        assert run["spec"]["profile"] == "strict"
        assert run["metadata"]["labels"]["infergate.io/check-purpose"] == "drift"
        if number == QUIET_RUNS:
            rollout.apply(_deployment(model_copy, HELD_OFF, seed=43))
        verdict = _ended(rollout, name, clock)
        assert verdict["phase"] == "Passed", verdict
        assert verdict["baselineRevision"] == verdict["candidateRevision"] == stable
        assert verdict["metrics"]["tokenMatchRate"] == 1.0
        status = _verdict_seen(rollout, name)
        drifted = _drifted(status)
        assert (drifted["status"], drifted["reason"]) == ("False", "NoDriftDetected"), drifted
        assert status["drift"]["lastVerdict"] == "Passed"
        assert (status["stableRevision"], status["phase"]) == (stable, "Stable")
        assert not status.get("canaryRevision")
    assert not [e for e in _events(rollout) if _drift_warning(e)]

    # (b) The weights the stable pods load change under them, with no spec change; the
    # ReplicaSet restarts the pods on the changed files.
    # One layer's matrices get 5% noise (a damaged shard, say).
    changed = model_copy.parent / "changed"
    corrupt_layer(layer=1, relative_noise=0.05, seed=7)(model_copy, changed)
    (changed / WEIGHTS).replace(model_copy / WEIGHTS)
    old_pods = {p["metadata"]["uid"] for p in rollout.live_pods(stable)}
    assert old_pods
    cluster.kubectl(
        "delete", "pods", "-n", golden_namespace, "-l", f"infergate.io/revision={stable}",
        "--wait=false",
    )  # fmt: skip

    def restarted() -> bool:
        pods = rollout.live_pods(stable)
        return bool(pods) and all(
            p["metadata"]["uid"] not in old_pods
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
            for p in pods
        )

    wait_for(restarted, 600, f"stable {stable} pods to restart on the changed files", 2.0)
    clock.mark("weights changed, stable pods restarted")
    assert rollout.status()["stableRevision"] == stable

    rollout.apply(_deployment(model_copy, EVERY_MINUTE, seed=43))
    name = f"qwen-{stable}-drift{QUIET_RUNS + 1}"
    _run(rollout, name)
    rollout.apply(_deployment(model_copy, HELD_OFF, seed=43))  # this run is the last
    verdict = _ended(rollout, name, clock)
    assert verdict["phase"] == "Failed", verdict
    assert verdict["baselineRevision"] == verdict["candidateRevision"] == stable
    messages = " | ".join(r.get("message") or "" for r in verdict["verdict"]["reasons"])
    assert "weights.digest" in messages, messages

    status = _verdict_seen(rollout, name)
    drifted = _drifted(status)
    assert (drifted["status"], drifted["reason"]) == ("True", "DriftDetected"), drifted
    assert name in drifted["message"]
    assert status["drift"]["lastVerdict"] == "Failed"
    event = wait_for(
        lambda: next((e for e in _events(rollout) if e["reason"] == "DriftDetected"), None),
        60,
        "the DriftDetected Event",
    )
    assert event["type"] == "Warning"
    assert name in event["message"]
    clock.mark(f"Drifted: {drifted['message']}")

    # onDrift defaults to alert: nothing else happens. The stable revision stays and serves.
    assert (status["stableRevision"], status["phase"]) == (stable, "Stable")
    assert not status.get("canaryRevision")
    assert sorted(r["hash"] for r in status["revisions"]) == revisions
    assert not [e for e in _events(rollout) if e["reason"].startswith("DriftRollback")]
    assert rollout.complete(stable)
