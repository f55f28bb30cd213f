"""ParityRecord files: round trip, one prompt at a time, and refusal of incomplete records."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from infergate.parity.record import PromptRecord, TopLogprobs
from infergate.recordio import MANIFEST, RecordFormatError, RecordReader, RecordWriter

from .builders import meta, prompt, replace, suite, teacher_forced_on

META = meta()


def _write(path: Path, prompts: list[PromptRecord]) -> Path:
    with RecordWriter(path, META) as writer:
        for p in prompts:
            writer.add(p)
    return path


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    original = suite(3)
    original[1] = replace(
        original[1], teacher_forced=teacher_forced_on(original[1]), tags={"kind": "chat"}
    )
    reader = RecordReader(_write(tmp_path / "rec", original))
    assert reader.meta == META
    assert reader.prompt_ids == ["p0", "p1", "p2"]
    for before, after in zip(original, reader, strict=True):
        assert after.prompt_id == before.prompt_id
        np.testing.assert_array_equal(after.prompt_token_ids, before.prompt_token_ids)
        np.testing.assert_array_equal(after.output_token_ids, before.output_token_ids)
        np.testing.assert_array_equal(after.top_logprobs.token_ids, before.top_logprobs.token_ids)
        np.testing.assert_array_equal(after.top_logprobs.logprobs, before.top_logprobs.logprobs)
        assert before.hidden_states is not None
        np.testing.assert_array_equal(after.hidden_states, before.hidden_states)
        assert after.output_text == before.output_text
        assert dict(after.tags) == dict(before.tags)
    forced = reader.get("p1").teacher_forced
    assert forced is not None
    np.testing.assert_array_equal(forced.token_ids, original[1].output_token_ids)
    assert reader.get("p0").teacher_forced is None


def test_hidden_states_are_mapped_from_the_file_not_read_whole(tmp_path: Path) -> None:
    reader = RecordReader(_write(tmp_path / "rec", suite(1)))
    hidden = reader.get("p0").hidden_states
    assert hidden is not None
    owner: object = hidden
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    if isinstance(owner, memoryview):
        owner = owner.obj
    assert isinstance(owner, mmap.mmap)
    assert not hidden.flags.writeable


def test_prompt_files_are_plain_safetensors(tmp_path: Path) -> None:
    _write(tmp_path / "rec", suite(1))
    manifest = json.loads((tmp_path / "rec" / MANIFEST).read_text())
    tensors = safetensors.numpy.load_file(str(tmp_path / "rec" / manifest["prompts"][0]["file"]))
    assert tensors["hidden_states"].dtype == np.float32
    assert tensors["hidden_states"].shape == (12, 16)
    assert manifest["prompts"][0]["hiddenStates"] == [12, 16]


def test_empty_top_k_and_empty_output_survive(tmp_path: Path) -> None:
    bare = PromptRecord("bare", [1, 2], [], TopLogprobs.empty())
    reader = RecordReader(_write(tmp_path / "rec", [bare]))
    got = reader.get("bare")
    assert got.output_token_ids.shape == (0,)
    assert got.top_logprobs.k == 0
    assert got.hidden_states is None


def test_a_writer_that_failed_leaves_an_incomplete_record(tmp_path: Path) -> None:
    path = tmp_path / "rec"

    def write_then_crash() -> None:
        with RecordWriter(path, meta()) as writer:
            writer.add(prompt("p0"))
            raise RuntimeError("engine died")

    with pytest.raises(RuntimeError):
        write_then_crash()
    with pytest.raises(RecordFormatError, match=r"incomplete record, manifest.json is missing"):
        RecordReader(path)


def test_duplicate_prompt_ids_are_refused(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "rec", meta()) as writer:
        writer.add(prompt("p0"))
        with pytest.raises(RecordFormatError, match="'p0' was already added"):
            writer.add(prompt("p0", seed=3))


def test_a_finished_record_is_not_overwritten(tmp_path: Path) -> None:
    _write(tmp_path / "rec", suite(1))
    with pytest.raises(RecordFormatError, match="already holds a finished record"):
        RecordWriter(tmp_path / "rec", meta())


def test_unknown_format_version_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "rec", suite(1))
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["version"] = 99
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RecordFormatError, match="version 99; this code reads"):
        RecordReader(path)


def test_manifest_paths_cannot_leave_the_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "rec", suite(1))
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["prompts"][0]["file"] = "../../etc/passwd"
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RecordFormatError, match="lies outside the record directory"):
        RecordReader(path)


def test_truncated_prompt_file_is_a_format_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "rec", suite(1))
    file = path / "prompts" / "000000.safetensors"
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(RecordFormatError, match="do not match its shape"):
        RecordReader(path).get("p0")


def test_missing_prompt_lookup_names_it(tmp_path: Path) -> None:
    reader = RecordReader(_write(tmp_path / "rec", suite(1)))
    with pytest.raises(KeyError, match="no prompt 'nope'"):
        reader.get("nope")
