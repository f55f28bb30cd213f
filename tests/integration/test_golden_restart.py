"""The golden record store across an operator restart, on the real local cluster.

Records of a Passed check are written to the claim directory of the runner namespace
(the one the local executor mounts for the claim the operator's `--golden-config` names,
in the operator's namespace, where runner Jobs run) through the store's own API, as the
runner writes them (the simulated engines cannot answer a runner), and the check's
verdict names them as the runner's does. The operator pod is then deleted. Afterwards
`infergate golden list` and `verify` still find both records intact, and the new
operator process takes the stable revision's record as the drift watch's baseline: what
it knows of records comes from the API (the Passed check's status), never from its
memory. The runner reading a record after a restart, on real engines:
tests/e2e/test_golden_baseline_e2e.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infergate.golden.blobs import DirectoryStore
from infergate.golden.policy import HiddenStatesPolicy, StoragePolicy
from infergate.golden.settings import GOLDEN_CONFIG_ENV
from infergate.golden.store import GoldenStore
from tests.harness import GOLDEN_CLAIM, REPO, Cluster, golden_store_dir, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    golden_namespace,
    golden_operator,
)
from tests.unit.golden.records import check, pair

pytestmark = pytest.mark.cluster
__all__ = ["golden_namespace", "golden_operator"]

POLICY = StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=8 << 20, sketch_dims=16)


@pytest.fixture
def store_root(golden_operator: OperatorInstall) -> Iterator[Path]:
    """The directory of the claim in the runner namespace (the operator's) on this machine,
    for one test: the claim itself is not made, so runner Jobs stay unscheduled and the
    test writes the verdicts."""
    root = golden_store_dir(golden_operator.namespace)
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


def _golden(*args: str) -> subprocess.CompletedProcess[str]:
    """`infergate golden ...` as an admin runs it on the claim's directory."""
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "infergate"), "golden", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _drifted(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def test_golden_records_outlive_an_operator_restart_and_stay_a_baseline(
    cluster: Cluster, golden_operator: OperatorInstall, golden_namespace: str, store_root: Path
) -> None:
    namespace = golden_namespace
    idep = Idep(cluster, namespace, deployment_manifest())
    idep.apply()
    stable = idep.wait_stable()
    idep.apply(dtype="float16")
    canary, live = idep.wait_check()
    name = live["metadata"]["name"]

    # The check's records, as its runner stores them, and its Passed verdict naming them.
    store = GoldenStore(DirectoryStore(store_root))
    identity = check(
        namespace=namespace, deployment="qwen", baseline=stable, candidate=canary, name=name
    )
    with store.begin(identity, POLICY) as recording:
        for index in range(3):
            recording.add(*pair(f"p{index}", seed=index))
        entries = [str(e.location) for e in recording.commit(profile="bf16-kernel")]
    idep.verdict(
        name, "Passed", passed=True, metrics={"tokenMatchRate": 1.0},
        extra={"golden": {"stored": True, "entries": entries}},
    )  # fmt: skip
    idep.wait("promotion", lambda s: s.get("stableRevision") == canary, timeout=90)

    before = golden_operator.pod()
    assert before is not None
    golden_operator.restart()
    after = golden_operator.pod()
    assert after is not None
    assert after["metadata"]["uid"] != before["metadata"]["uid"]

    # Listed and intact afterwards.
    listed = _golden("list", "--store", str(store_root), "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    documents = json.loads(listed.stdout)
    assert [f"{d['namespace']}/{d['deployment']}/{d['name']}" for d in documents] == entries
    assert {(d["revision"], d["role"], d["check"]) for d in documents} == {
        (stable, "baseline", name),
        (canary, "candidate", name),
    }
    verified = _golden("verify", "--store", str(store_root), "-n", namespace)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "2 ok, 0 corrupt" in verified.stdout

    # The new operator process still has the stable revision's record as a baseline: the
    # drift watch runs against it rather than saying there is none.
    idep.manifest["spec"]["rollout"]["parity"]["watch"] = {"schedule": "* * * * *"}
    idep.apply()
    run_name = f"qwen-{canary}-drift1"

    def run() -> dict[str, Any] | None:
        found = cluster.kubectl(
            "get", "pcheck", run_name, "-n", namespace, "-o", "json", check=False
        )
        return json.loads(found.stdout) if found.returncode == 0 else None

    try:
        drift = wait_for(run, 90, f"drift run {run_name}")
    except AssertionError as err:
        raise AssertionError(f"{err}\nDrifted: {_drifted(idep.status())}") from None
    assert drift["spec"]["baseline"] == {"golden": {"revision": canary}}
    assert _drifted(idep.status()).get("reason") != "NoGoldenRecord"
    # Its runner (in the runner namespace, the operator's) gets the operator's store: the
    # claim and the setting.
    selector = f"infergate.io/paritycheck={run_name},infergate.io/paritycheck-namespace={namespace}"
    job = wait_for(
        lambda: next(
            iter(
                cluster.get_json("jobs", "-n", golden_operator.namespace, "-l", selector)["items"]
            ),
            None,
        ),
        60,
        f"the runner Job of {run_name}",
    )
    pod = job["spec"]["template"]["spec"]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == [GOLDEN_CLAIM]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert json.loads(env[GOLDEN_CONFIG_ENV])["store"] == {"pvc": {"claimName": GOLDEN_CLAIM}}
