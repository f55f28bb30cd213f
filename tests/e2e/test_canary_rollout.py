"""Canary rollouts on real engines, gated by the parity check, as a user drives them.

Each test applies an InferenceDeployment of MindFormers (float32, on the Ascend
executor node), waits for it to be stable, applies a change, and follows the canary
through its ParityCheck (runner Job on the executor) to promotion or rollback.
MindFormers' adapter serves its own hidden states, so no probe pod is needed here;
the vLLM probe path is exercised by the demo's migration step.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.e2e.canary import SUITE, Rollout, engines_start, mindformers_deployment
from tests.e2e.support import Stopwatch, check_status
from tests.harness import REPO, Cluster, wait_for

__all__ = ["engines_start"]  # autouse: this module's tests need startable engine pods


def _stable_then(
    rollout: Rollout, clock: Stopwatch, change: dict[str, Any], first: dict[str, Any] | None = None
) -> tuple[str, str]:
    """Apply `first`, wait until stable, apply `change`; (stable, canary) revisions."""
    rollout.apply(mindformers_deployment(**(first or {})))
    stable = rollout.wait_stable()
    clock.mark(f"stable revision {stable}")
    rollout.apply(mindformers_deployment(**change))
    canary = rollout.wait_canary()
    clock.mark(f"canary revision {canary}")
    return stable, canary


# Each check here runs 36 prompts through two MindFormers engines on CPU (about 10 s a
# prompt on 2 cores): `make test` keeps the promotion (a Failed verdict on real engines is
# tests/e2e/test_standalone_check.py's, the rollback on it tests/integration's);
# `make test-slow` runs the rest.
SLOW = pytest.mark.slow


def test_a_canary_that_passes_its_check_is_promoted(cluster: Cluster, e2e_namespace: str) -> None:
    rollout, clock = Rollout(cluster, e2e_namespace), Stopwatch()
    stable, canary = _stable_then(rollout, clock, {"seed": 43})
    check = rollout.wait_check(canary)
    clock.mark(f"check {check['phase']}")
    assert check["phase"] == "Passed", check
    assert check["metrics"]["tokenMatchRate"] == 1.0
    assert check["baselineRevision"] == stable
    assert check["candidateRevision"] == canary
    promoted = rollout.wait(
        lambda s: s.get("stableRevision") == canary and s.get("phase") == "Stable",
        300,
        "the canary to be promoted",
    )
    clock.mark("promoted")
    assert rollout.revision_record(canary)["verdict"] == "Passed"
    wait_for(lambda: not rollout.live_pods(stable), 300, f"old stable {stable} to be scaled down")
    assert promoted["stableRevision"] == canary
    assert rollout.complete(canary)


@SLOW
def test_a_harmful_change_fails_its_check_and_is_rolled_back(
    cluster: Cluster, e2e_namespace: str
) -> None:
    rollout, clock = Rollout(cluster, e2e_namespace), Stopwatch()
    stable, canary = _stable_then(rollout, clock, {"config": {"rms_norm_eps": 1e-4}})
    stable_pod = rollout.live_pods(stable)[0]["metadata"]["uid"]
    before = rollout.complete(stable)
    check = rollout.wait_check(canary)
    clock.mark(f"check {check['phase']}")
    assert check["phase"] == "Failed", check
    messages = " | ".join(r.get("message", "") for r in check["verdict"]["reasons"])
    assert "rms_norm_eps" in messages
    assert any(r["metric"] == "minHiddenCosineP1" for r in check["verdict"]["reasons"])
    rolled = rollout.wait(
        lambda s: s.get("phase") == "RolledBack" and not s.get("canaryRevision"),
        300,
        "the rollback",
    )
    clock.mark("rolled back")
    assert rolled["stableRevision"] == stable
    assert rollout.revision_record(canary)["rejected"] is True
    wait_for(lambda: not rollout.live_pods(canary), 300, "the canary pods to be gone")
    # Stable kept serving throughout: same pod, same answer.
    assert rollout.live_pods(stable)[0]["metadata"]["uid"] == stable_pod
    assert rollout.complete(stable) == before


@SLOW
def test_a_candidate_dying_mid_check_is_an_error_and_stable_is_untouched(
    cluster: Cluster, e2e_namespace: str
) -> None:
    rollout, clock = Rollout(cluster, e2e_namespace), Stopwatch()
    long_suite = SUITE + [
        {"id": f"more-{i}", "text": f"Number {i} is followed by"} for i in range(8)
    ]
    stable, canary = _stable_then(
        rollout,
        clock,
        {"seed": 43, "suite": long_suite, "max_tokens": 24},
        first={"suite": long_suite, "max_tokens": 24},
    )
    stable_pod = rollout.live_pods(stable)[0]
    name = rollout.check_name(canary)
    wait_for(
        lambda: (
            (check_status(cluster, e2e_namespace, name).get("progress") or {}).get("done", 0) >= 1
        ),
        600,
        f"ParityCheck {name} to be under way",
        interval=1.0,
    )
    [victim] = rollout.live_pods(canary)
    cluster.kubectl(
        "delete",
        "pod",
        victim["metadata"]["name"],
        "-n",
        e2e_namespace,
        "--grace-period=0",
        "--force",
    )
    clock.mark("candidate pod killed mid-check")
    check = rollout.wait_check(canary)
    clock.mark(f"check {check['phase']}")
    assert check["phase"] == "Error", check
    assert check["verdict"]["passed"] is False
    message = check["verdict"]["reasons"][0]["message"]
    assert "candidate" in message
    assert any(
        word in message
        for word in ("ConnectError", "RemoteProtocolError", "ReadError", "no ready endpoint")
    )
    rolled = rollout.wait(lambda s: not s.get("canaryRevision"), 300, "the canary to be removed")
    assert rolled["stableRevision"] == stable
    after = rollout.live_pods(stable)[0]
    assert after["metadata"]["uid"] == stable_pod["metadata"]["uid"]
    assert (
        after["status"]["containerStatuses"][0]["restartCount"]
        == stable_pod["status"]["containerStatuses"][0]["restartCount"]
    )
    assert rollout.complete(stable)


@SLOW
def test_with_auto_promote_off_a_passed_canary_waits_for_a_person(
    cluster: Cluster, e2e_namespace: str
) -> None:
    rollout, clock = Rollout(cluster, e2e_namespace), Stopwatch()
    stable, canary = _stable_then(
        rollout, clock, {"seed": 43, "auto_promote": False}, first={"auto_promote": False}
    )
    check = rollout.wait_check(canary)
    assert check["phase"] == "Passed", check
    waiting = rollout.wait(
        lambda s: s.get("phase") == "Verifying", 120, "the rollout to wait for promotion"
    )
    assert waiting["stableRevision"] == stable
    assert waiting["canaryRevision"] == canary
    clock.mark("passed, waiting for a person")
    promote = subprocess.run(
        [str(REPO / ".venv/bin/infergate"), "promote", rollout.name, "-n", e2e_namespace, "--kubeconfig", str(cluster.kubeconfig), "--wait", "--timeout", "300"],
        capture_output=True, text=True, timeout=360, check=False,
    )  # fmt: skip
    assert promote.returncode == 0, promote.stderr
    promoted = rollout.wait(
        lambda s: s.get("stableRevision") == canary, 300, "the manual promotion"
    )
    clock.mark("promoted by hand")
    assert promoted["stableRevision"] == canary
