"""`infergate golden list|show|verify` on a directory store, as a person runs them."""

from __future__ import annotations

import json
from pathlib import Path

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
