"""`infergate golden list|show|verify|prune` on a directory store, as a person runs them
(prune is told the cluster's InferenceDeployments in place of the API server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infergate.cli import main
from infergate.golden.blobs import DirectoryStore
from infergate.golden.entry import GoldenEntry
from infergate.golden.policy import HiddenStatesPolicy, StoragePolicy
from infergate.golden.store import GoldenStore
from tests.unit.golden.records import CANARY, STABLE, check, pair


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    root = tmp_path / "golden"
    store = GoldenStore(DirectoryStore(root))
    policy = StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=4 << 20, sketch_dims=16)
    with store.begin(check(), policy) as recording:
        for i in range(2):
            recording.add(*pair(f"p{i}", seed=i))
        recording.commit(profile="bf16-kernel")
    return root


def _entries(root: Path) -> list[GoldenEntry]:
    store = GoldenStore(DirectoryStore(root))
    return [item.entry for item in store.list_entries() if item.entry is not None]


def test_list_shows_both_sides(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "list", "--store", str(store_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["DEPLOYMENT", "REVISION", "ROLE"]
    assert out[1].split()[:3] == ["llm/qwen", STABLE, "baseline"]
    assert out[2].split()[:3] == ["llm/qwen", CANARY, "candidate"]
    assert "2s" in out[1]  # two prompts kept summaries


def test_list_filters_and_prints_json(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["golden", "list", "--store", str(store_dir), "--revision", CANARY, "-o", "json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert [entry["revision"] for entry in document] == [CANARY]
    assert main(["golden", "list", "--store", str(store_dir), "-n", "other"]) == 0
    assert "no golden records" in capsys.readouterr().out


def test_show_takes_a_unique_prefix(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "show", "--store", str(store_dir), CANARY]) == 0
    out = capsys.readouterr().out
    assert f"revision:     {CANARY} (candidate of check qwen-check-1, against {STABLE})" in out
    assert "p1: hidden summary, 22 positions" in out
    assert main(["golden", "show", "--store", str(store_dir), "cccccc"]) == 1
    assert "no entry named" in capsys.readouterr().err


def test_verify_finds_a_flipped_bit(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "verify", "--store", str(store_dir)]) == 0
    assert "2 ok, 0 corrupt" in capsys.readouterr().out
    candidate = next(e for e in _entries(store_dir) if e.revision == CANARY)
    blob = store_dir / candidate.location.record_prefix / "hidden" / "000001.safetensors"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x80
    blob.write_bytes(bytes(data))
    assert main(["golden", "verify", "--store", str(store_dir)]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT  llm/qwen/{candidate.name}" in out
    assert "1 ok, 1 corrupt" in out


def test_a_store_that_cannot_be_used_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a directory")
    assert main(["golden", "list", "--store", str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["golden", "list", "--store", "s3://golden"]) == 2
    assert "--s3-endpoint" in capsys.readouterr().err


def test_the_kubectl_plugin_lists_the_same_records(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infergate.kubectl_plugin import main as kubectl_infergate

    assert kubectl_infergate(["-n", "llm", "golden", "list", "--store", str(store_dir)]) == 0
    assert STABLE in capsys.readouterr().out
    assert kubectl_infergate(["-n", "other", "golden", "list", "--store", str(store_dir)]) == 0
    assert "no golden records" in capsys.readouterr().out


# -- prune ---------------------------------------------------------------------------------


def _record(root: Path, namespace: str, deployment: str) -> None:
    store = GoldenStore(DirectoryStore(root))
    policy = StoragePolicy(HiddenStatesPolicy.NONE, max_bytes=4 << 20, sketch_dims=16)
    with store.begin(check(namespace=namespace, deployment=deployment), policy) as recording:
        recording.add(*pair("p0"))
        recording.commit(profile="bf16-kernel")


def _held(root: Path) -> set[tuple[str, str]]:
    """(namespace/deployment, revision) of every record, index and blobs alike."""
    store = GoldenStore(DirectoryStore(root))
    indexed = {
        (f"{i.location.namespace}/{i.location.deployment}", i.location.name.revision)
        for i in store.list_entries()
    }
    records = {
        "/".join(path.relative_to(root / "records").parts[:3])
        for path in (root / "records").rglob("manifest.json")
    }
    assert len(records) == len(indexed)  # no record left without its entry, nor the reverse
    return indexed


class Cluster:
    """The InferenceDeployments `golden prune` is told about (in place of the API server)."""

    def __init__(self, *deployments: tuple[str, str, list[str]]) -> None:
        self.items = [
            {
                "metadata": {"namespace": ns, "name": name},
                "status": {"revisions": [{"hash": h} for h in revisions]},
            }
            for ns, name, revisions in deployments
        ]
        self.refusal: Exception | None = None
        self.asked: list[str | None] = []

    def __call__(self, args: Any) -> list[dict[str, Any]]:
        self.asked.append(args.namespace)
        if self.refusal is not None:
            raise self.refusal
        return [d for d in self.items if args.namespace in (None, d["metadata"]["namespace"])]


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """qwen keeps only the canary's revision; gone was deleted (llm and team-b)."""
    from infergate.commands import golden as golden_command

    fake = Cluster(("llm", "qwen", [CANARY]))
    monkeypatch.setattr(golden_command, "_inference_deployments", fake)
    return fake


