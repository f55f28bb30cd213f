"""Golden records from the runner: a Passed check stores both sides in the operator's store.

The store is the operator's setting (RunOptions.golden, from $INFERGATE_GOLDEN_CONFIG);
the check's status says where the records went, or why none were stored.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from infergate.api.golden import GoldenSpec
from infergate.golden.blobs import DirectoryStore
from infergate.golden.keys import Role
from infergate.golden.policy import StoragePolicy
from infergate.golden.settings import GOLDEN_CONFIG_ENV, GOLDEN_DIR_ENV, HiddenStatesPolicy
from infergate.golden.store import GoldenStore
from infergate.runner.golden import golden_from_env
from infergate.runner.golden_baseline import _choose
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, EXIT_RETRY, run_check
from tests.unit.golden.records import CANARY, DIGEST, STABLE, check, pair

from .fakes import FakeApi, ToyConnector, ToyEngine
from .test_run import FAST, PROBE_IP, cluster, conditions, engines, status

GOLDEN = GoldenSpec.model_validate({"store": {"pvc": {"claimName": "golden"}}})


def options(root: Path, golden: GoldenSpec = GOLDEN) -> Any:
    return dataclasses.replace(FAST, golden=golden, environ={GOLDEN_DIR_ENV: str(root)})


def test_a_passed_check_stores_both_sides_and_says_where(tmp_path: Path) -> None:
    api = cluster()
    assert run_check(api, "check", options(tmp_path), connector=engines().connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    golden = s["golden"]
    assert golden["stored"] is True
    assert golden["store"] == f"directory {tmp_path}"
    assert len(golden["entries"]) == 2
    assert golden["sizeBytes"] > 0
    store = GoldenStore(DirectoryStore(tmp_path))
    items = store.list_entries("llm", "qwen")
    assert sorted(str(i.location) for i in items) == sorted(golden["entries"])
    entries = {i.entry.role: i.entry for i in items if i.entry is not None}
    assert entries[Role.BASELINE].revision == "aaaaaaaaaa"
    assert entries[Role.CANDIDATE].revision == "bbbbbbbbbb"
    assert entries[Role.BASELINE].check == "check"
    assert entries[Role.BASELINE].fingerprint.startswith("sha256:")
    assert entries[Role.BASELINE].fingerprint != entries[Role.CANDIDATE].fingerprint
    assert sum(e.size_bytes for e in entries.values()) == golden["sizeBytes"]
    # Found again by what a later check knows: the revision and the suite's digest.
    found = store.find(
        "llm", "qwen", revision="aaaaaaaaaa", suite_digest=golden["suiteDigest"], role=Role.BASELINE
    )
    with store.open(found) as record:
        assert len(record.prompt_ids) == 32
        assert record.get("p0").output_token_ids.size > 0
        # The default policy keeps hidden-state summaries, not the full states.
        assert record.hidden_summary("p0") is not None
    report = read_report(api.config_maps["check-report"]["data"], {})
    assert json.loads(report["result.json"])["golden"]["entries"] == golden["entries"]


def test_a_failed_check_stores_nothing_and_says_so(tmp_path: Path) -> None:
    api = cluster()
    connector = engines(ToyEngine(offset=3, shift=-1.0))
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Failed"
    assert s["golden"]["stored"] is False
    assert "only a Passed check" in s["golden"]["message"]
    assert GoldenStore(DirectoryStore(tmp_path)).list_entries() == []
    # Nothing staged is left behind.
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_retried_run_leaves_no_staging_behind(tmp_path: Path) -> None:
    api = cluster()
    fault = lambda: httpx.ConnectError("[Errno 111] Connection refused")  # noqa: E731
    connector = engines(ToyEngine(fail_after=5, fault=fault))
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_RETRY
    assert "golden" not in status(api)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_endpoint_sides_are_not_recorded_and_the_status_says_why(tmp_path: Path) -> None:
    api = cluster(
        baseline={"endpoint": {"url": "http://127.0.0.1:9001", "model": "fixture"}},
        candidate={"endpoint": {"url": "http://127.0.0.1:9002", "model": "fixture"}},
        hiddenStates={"enabled": False},
        disabledChecks=["minHiddenCosineP1", "maxHiddenRelL2P99"],
    )
    connector = ToyConnector(
        {"http://127.0.0.1:9001": ToyEngine(), "http://127.0.0.1:9002": ToyEngine()}
    )
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is False
    assert "two revisions of one InferenceDeployment" in s["golden"]["message"]


def test_a_budget_that_cannot_hold_the_record_stores_nothing_and_still_passes(
    tmp_path: Path,
) -> None:
    long_prompts = [{"id": f"p{i}", "tokenIds": list(range(1, 2000))} for i in range(40)]
    api = cluster(suite={"inline": long_prompts})
    tight = GoldenSpec.model_validate(
        {"store": {"pvc": {"claimName": "golden"}}, "hiddenStates": "none", "maxBytes": "1Mi"}
    )
    run_check(api, "check", options(tmp_path, tight), connector=engines().connector())
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is False
    assert "maxBytes" in s["golden"]["message"]
    assert GoldenStore(DirectoryStore(tmp_path)).list_entries() == []


def test_retention_keeps_the_newest_record_per_revision_and_drops_forgotten_revisions(
    tmp_path: Path,
) -> None:
    api = cluster()
    connector = engines()
    run_check(api, "check", options(tmp_path), connector=connector.connector())
    first = status(api)["golden"]["entries"]
    # A second Passed check of the same revisions supersedes the first one's records.
    api.add_check("again", api.checks["check"]["spec"])
    api.add_probe("again", "baseline", PROBE_IP)
    run_check(api, "again", options(tmp_path), connector=connector.connector())
    second = api.checks["again"]["status"]["golden"]
    assert "retention removed 2 older record(s)" in second["message"]
    store = GoldenStore(DirectoryStore(tmp_path))
    assert sorted(str(i.location) for i in store.list_entries()) == sorted(second["entries"])
    assert not set(first) & {str(i.location) for i in store.list_entries()}
    # The deployment forgets revision aaaaaaaaaa (revisionHistoryLimit) while the third
    # check runs (its sides were resolved from the Deployments the operator recorded):
    # its record goes.
    _forget_while_running(
        api, {"stableRevision": "bbbbbbbbbb", "revisions": [{"hash": "bbbbbbbbbb"}]}
    )
    api.add_check("third", api.checks["check"]["spec"])
    api.add_probe("third", "baseline", PROBE_IP)
    run_check(api, "third", options(tmp_path), connector=connector.connector())
    left = {i.entry.revision for i in store.list_entries() if i.entry is not None}
    assert left == {"bbbbbbbbbb"}


def _forget_while_running(api: FakeApi, status: dict[str, Any]) -> None:
    """The deployment's status becomes `status` once the next check reports progress, after
    its sides were resolved."""

    def forget(api: FakeApi) -> None:
        if (api.status_writes[-1].get("progress") or {}).get("done"):
            api.deployments["qwen"]["status"] = status
            api.on_status_write = None

    api.on_status_write = forget


DELETE = GoldenSpec.model_validate(
    {"store": {"pvc": {"claimName": "golden"}}, "retention": {"whenDeleted": "Delete"}}
)


def _others(root: Path) -> GoldenStore:
    """A store already holding records of llm/gone (deleted), llm/kept (still there), and
    team-b/gone (another namespace's deployment of the same name)."""
    store = GoldenStore(DirectoryStore(root))
    policy = StoragePolicy(HiddenStatesPolicy.NONE, max_bytes=4 << 20, sketch_dims=16)
    for namespace, deployment in (("llm", "gone"), ("llm", "kept"), ("team-b", "gone")):
        identity = check(namespace=namespace, deployment=deployment)
        with store.begin(identity, policy) as recording:
            recording.add(*pair("p0"))
            recording.commit(profile="bf16-kernel")
    return store


def _deployments_with_records(store: GoldenStore) -> set[str]:
    return {f"{i.location.namespace}/{i.location.deployment}" for i in store.list_entries()}


def _with_kept(api: Any) -> Any:
    api.deployments["kept"] = {
        "metadata": {"name": "kept"},
        "status": {"stableRevision": STABLE, "revisions": [{"hash": STABLE}, {"hash": CANARY}]},
    }
    return api


def test_when_deleted_delete_removes_the_records_of_deleted_deployments_of_the_namespace(
    tmp_path: Path,
) -> None:
    store = _others(tmp_path)
    api = _with_kept(cluster())
    run_check(api, "check", options(tmp_path, DELETE), connector=engines().connector())
    golden = status(api)["golden"]
    assert golden["stored"] is True
    note = "retention removed 2 older record(s), of deleted InferenceDeployments llm/gone"
    assert note in golden["message"]
    # Another namespace's deployment of the same name is none of this runner's business.
    assert _deployments_with_records(store) == {"llm/qwen", "llm/kept", "team-b/gone"}
    assert api.deployment_lists == 1


def test_when_deleted_retain_keeps_them_and_lists_nothing(tmp_path: Path) -> None:
    store = _others(tmp_path)
    api = _with_kept(cluster())
    run_check(api, "check", options(tmp_path), connector=engines().connector())
    assert status(api)["golden"]["stored"] is True
    assert "retention removed" not in status(api)["golden"]["message"]
    assert _deployments_with_records(store) == {"llm/qwen", "llm/gone", "llm/kept", "team-b/gone"}
    assert api.deployment_lists == 0


def test_a_refused_listing_deletes_nothing_of_other_deployments_and_says_so(
    tmp_path: Path,
) -> None:
    from infergate.errors import ForbiddenError

    store = _others(tmp_path)
    api = _with_kept(cluster())
    api.list_refusal = ForbiddenError(
        "list InferenceDeployment in llm: 403 forbidden: cannot list resource", status=403
    )
    run_check(api, "check", options(tmp_path, DELETE), connector=engines().connector())
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is True
    message = s["golden"]["message"]
    assert "records of deleted InferenceDeployments not pruned: could not list" in message
    assert "403" in message
    assert "nothing of other deployments was deleted" in message
    assert _deployments_with_records(store) == {"llm/qwen", "llm/gone", "llm/kept", "team-b/gone"}
    # The check's own deployment still follows its history.
    _forget_while_running(api, {"stableRevision": CANARY, "revisions": [{"hash": CANARY}]})
    api.add_check("again", api.checks["check"]["spec"])
    api.add_probe("again", "baseline", PROBE_IP)
    run_check(api, "again", options(tmp_path, DELETE), connector=engines().connector())
    qwen = {i.entry.revision for i in store.list_entries("llm", "qwen") if i.entry is not None}
    assert qwen == {CANARY}
    assert _deployments_with_records(store) == {"llm/qwen", "llm/gone", "llm/kept", "team-b/gone"}


def test_a_deployment_that_lists_no_revision_yet_keeps_its_records(tmp_path: Path) -> None:
    """Re-created under an old name, its status not yet written: its history is unknown,
    not empty."""
    store = _others(tmp_path)
    api = _with_kept(cluster())
    api.deployments["gone"] = {"metadata": {"name": "gone"}}
    run_check(api, "check", options(tmp_path, DELETE), connector=engines().connector())
    assert "retention removed" not in status(api)["golden"]["message"]
    assert _deployments_with_records(store) == {"llm/qwen", "llm/gone", "llm/kept", "team-b/gone"}


def test_without_operator_settings_no_golden_status_is_written(tmp_path: Path) -> None:
    api = cluster()
    assert run_check(api, "check", FAST, connector=engines().connector()) == EXIT_DONE
    assert "golden" not in status(api)


def test_the_operator_settings_come_from_the_runner_environment() -> None:
    assert golden_from_env({}) is None
    text = json.dumps(GOLDEN.to_kube())
    assert golden_from_env({GOLDEN_CONFIG_ENV: text}) == GOLDEN


# -- a golden record as the baseline ------------------------------------------------------

FULL = GoldenSpec.model_validate(
    {"store": {"pvc": {"claimName": "golden"}}, "hiddenStates": "full"}
)


def _recorded(tmp_path: Path, golden: GoldenSpec = FULL) -> dict[str, Any]:
    """A live Passed check that stored its records; its status."""
    api = cluster()
    run_check(api, "check", options(tmp_path, golden), connector=engines().connector())
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["golden"]["stored"] is True
    return s


def _against_golden(
    tmp_path: Path,
    golden: GoldenSpec | None = FULL,
    candidate: ToyEngine | None = None,
    **overrides: Any,
) -> FakeApi:
    """A check of revision bbbbbbbbbb against a golden record, with the stable pods gone."""
    api = cluster(
        baseline=overrides.pop("baseline", {"golden": {"revision": "aaaaaaaaaa"}}), **overrides
    )
    # The stable revision's pods and probe are gone: nothing answers for it.
    for name in ("qwen-aaaaaaaaaa", "check-probe-baseline"):
        api.services.pop(name, None)
        api.slices.pop(name, None)
    opts = options(tmp_path, golden) if golden is not None else FAST
    run_check(api, "check", opts, connector=engines(candidate).connector())
    return api


def test_a_golden_baseline_gives_the_live_checks_verdict_with_no_stable_pods(
    tmp_path: Path,
) -> None:
    live = _recorded(tmp_path)
    api = _against_golden(tmp_path)
    s = status(api)
    assert s["phase"] == "Passed", s.get("verdict")
    assert s["metrics"]["tokenMatchRate"] == live["metrics"]["tokenMatchRate"]
    assert s["metrics"]["hiddenCosineP1"] == pytest.approx(live["metrics"]["hiddenCosineP1"])
    baseline = s["goldenBaseline"]
    assert baseline["revision"] == "aaaaaaaaaa"
    assert baseline["entry"] == live["golden"]["entries"][0]
    assert baseline["check"] == "check"
    assert s["baselineRevision"] == "aaaaaaaaaa"
    report = read_report(api.config_maps["check-report"]["data"], {})
    assert "golden record" in report["report.html"]
    assert "no baseline pods" in report["report.html"]
    document = json.loads(report["result.json"])
    assert document["goldenBaseline"]["recorded"] == baseline["recorded"]


def test_a_golden_baseline_fails_a_numerically_different_candidate_as_a_live_one_does(
    tmp_path: Path,
) -> None:
    _recorded(tmp_path)
    api = _against_golden(tmp_path, candidate=ToyEngine(offset=3, shift=-1.0))
    s = status(api)
    assert s["phase"] == "Failed"
    metrics = {r["metric"] for r in s["verdict"]["reasons"]}
    assert {"maxIllegitimateDivergenceRate", "maxMeanKl", "minHiddenCosineP1"} <= metrics


def test_latest_takes_the_newest_record_of_another_revision(tmp_path: Path) -> None:
    _recorded(tmp_path)
    api = _against_golden(tmp_path, baseline={"golden": {}})
    s = status(api)
    assert s["phase"] == "Passed"
    assert s["goldenBaseline"]["revision"] == "aaaaaaaaaa"


def test_a_record_of_other_sampling_is_an_error_never_a_pass(tmp_path: Path) -> None:
    _recorded(tmp_path)
    api = _against_golden(tmp_path, sampling={"maxTokens": 8, "topLogprobs": 5})
    s = status(api)
    assert s["phase"] == "Error"
    message = conditions(api)["Error"]["message"] if "Error" in conditions(api) else str(s)
    assert "no golden record" in message
    assert "other records of it" in message
    assert "(suite " in message


def test_a_candidates_record_with_the_same_outputs_serves_as_a_baseline(tmp_path: Path) -> None:
    # bbbbbbbbbb was the candidate and answered exactly as aaaaaaaaaa: scored along its own
    # sequence, so a promoted canary's record can be a later baseline.
    _recorded(tmp_path)
    api = _against_golden(tmp_path, baseline={"golden": {"revision": "bbbbbbbbbb"}})
    assert status(api)["phase"] == "Passed"
    assert status(api)["goldenBaseline"]["revision"] == "bbbbbbbbbb"


def test_a_candidates_record_whose_outputs_forked_is_no_baseline(tmp_path: Path) -> None:
    store = GoldenStore(DirectoryStore(tmp_path))
    recording = store.begin(check(), StoragePolicy(HiddenStatesPolicy.FULL, max_bytes=8 << 20))
    with recording:
        recording.add(*pair("p0", seed=0))
        recording.add(*pair("p1", seed=1, fork_at=3))
        base, cand = recording.commit()
    assert base.self_scored is True
    assert cand.self_scored is False
    items = store.list_entries()
    chosen, others = _choose(items, revision=CANARY, exclude=None, digest=DIGEST, fingerprint=None)
    assert chosen is None
    assert "scored along another sequence" in others[0]
    chosen, _ = _choose(items, revision=STABLE, exclude=None, digest=DIGEST, fingerprint=None)
    assert chosen == base


def test_a_corrupt_record_is_an_error_never_a_pass(tmp_path: Path) -> None:
    live = _recorded(tmp_path)
    name = live["golden"]["entries"][0].rsplit("/", 1)[1]
    [blob] = [p for p in (tmp_path / "records").rglob("*.safetensors") if name in str(p)][:1]
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    api = _against_golden(tmp_path)
    assert status(api)["phase"] == "Error"
    assert "GoldenRecordCorrupt" in json.dumps(status(api))


def test_a_missing_record_and_a_missing_store_are_errors(tmp_path: Path) -> None:
    api = _against_golden(tmp_path)  # nothing recorded yet
    assert status(api)["phase"] == "Error"
    assert "GoldenRecordNotFound" in json.dumps(status(api))
    api = _against_golden(tmp_path, golden=None)
    assert status(api)["phase"] == "Error"
    assert "GoldenStoreNotConfigured" in json.dumps(status(api))


def test_summaries_serve_tokens_and_logprobs_but_not_a_hidden_state_check(tmp_path: Path) -> None:
    _recorded(tmp_path, GOLDEN)  # the default policy: summaries
    api = _against_golden(tmp_path, GOLDEN)
    assert status(api)["phase"] == "Error"
    assert "hiddenStates.enabled: false" in json.dumps(status(api))
    api = _against_golden(
        tmp_path,
        GOLDEN,
        hiddenStates={"enabled": False},
        disabledChecks=["minHiddenCosineP1", "maxHiddenRelL2P99"],
    )
    assert status(api)["phase"] == "Passed"
