"""Manual control of a rollout, by annotation and by the `infergate` CLI: promote, abort,
roll back to a retained revision, and `infergate status`."""

from __future__ import annotations

import json

import pytest

from tests.harness import Cluster
from tests.integration.controller_support import (
    Idep,
    deployment_manifest,
    idep_namespace,
    infergate_cli,
    operator,
)

pytestmark = pytest.mark.cluster
__all__ = ["idep_namespace", "operator"]


def _annotate(cluster: Cluster, idep: Idep, annotation: str) -> None:
    cluster.kubectl("annotate", "idep", idep.name, "-n", idep.namespace, annotation)


def _waiting_canary(idep: Idep) -> str:
    """A canary whose check passed, waiting for a person (autoPromote is off)."""
    idep.wait_stable()
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait(
        "a canary awaiting promotion",
        lambda s: any(
            c["type"] == "Progressing" and c["reason"] == "AwaitingPromotion"
            for c in s.get("conditions") or []
        ),
    )
    return canary


def test_without_auto_promote_a_person_promotes_by_annotation(
    cluster: Cluster, idep_namespace: str
) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest(auto_promote=False))
    idep.apply()
    canary = _waiting_canary(idep)
    assert idep.status()["phase"] == "Verifying"
    assert idep.status()["stableRevision"] != canary

    _annotate(cluster, idep, f"infergate.io/promote={canary}")
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary)
    idep.wait_phase("Stable")
    assert "infergate.io/promote" not in idep.get()["metadata"].get("annotations", {})
    idep.wait_event("ManualAction")


def test_promote_and_status_by_cli(cluster: Cluster, idep_namespace: str) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest(auto_promote=False))
    idep.apply()
    canary = _waiting_canary(idep)

    shown = infergate_cli(cluster, "status", "qwen", "-n", idep_namespace)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"canary:   {canary}" in shown.stdout
    assert "AwaitingPromotion" in shown.stdout

    promoted = infergate_cli(cluster, "promote", "qwen", "-n", idep_namespace, "--wait")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert f"revision {canary} is stable" in promoted.stdout
    assert idep.status()["stableRevision"] == canary

    as_json = infergate_cli(cluster, "status", "qwen", "-n", idep_namespace, "-o", "json")
    assert json.loads(as_json.stdout)["stableRevision"] == canary
    nothing = infergate_cli(cluster, "promote", "qwen", "-n", idep_namespace)
    assert nothing.returncode == 1
    assert "no canary to promote" in nothing.stdout


def test_abort_by_annotation_and_by_cli(cluster: Cluster, idep_namespace: str) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest(auto_promote=False))
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, _ = idep.wait_check()
    _annotate(cluster, idep, "infergate.io/abort=true")
    status = idep.wait_phase("RolledBack")
    assert status["stableRevision"] == stable
    # The record says who aborted (as the API server authenticated them) and the verdict.
    message = {r["hash"]: r for r in status["revisions"]}[canary]["message"]
    assert message.startswith("aborted by "), message
    assert message.endswith("; parity verdict Pending"), message
    idep.wait("canary removed", lambda _: idep.revisions() == {stable: 2})

    idep.apply(dtype="float32")
    second, _ = idep.wait_check()
    aborted = infergate_cli(cluster, "abort", "qwen", "-n", idep_namespace, "--wait")
    assert aborted.returncode == 0, aborted.stdout + aborted.stderr
    status = idep.status()
    assert status["stableRevision"] == stable
    assert {r["hash"]: r for r in status["revisions"]}[second]["rejected"] is True


def test_rollback_by_annotation_and_by_cli(cluster: Cluster, idep_namespace: str) -> None:
    idep = Idep(cluster, idep_namespace, deployment_manifest())
    idep.apply()
    first = idep.wait_stable()
    idep.apply(dtype="float16")
    second, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True)
    idep.wait("promotion", lambda s: s.get("stableRevision") == second)
    idep.wait_phase("Stable")

    _annotate(cluster, idep, f"infergate.io/rollback-to={first}")
    idep.wait("rollback", lambda s: s.get("stableRevision") == first)
    idep.wait("sizes after rollback", lambda _: idep.revisions() == {first: 2, second: 0})
    status = idep.wait_phase("RolledBack")
    assert "canaryRevision" not in status  # the spec's revision is not rolled out again
    assert idep.table()["STABLE"] == first

    unknown = infergate_cli(
        cluster,
        "rollback",
        "qwen",
        "-n",
        idep_namespace,
        "--to",
        "0123456789",
        "--wait",
        "--timeout",
        "30",
    )
    assert unknown.returncode == 1
    assert idep.wait_event("ManualActionRefused")["type"] == "Warning"

    back = infergate_cli(
        cluster, "rollback", "qwen", "-n", idep_namespace, "--to", second, "--wait"
    )
    assert back.returncode == 0, back.stdout + back.stderr
    assert idep.status()["stableRevision"] == second
    idep.wait(
        "sizes after the second rollback", lambda _: idep.revisions() == {first: 0, second: 2}
    )
