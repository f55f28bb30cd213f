"""Golden records on real engines: a check against the old stable revision's record, after
its pods are gone and the operator has restarted, gives the verdict the live check gave.

An operator of its own keeps records on a claim of its own namespace, the runners'
(tests/e2e/golden.py) with `hiddenStates: full`, so a check against a record compares
everything the live check compared (hidden states included) and no setting of the second
check differs from the first but its baseline. MindFormers float32 on the Ascend
executor, as the canary tests: a benign canary (another seed) passes its live check,
which stores both sides' records, and is promoted; the old stable is scaled to zero.
The operator pod is then deleted (the records live on the claim, not in the operator
process): `infergate golden list` still lists both (from the store, and from the cluster:
the live check's status.golden), and a ParityCheck with `baseline: {golden: {revision: <old stable>}}`
and the live check's suite, sampling and profile runs the candidate alone.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.canary import Rollout, engines_start, mindformers_deployment
from tests.e2e.golden import GOLDEN_CONFIG, golden_store, install_golden_operator
from tests.e2e.golden import golden_namespace as golden_claim_namespace
from tests.e2e.support import Operator, Stopwatch, report, wait_check_ended
from tests.harness import REPO, Cluster, wait_for

__all__ = ["engines_start"]  # autouse: this module's tests need startable engine pods

# Two checks of 36 prompts (the live one on two MindFormers engines, the golden one on
# one): about 6 minutes on 2 cores (live check 4, golden check 1.5), so `make test` runs
# it; the limit leaves room for a loaded machine.
pytestmark = pytest.mark.timeout(1800)

FULL_RECORDS = {**GOLDEN_CONFIG, "hiddenStates": "full"}
# Figures that say what a verdict rests on and what it measured: with the same engine,
# dtype and weights on both sides, the record gives the live check's evidence exactly.
SAME_FIGURES = (
    "prompts",
    "tokenMatchRate",
    "teacherForcedSteps",
    "hiddenTokens",
    "meanKl",
    "hiddenMaxAbsErr",
)


@pytest.fixture(scope="module")
def golden_operator(cluster: Cluster) -> Iterator[Operator]:
    """An operator of its own that keeps full golden records on the claim."""
    yield from install_golden_operator(cluster, FULL_RECORDS)


@pytest.fixture
def golden_namespace(
    golden_operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    yield from golden_claim_namespace(golden_operator, cluster, request)


def _golden_list(operator: Operator, namespace: str) -> list[dict[str, Any]]:
    """`infergate golden list -o json` over the claim's directory, as an admin reads it:
    the records of `namespace`."""
    command = [
        str(REPO / ".venv" / "bin" / "infergate"), "golden", "list",
        "--store", str(golden_store(operator)), "-n", namespace, "--deployment", "qwen",
        "-o", "json",
    ]  # fmt: skip
    listed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    documents: list[dict[str, Any]] = json.loads(listed.stdout)
    return documents


def _recorded_list(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """`infergate golden list -o json` without --store: what the namespace's Passed checks
    recorded (their status.golden), read from the API server, no store reached."""
    command = [
        str(REPO / ".venv" / "bin" / "infergate"), "golden", "list",
        "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "--deployment", "qwen",
        "-o", "json",
    ]  # fmt: skip
    listed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    document: dict[str, Any] = json.loads(listed.stdout)
    return document


def _entry(document: dict[str, Any]) -> str:
    return f"{document['namespace']}/{document['deployment']}/{document['name']}"


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_check_against_a_golden_record_gives_the_live_verdict_after_the_stable_and_the_operator_are_gone(
    cluster: Cluster, golden_operator: Operator, golden_namespace: str
) -> None:
    namespace = golden_namespace
    rollout, clock = Rollout(cluster, namespace), Stopwatch()
    rollout.apply(mindformers_deployment())
    stable = rollout.wait_stable()
    rollout.apply(mindformers_deployment(seed=43))
    canary = rollout.wait_canary()
    clock.mark(f"stable {stable}, canary {canary}")
    live_name = rollout.check_name(canary)
    live = rollout.wait_check(canary)
    clock.mark(f"live check {live['phase']}, metrics {live.get('metrics')}")
    assert live["phase"] == "Passed", live
    assert (live["baselineRevision"], live["candidateRevision"]) == (stable, canary)
    assert live["golden"]["stored"] is True, live["golden"]
    assert all(k in live["metrics"] for k in SAME_FIGURES), live["metrics"]
    live_spec = cluster.get_json("paritychecks.infergate.io", live_name, "-n", namespace)["spec"]
    assert live_spec["hiddenStates"]["enabled"] is not False

    # Promoted: the old stable revision is scaled to zero, its pods gone.
    rollout.wait(
        lambda s: s.get("stableRevision") == canary and s.get("phase") == "Stable",
        300,
        "the canary to be promoted",
    )
    wait_for(lambda: not rollout.live_pods(stable), 300, f"old stable {stable} to be scaled down")
    clock.mark("promoted, old stable scaled down")

    # The operator restarts; the records written before are still listed.
    golden_operator.restart()
    clock.mark("operator restarted")
    listed = {(d["revision"], d["role"]): d for d in _golden_list(golden_operator, namespace)}
    assert set(listed) == {(stable, "baseline"), (canary, "candidate")}, sorted(listed)
    record = listed[(stable, "baseline")]
    assert sorted(_entry(d) for d in listed.values()) == sorted(live["golden"]["entries"])
    assert record["check"] == live_name
    assert record["hiddenStates"] == "full"
    # From the cluster alone (no store reached), the same entries, as the check recorded them.
    from_checks = _recorded_list(cluster, namespace)
    assert sorted(
        (r["entry"], r["revision"], r["role"], r["check"]) for r in from_checks["records"]
    ) == sorted(
        [
            (_entry(listed[(stable, "baseline")]), stable, "baseline", live_name),
            (_entry(listed[(canary, "candidate")]), canary, "candidate", live_name),
        ]
    )
    assert {_time(r["recorded"]) for r in from_checks["records"]} == {
        _time(d["created"]) for d in listed.values()
    }
    assert "not read from the store" in from_checks["source"]

    # The same check, with the old stable's record as its baseline.
    spec = copy.deepcopy(live_spec)
    spec["baseline"] = {"golden": {"revision": stable}}
    cluster.apply(
        {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": "ParityCheck",
            "metadata": {"name": "against-golden"},
            "spec": spec,
        },
        namespace,
    )
    try:
        replay = wait_check_ended(cluster, namespace, "against-golden", 1200)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{rollout.logs()}\n{golden_operator.log()[-3000:]}") from None
    clock.mark(f"golden check {replay['phase']}, metrics {replay.get('metrics')}")

    # The same verdict, on the same evidence.
    assert replay["phase"] == live["phase"], (replay, rollout.logs())
    assert replay["verdict"]["outcome"] == live["verdict"]["outcome"]
    assert replay["verdict"]["passed"] is live["verdict"]["passed"] is True
    assert {k: replay["metrics"].get(k) for k in SAME_FIGURES} == {
        k: live["metrics"].get(k) for k in SAME_FIGURES
    }
    assert (replay["baselineRevision"], replay["candidateRevision"]) == (stable, canary)

    # The baseline was the record, and the status and report say which and from when.
    used = replay["goldenBaseline"]
    assert used["entry"] == _entry(record)
    assert (used["revision"], used["check"]) == (stable, live_name)
    assert _time(used["recorded"]) == _time(record["created"])
    recorded = _time(record["created"]).strftime("%Y-%m-%d %H:%M:%S UTC")
    html, result = report(cluster, namespace, replay)
    note = f"Baseline: the golden record {_entry(record)} of revision {stable}"
    assert note in html
    assert f"recorded {recorded}" in html
    notes = result["result"]["notes"]
    assert any(note in n and f"recorded {recorded}" in n for n in notes), notes
    assert result["goldenBaseline"]["entry"] == used["entry"]
    # Nothing of the old stable ran for it; a check against a record stores none itself.
    assert not rollout.live_pods(stable)
    assert not (replay.get("golden") or {}).get("stored")
    assert len(_golden_list(golden_operator, namespace)) == len(listed)