@pytest.fixture
def prune_store(store_dir: Path) -> Path:
    _record(store_dir, "llm", "gone")
    _record(store_dir, "team-b", "gone")
    return store_dir


ALL = {
    ("llm/qwen", STABLE),
    ("llm/qwen", CANARY),
    ("llm/gone", STABLE),
    ("llm/gone", CANARY),
    ("team-b/gone", STABLE),
    ("team-b/gone", CANARY),
}


def test_prune_is_a_dry_run_that_says_what_and_why(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["golden", "prune", "--store", str(prune_store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith(f"would delete  llm/qwen/{STABLE}-")
    assert "is no longer in the history of llm/qwen (revisionHistoryLimit)" in out[0]
    assert "1 record(s) would be deleted" in out[-1]
    assert "whenDeleted: Retain" in out[-1]
    assert "dry run" in out[-1]
    assert _held(prune_store) == ALL
    assert cluster.asked == [None]


def test_prune_apply_deletes_the_deleted_deployments_records_under_delete(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["golden", "prune", "--store", str(prune_store), "--when-deleted", "Delete"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("InferenceDeployment llm/gone was deleted") == 2
    assert out.count("InferenceDeployment team-b/gone was deleted") == 2
    assert "5 record(s) would be deleted" in out
    assert _held(prune_store) == ALL
    assert main([*argv, "--apply"]) == 0
    assert "deleted 5 record(s)" in capsys.readouterr().out
    assert _held(prune_store) == {("llm/qwen", CANARY)}


def test_prune_in_one_namespace_touches_no_other(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["golden", "prune", "--store", str(prune_store), "-n", "team-b"]
    assert main([*argv, "--when-deleted", "Delete", "--apply"]) == 0
    assert "deleted 2 record(s)" in capsys.readouterr().out
    assert _held(prune_store) == ALL - {("team-b/gone", STABLE), ("team-b/gone", CANARY)}
    assert cluster.asked == ["team-b"]


def test_prune_takes_the_operators_retention_and_flags_override_it(
    prune_store: Path, cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "golden.yaml"
    config.write_text(
        "store: {pvc: {claimName: golden}}\nretention: {whenDeleted: Delete}\n", encoding="utf-8"
    )
    argv = ["golden", "prune", "--store", str(prune_store), "--golden-config", str(config)]
    assert main([*argv, "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["whenDeleted"] == "Delete"
    assert document["applied"] is False
    assert len(document["deletions"]) == 5
    assert main([*argv, "--when-deleted", "Retain", "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["deletions"]) == 1
    config.write_text("retention: {whenDeleted: Sometimes}\n", encoding="utf-8")
    assert main(argv) == 2
    assert "--golden-config" in capsys.readouterr().err


def test_prune_deletes_nothing_when_the_deployments_cannot_be_listed(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from infergate.errors import ForbiddenError

    cluster.refusal = ForbiddenError(
        "list inferencedeployments in every namespace: 403 forbidden", status=403
    )
    argv = ["golden", "prune", "--store", str(prune_store), "--when-deleted", "Delete", "--apply"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "cannot list the InferenceDeployments of every namespace, so nothing is deleted" in (
        captured.err
    )
    assert "403" in captured.err
    assert captured.out == ""
    assert _held(prune_store) == ALL


def test_prune_leaves_a_deployment_with_no_revision_yet_alone(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.items.append({"metadata": {"namespace": "llm", "name": "gone"}})
    argv = ["golden", "prune", "--store", str(prune_store), "-n", "llm", "--when-deleted", "Delete"]
    assert main([*argv, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "left alone  llm/gone: it exists but its status lists no revision yet" in out
    assert _held(prune_store) == ALL - {("llm/qwen", STABLE)}


def test_prune_removes_orphans_past_the_grace(
    prune_store: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = next(
        e for e in _entries(prune_store) if e.deployment == "qwen" and e.revision == CANARY
    )
    (prune_store / entry.location.index_key).unlink()  # a writer that died before its entry
    argv = ["golden", "prune", "--store", str(prune_store), "-n", "llm", "--apply"]
    assert main(argv) == 0
    assert "no index entry" not in capsys.readouterr().out  # younger than 6 h: maybe writing
    assert main([*argv, "--orphan-grace", "0"]) == 0
    assert f"deleted  {entry.location}: orphan: a record with no index entry" in (
        capsys.readouterr().out
    )
    assert not (prune_store / entry.location.record_prefix).exists()
