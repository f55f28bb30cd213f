"""The golden record store on a directory: what a Passed check stores is what a later
check reads back, verified; anything else is an error, never a record."""

from __future__ import annotations

import json
import multiprocessing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infergate.golden.blobs import DirectoryStore
from infergate.golden.entry import GoldenEntry
from infergate.golden.errors import (
    GoldenBudgetError,
    GoldenError,
    GoldenIntegrityError,
    GoldenMissingError,
    GoldenNotFoundError,
)
from infergate.golden.keys import Role
from infergate.golden.policy import HiddenStatesPolicy, StoragePolicy
from infergate.golden.retention import DeploymentHistory, WhenDeleted
from infergate.golden.store import GoldenRecording, GoldenStore
from infergate.golden.summary import summarize, summary_errors
from infergate.parity.record import PromptRecord
from tests.unit.golden.records import CANARY, DIGEST, STABLE, check, pair

FULL = StoragePolicy(HiddenStatesPolicy.FULL, max_bytes=8 << 20)
SUMMARY = StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=8 << 20, sketch_dims=16)


def _store(tmp_path: Path) -> GoldenStore:
    return GoldenStore(DirectoryStore(tmp_path / "store"))


def _record(
    store: GoldenStore, policy: StoragePolicy = FULL, prompts: int = 3, **kwargs: Any
) -> tuple[list[tuple[PromptRecord, PromptRecord]], tuple[GoldenEntry, GoldenEntry]]:
    pairs = [pair(f"p{i}", seed=i) for i in range(prompts)]
    with store.begin(check(**kwargs), policy) as recording:
        for baseline, candidate in pairs:
            recording.add(baseline, candidate)
        entries = recording.commit(profile="bf16-kernel")
    return pairs, entries


