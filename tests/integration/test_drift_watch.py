"""The drift watch against the real local cluster, with the operator running as a pod and
keeping golden records: a stable revision with a record is re-checked on schedule, one run
at a time; a Failed run sets Drifted=True with a Warning Event and the metric, a Passed one
clears it. Verdicts are written by the test, bound the way the runner binds them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    golden_namespace,
    golden_operator,
)

pytestmark = pytest.mark.cluster
__all__ = ["golden_namespace", "golden_operator"]


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _entry(namespace: str, revision: str, role: str) -> str:
    return f"{namespace}/qwen/{revision}-20260105T090000000000Z-{role}-0a1b2c3d"


def _drift_checks(idep: Idep) -> list[dict[str, Any]]:
    listed = idep.cluster.get_json(
        "pcheck", "-n", idep.namespace, "-l", "infergate.io/check-purpose=drift"
    )["items"]
    return list(listed)


def _drifted(status: dict[str, Any]) -> dict[str, Any]:
    """The Drifted condition of a status (empty when absent)."""
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def _drift_sample(operator: OperatorInstall, namespace: str) -> str | None:
    for line in operator.metrics().splitlines():
        if line.startswith("infergate_drift_detected{") and f'namespace="{namespace}"' in line:
            return line.rsplit(" ", 1)[1]
    return None


def test_a_stable_revision_is_watched_and_its_drift_reported(
    cluster: Cluster, golden_namespace: str, golden_operator: OperatorInstall
) -> None:
    manifest = deployment_manifest()
    manifest["spec"]["rollout"]["parity"]["watch"] = {"intervalSeconds": 300}
    idep = Idep(cluster, golden_namespace, manifest)
    idep.apply()
    old = idep.wait_stable()
    # The first revision was never checked, so no record of it exists: nothing can run.
    idep.wait("no golden record", lambda s: _drifted(s).get("reason") == "NoGoldenRecord")

    # A canary whose check passes stores both sides' records; it becomes stable.
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.verdict(
        check["metadata"]["name"], "Passed", passed=True,
        metrics={"tokenMatchRate": 1.0},
        extra={"golden": {"stored": True, "entries": [
            _entry(golden_namespace, old, "baseline"),
            _entry(golden_namespace, canary, "candidate"),
        ]}},
    )  # fmt: skip
    status = idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=90)
    status = idep.wait(
        "the drift watch waiting for its first run",
        lambda s: _drifted(s).get("reason") == "DriftWatchWaiting",
    )
    record = next(r for r in status["revisions"] if r["hash"] == canary)
    assert _time(status["drift"]["nextRun"]) == _time(record["promotedAt"]) + timedelta(seconds=300)
    assert status["drift"]["revision"] == canary
    assert _drift_checks(idep) == []

    # Every minute instead: the first run is due at once.
    idep.manifest["spec"]["rollout"]["parity"]["watch"] = {"schedule": "* * * * *"}
    idep.apply()
    name = f"qwen-{canary}-drift1"
    run = wait_for(
        lambda: next((c for c in _drift_checks(idep) if c["metadata"]["name"] == name), None),
        60,
        f"drift run {name}",
    )
    assert run["spec"]["baseline"] == {"golden": {"revision": canary}}
    assert run["spec"]["candidate"] == {
        "inferenceDeploymentRef": {"name": "qwen"},
        "revision": canary,
    }
    assert run["spec"]["profile"] == "strict"
    [owner] = run["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("InferenceDeployment", "qwen")
    idep.wait_event("DriftCheckCreated")
    assert idep.status()["drift"]["running"] is True

    # One at a time: the schedule comes round again while the run goes on.
    time.sleep(65)
    assert [c["metadata"]["name"] for c in _drift_checks(idep)] == [name]
    assert idep.status()["stableRevision"] == canary

    idep.verdict(name, "Failed", passed=False)
    idep.wait("Drifted", lambda s: _drifted(s).get("status") == "True")
    drifted = _drifted(idep.status())
    assert drifted["reason"] == "DriftDetected"
    assert name in drifted["message"]
    event = idep.wait_event("DriftDetected")
    assert event["type"] == "Warning"
    status = idep.status()
    assert (status["drift"]["lastVerdict"], status["drift"]["lastVerdictCheck"]) == ("Failed", name)
    # onDrift defaults to alert: the stable revision stays and keeps serving.
    assert (status["stableRevision"], status["phase"]) == (canary, "Stable")
    wait_for(lambda: _drift_sample(golden_operator, golden_namespace) == "1.0", 30, "drift gauge 1")

    # The next run (a minute later at most) passes: the drift is cleared.
    second = f"qwen-{canary}-drift2"
    wait_for(
        lambda: any(c["metadata"]["name"] == second for c in _drift_checks(idep)),
        90,
        f"drift run {second}",
    )
    idep.verdict(second, "Passed", passed=True)
    idep.wait("no drift", lambda s: _drifted(s).get("status") == "False")
    assert _drifted(idep.status())["reason"] == "NoDriftDetected"
    assert idep.wait_event("NoDriftDetected")["type"] == "Normal"
    wait_for(lambda: _drift_sample(golden_operator, golden_namespace) == "0.0", 30, "drift gauge 0")