def test_a_committed_check_reads_back_both_sides_exactly(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pairs, (base_entry, cand_entry) = _record(store)
    listed = store.list_entries("llm", "qwen")
    assert [item.entry for item in listed] == [base_entry, cand_entry]
    assert base_entry.revision == STABLE
    assert base_entry.role is Role.BASELINE
    assert cand_entry.counterpart_revision == STABLE
    with store.open(base_entry) as record:
        assert record.prompt_ids == ["p0", "p1", "p2"]
        for baseline, _ in pairs:
            got = record.get(baseline.prompt_id)
            np.testing.assert_array_equal(got.output_token_ids, baseline.output_token_ids)
            np.testing.assert_array_equal(got.top_logprobs.logprobs, baseline.top_logprobs.logprobs)
            np.testing.assert_array_equal(got.hidden_states, baseline.hidden_states)
    with store.open(cand_entry) as record:
        got = record.get("p1")
        forced = pairs[1][1].teacher_forced
        assert got.teacher_forced is not None
        assert forced is not None
        np.testing.assert_array_equal(got.teacher_forced.target_logprobs, forced.target_logprobs)
        assert record.meta.engine == "mindformers"


def test_find_gives_the_newest_record_of_a_revision_and_suite(tmp_path: Path) -> None:
    times = iter(datetime(2026, 11, 9, 3, m, tzinfo=UTC) for m in range(10))
    store = GoldenStore(DirectoryStore(tmp_path / "s"), clock=lambda: next(times))
    _, (older, _) = _record(store)
    _, (newer, _) = _record(store)
    found = store.find("llm", "qwen", revision=STABLE, suite_digest=DIGEST)
    assert found == newer != older
    latest = store.find("llm", "qwen", revision=None, suite_digest=DIGEST)
    assert latest.created == newer.created
    with pytest.raises(GoldenNotFoundError, match="no golden record"):
        store.find("llm", "qwen", revision="cccccccccc", suite_digest=DIGEST)
    with pytest.raises(GoldenNotFoundError):
        store.find("llm", "qwen", revision=STABLE, suite_digest="0" * 64)
    with pytest.raises(GoldenNotFoundError):
        store.find("llm", "qwen", revision=STABLE, suite_digest=DIGEST, fingerprint="other")


def test_a_changed_byte_in_a_record_is_an_integrity_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _, (entry, _) = _record(store)
    blob = tmp_path / "store" / entry.location.record_prefix / "prompts" / "000001.safetensors"
    data = bytearray(blob.read_bytes())
    data[-3] ^= 0x01  # one bit of one hidden-state float
    blob.write_bytes(bytes(data))
    with pytest.raises(GoldenIntegrityError, match=r"000001.safetensors is corrupt"):
        store.verify(entry)
    with pytest.raises(GoldenIntegrityError):
        store.open(entry)


def test_a_missing_blob_is_a_missing_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _, (entry, _) = _record(store)
    (tmp_path / "store" / entry.location.record_prefix / "manifest.json").unlink()
    with pytest.raises(GoldenMissingError, match=r"manifest\.json is missing"):
        store.open(entry)


def test_a_corrupt_index_entry_is_listed_as_broken_and_never_replaced_by_an_older_one(
    tmp_path: Path,
) -> None:
    times = iter(datetime(2026, 11, 9, 3, m, tzinfo=UTC) for m in range(10))
    store = GoldenStore(DirectoryStore(tmp_path / "s"), clock=lambda: next(times))
    _record(store)
    _, (newest, _) = _record(store)
    (tmp_path / "s" / newest.location.index_key).write_text("{not json", encoding="utf-8")
    broken = [item for item in store.list_entries() if item.entry is None]
    assert [item.location for item in broken] == [newest.location]
    assert "not a valid entry" in broken[0].problem
    with pytest.raises(GoldenIntegrityError, match="cannot be read"):
        store.find("llm", "qwen", revision=STABLE, suite_digest=DIGEST)


def test_an_entry_moved_to_another_key_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _, (base, cand) = _record(store)
    index = tmp_path / "store" / "index" / "llm" / "qwen"
    # The baseline's entry copied over the candidate's name: it describes another record.
    (index / f"{cand.name}.json").write_text(base.to_json(), encoding="utf-8")
    with pytest.raises(GoldenIntegrityError, match="describes"):
        store.entry(cand.location)


def test_a_recording_not_committed_leaves_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.begin(check(), FULL) as recording:
        recording.add(*pair("p0"))
        assert store.list_entries() == []  # staged records are invisible
    assert store.list_entries() == []
    assert list(store.blobs.list("")) == []


def test_the_candidate_keeps_hidden_states_only_up_to_where_its_output_forks(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    baseline, candidate = pair("p0", prompt_tokens=10, output_tokens=12, fork_at=4)
    with store.begin(check(), FULL) as recording:
        recording.add(baseline, candidate)
        base_entry, cand_entry = recording.commit()
    assert base_entry.prompts[0].rows == 22
    assert cand_entry.prompts[0].rows == 14  # 10 prompt tokens + 4 shared output tokens
    with store.open(cand_entry) as record:
        hidden = record.get("p0").hidden_states
        assert hidden is not None
        assert candidate.hidden_states is not None
        np.testing.assert_array_equal(hidden, candidate.hidden_states[:14])


def test_summary_policy_keeps_norms_and_a_projection_that_measure_the_error(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    baseline, candidate = pair("p0")
    with store.begin(check(), SUMMARY) as recording:
        recording.add(baseline, candidate)
        base_entry, _ = recording.commit()
    assert base_entry.sketch is not None
    assert base_entry.sketch.dims == 16
    with store.open(base_entry) as record:
        assert record.get("p0").hidden_states is None
        assert record.hidden_form("p0") is HiddenStatesPolicy.SUMMARY
        stored = record.hidden_summary("p0")
    assert stored is not None
    assert candidate.hidden_states is not None
    errors = summary_errors(stored, summarize(candidate.hidden_states, 16))
    assert baseline.hidden_states is not None
    exact = np.linalg.norm(
        candidate.hidden_states - baseline.hidden_states, axis=1
    ) / np.linalg.norm(baseline.hidden_states, axis=1)
    # A 16-dim projection estimates each position's relative L2 within a factor of ~2.
    assert np.all(errors.rel_l2 > exact / 2.5)
    assert np.all(errors.rel_l2 < exact * 2.5)


def test_the_budget_falls_back_from_full_to_summary_to_none_in_suite_order(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    # Per prompt (2012 positions): ~257 KB of full states, ~137 KB of summary, ~22 KB of
    # tokens and logprobs; 1 MiB holds three full prompts, then one summary, then none.
    policy = StoragePolicy(HiddenStatesPolicy.FULL, max_bytes=1 << 20, sketch_dims=16)
    pairs = [pair(f"p{i}", seed=i, prompt_tokens=2000, output_tokens=12) for i in range(6)]
    with store.begin(check(), policy) as recording:
        for baseline, candidate in pairs:
            recording.add(baseline, candidate)
        base_entry, _ = recording.commit()
    forms = [p.hidden for p in base_entry.prompts]
    assert set(forms) == set(HiddenStatesPolicy)
    # Never back up to a larger form once a smaller one was needed.
    order = [HiddenStatesPolicy.FULL, HiddenStatesPolicy.SUMMARY, HiddenStatesPolicy.NONE]
    ranks = [order.index(form) for form in forms]
    assert ranks == sorted(ranks)
    assert base_entry.size_bytes <= policy.max_bytes
    on_disk = sum(blob.size for blob in store.blobs.list(base_entry.location.record_prefix))
    assert on_disk == base_entry.size_bytes


def test_a_record_whose_tokens_alone_exceed_the_budget_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    policy = StoragePolicy(HiddenStatesPolicy.NONE, max_bytes=1 << 20)
    # Each prompt's tokens and logprobs take ~33 KB (4000 prompt tokens): 1 MiB holds ~30.
    pairs = [pair(f"p{i}", seed=i, prompt_tokens=4000, hidden=None) for i in range(40)]
    with store.begin(check(), policy) as recording:
        refused, why = _first_refused(recording, pairs)
        assert 20 < refused < 40
        assert "tokens and logprobs alone" in why
        assert recording.bytes_written[Role.BASELINE] <= policy.max_bytes
        with pytest.raises(GoldenError, match="failed"):
            recording.commit()  # the pair that did not fit may sit on one side only
    assert store.list_entries() == []


def _first_refused(
    recording: GoldenRecording, pairs: list[tuple[PromptRecord, PromptRecord]]
) -> tuple[int, str]:
    for index, (baseline, candidate) in enumerate(pairs):
        try:
            recording.add(baseline, candidate)
        except GoldenBudgetError as err:
            return index, str(err)
    return len(pairs), "never refused"


def _write_one(root: str, index: int) -> None:
    store = GoldenStore(DirectoryStore(root))
    with store.begin(check(name=f"check-{index}"), FULL) as recording:
        for i in range(3):
            recording.add(*pair(f"p{i}", seed=index * 10 + i))
        recording.commit()


def test_concurrent_writers_never_corrupt_the_index(tmp_path: Path) -> None:
    root = str(tmp_path / "shared")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_one, args=(root, i)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    store = GoldenStore(DirectoryStore(root))
    items = store.list_entries()
    assert len(items) == 8
    assert all(item.entry is not None for item in items)
    assert {item.entry.check for item in items if item.entry} == {f"check-{i}" for i in range(4)}
    for item in items:
        assert item.entry is not None
        store.verify(item.entry)


def test_prune_follows_the_history_and_the_deleted_policy(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _record(store)  # qwen: stable aaaa.., canary bbbb..
    _record(store, deployment="gone")
    _, (kept_other, _) = _record(store, deployment="other")
    histories = {
        ("llm", "qwen"): DeploymentHistory(exists=True, revisions=frozenset({CANARY})),
        ("llm", "gone"): DeploymentHistory(exists=False),
    }
    deleted = store.prune(histories, when_deleted=WhenDeleted.DELETE)
    gone = {(d.location.deployment, d.location.name.revision) for d in deleted}
    assert gone == {("qwen", STABLE), ("gone", STABLE), ("gone", CANARY)}
    left = {(i.location.deployment, i.location.name.revision) for i in store.list_entries()}
    assert left == {("qwen", CANARY), ("other", STABLE), ("other", CANARY)}
    assert not any(b.key.startswith("records/llm/gone/") for b in store.blobs.list(""))
    store.verify(kept_other)


def test_prune_removes_orphaned_records_after_the_grace_period_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _, (entry, _) = _record(store)
    (tmp_path / "store" / entry.location.index_key).unlink()  # a writer that died before its entry
    assert store.prune({}, when_deleted=WhenDeleted.RETAIN) == []
    later = GoldenStore(store.blobs, clock=lambda: datetime.now(UTC) + timedelta(days=1))
    orphans = later.prune({}, when_deleted=WhenDeleted.RETAIN)
    assert entry.location in [d.location for d in orphans]
    assert not list(store.blobs.list(entry.location.record_prefix))


def test_entry_json_names_every_blob_with_its_digest(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _, (entry, _) = _record(store, policy=SUMMARY)
    document = json.loads((tmp_path / "store" / entry.location.index_key).read_text())
    paths = {blob["path"] for blob in document["blobs"]}
    assert {"manifest.json", "prompts/000000.safetensors", "hidden/000000.safetensors"} <= paths
    assert all(len(blob["sha256"]) == 64 for blob in document["blobs"])
    assert document["hiddenStates"] == "summary"
    assert document["suiteDigest"] == DIGEST
