"""ParityRecord files: one safetensors file per prompt plus a JSON manifest.

Layout of a record directory:

    manifest.json                 format, version, RecordMeta, and the prompt index
    prompts/000000.safetensors    one prompt: token ids, top-k logprobs, teacher-forced
    prompts/000001.safetensors    scores (from a sequence position, full-vocabulary rows
    ...                           where given), logit scale, hidden states; prompt id,
                                  text, tags and the scoring start in the metadata

Version 2 added the scoring start, full-vocabulary rows and the logit scale; version 1
records (teacher-forced on generated tokens only) are still read.

The manifest is written last (atomically), on `close()`: a record without one is
incomplete and the reader refuses it, so a writer that crashed never passes for a
finished record. The reader yields one prompt at a time, and maps hidden states from
the file rather than copying them, so comparing a suite holds one prompt per side.

This module is the only file I/O of the parity core (`infergate.parity` stays pure).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import numpy as np
import safetensors.numpy
from numpy.typing import NDArray
from pydantic import ValidationError

from infergate.parity.record import PromptRecord, RecordMeta, TeacherForced, TopLogprobs

FORMAT: Final = "infergate.io/parity-record"
VERSION: Final = 2
READABLE_VERSIONS: Final = (1, 2)
MANIFEST: Final = "manifest.json"
_PROMPTS_DIR: Final = "prompts"

_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
}


class RecordFormatError(ValueError):
    """A record directory is missing, incomplete, or not in the format this code reads."""


class RecordWriter:
    """Writes a record prompt by prompt; use as a context manager.

    On a clean exit the manifest is written; on an exception it is not, and the
    directory stays an incomplete record that readers refuse.
    """

    def __init__(self, path: str | os.PathLike[str], meta: RecordMeta) -> None:
        self._root = Path(path)
        self._meta = meta
        self._entries: list[dict[str, Any]] = []
        self._ids: set[str] = set()
        self._closed = False
        if (self._root / MANIFEST).exists():
            raise RecordFormatError(
                f"{self._root}: already holds a finished record ({MANIFEST} exists); "
                "write a new record to an empty directory"
            )
        (self._root / _PROMPTS_DIR).mkdir(parents=True, exist_ok=True)

    def add(self, prompt: PromptRecord) -> None:
        """Write one prompt's file now; the prompt can be dropped from memory after."""
        if self._closed:
            raise RecordFormatError(
                f"{self._root}: record is closed; cannot add {prompt.prompt_id!r}"
            )
        if prompt.prompt_id in self._ids:
            raise RecordFormatError(
                f"{self._root}: prompt_id {prompt.prompt_id!r} was already added; "
                "ids must be unique"
            )
        name = f"{_PROMPTS_DIR}/{len(self._entries):06d}.safetensors"
        tensors, metadata = _encode(prompt)
        target = self._root / name
        partial = target.with_suffix(".partial")
        safetensors.numpy.save_file(tensors, str(partial), metadata=metadata)
        partial.replace(target)
        self._ids.add(prompt.prompt_id)
        hidden = prompt.hidden_states
        self._entries.append(
            {
                "promptId": prompt.prompt_id,
                "file": name,
                "promptTokens": int(prompt.prompt_token_ids.shape[0]),
                "outputTokens": int(prompt.output_token_ids.shape[0]),
                "hiddenStates": None if hidden is None else list(hidden.shape),
                "teacherForced": prompt.teacher_forced is not None,
            }
        )

    def close(self) -> None:
        """Write the manifest, which marks the record complete."""
        if self._closed:
            return
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "meta": self._meta.model_dump(mode="json", by_alias=True),
            "prompts": self._entries,
        }
        partial = self._root / (MANIFEST + ".partial")
        partial.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(self._root / MANIFEST)
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()


class RecordReader:
    """Reads a finished record; iterating yields one `PromptRecord` at a time."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._root = Path(path)
        manifest_path = self._root / MANIFEST
        if not self._root.is_dir():
            raise RecordFormatError(f"{self._root}: no such record directory")
        if not manifest_path.is_file():
            raise RecordFormatError(
                f"{self._root}: incomplete record, {MANIFEST} is missing (was the writer closed?)"
            )
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise RecordFormatError(f"{manifest_path}: not valid JSON ({err})") from err
        if not isinstance(manifest, dict):
            raise RecordFormatError(f"{manifest_path}: expected a JSON object at the top level")
        if manifest.get("format") != FORMAT or manifest.get("version") not in READABLE_VERSIONS:
            raise RecordFormatError(
                f"{manifest_path}: format {manifest.get('format')!r} version "
                f"{manifest.get('version')!r}; this code reads {FORMAT!r} versions "
                f"{', '.join(str(v) for v in READABLE_VERSIONS)}"
            )
        try:
            self.meta: RecordMeta = RecordMeta.model_validate(manifest.get("meta"))
        except ValidationError as err:
            raise RecordFormatError(f"{manifest_path}: meta is invalid: {err}") from err
        entries = manifest.get("prompts")
        if not isinstance(entries, list):
            raise RecordFormatError(f"{manifest_path}: prompts must be a list, got {entries!r}")
        self._files: dict[str, Path] = {}
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("promptId"), str):
                raise RecordFormatError(f"{manifest_path}: prompts[{index}] has no promptId")
            if not isinstance(entry.get("file"), str):
                raise RecordFormatError(f"{manifest_path}: prompts[{index}] has no file")
            file = self._root / entry["file"]
            if self._root.resolve() not in file.resolve().parents:
                raise RecordFormatError(
                    f"{manifest_path}: prompts[{index}].file {entry['file']!r} lies outside the "
                    "record directory"
                )
            self._files[entry["promptId"]] = file

    @property
    def path(self) -> Path:
        return self._root

    @property
    def prompt_ids(self) -> list[str]:
        """Prompt ids in the order they were written."""
        return list(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, prompt_id: object) -> bool:
        return prompt_id in self._files

    def __iter__(self) -> Iterator[PromptRecord]:
        for prompt_id in self._files:
            yield self.get(prompt_id)

    def get(self, prompt_id: str) -> PromptRecord:
        """Load one prompt; its hidden states are mapped read-only from the file."""
        file = self._files.get(prompt_id)
        if file is None:
            raise KeyError(f"{self._root}: no prompt {prompt_id!r} in this record")
        tensors, metadata = _read_safetensors(file)
        record = _decode(file, tensors, metadata)
        if record.prompt_id != prompt_id:
            raise RecordFormatError(
                f"{file}: holds prompt {record.prompt_id!r}, the manifest says {prompt_id!r}"
            )
        return record


def _encode(prompt: PromptRecord) -> tuple[dict[str, NDArray[Any]], dict[str, str]]:
    tensors: dict[str, NDArray[Any]] = {
        "prompt_token_ids": prompt.prompt_token_ids,
        "output_token_ids": prompt.output_token_ids,
        "top_token_ids": prompt.top_logprobs.token_ids,
        "top_logprobs": prompt.top_logprobs.logprobs,
    }
    forced = prompt.teacher_forced
    if forced is not None:
        tensors["tf_token_ids"] = forced.token_ids
        tensors["tf_target_logprobs"] = forced.target_logprobs
        tensors["tf_top_token_ids"] = forced.top.token_ids
        tensors["tf_top_logprobs"] = forced.top.logprobs
        if forced.full_logprobs is not None:
            tensors["tf_full_logprobs"] = forced.full_logprobs
    if prompt.hidden_states is not None:
        tensors["hidden_states"] = prompt.hidden_states
    if prompt.logit_scale is not None:
        tensors["logit_scale"] = prompt.logit_scale
    metadata = {"prompt_id": prompt.prompt_id, "tags": json.dumps(dict(prompt.tags))}
    if forced is not None and forced.start is not None:
        metadata["tf_start"] = str(forced.start)
    if prompt.output_text is not None:
        metadata["output_text"] = prompt.output_text
    return {k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata


def _read_safetensors(file: Path) -> tuple[dict[str, NDArray[Any]], dict[str, str]]:
    """Parse a safetensors file, mapping it read-only rather than reading it whole.

    Format: an 8-byte little-endian header length, the JSON header (name -> dtype, shape,
    data_offsets relative to the data section; `__metadata__` -> str map), then the data.
    """
    try:
        with file.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 8:
                raise RecordFormatError(f"{file}: {size} bytes is too short for safetensors")
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len > size - 8:
                raise RecordFormatError(f"{file}: header length {header_len} exceeds the file")
            header = json.loads(handle.read(header_len))
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RecordFormatError(f"{file}: cannot read safetensors ({err})") from err
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + header_len
    tensors: dict[str, NDArray[Any]] = {}
    for name, info in header.items():
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise RecordFormatError(
                f"{file}: tensor {name!r} has dtype {info.get('dtype')!r}; "
                f"allowed: {', '.join(_DTYPES)}"
            )
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * dtype.itemsize or start + end > size:
            raise RecordFormatError(f"{file}: tensor {name!r} data_offsets do not match its shape")
        if count == 0 or mapped is None:
            tensors[name] = np.zeros(shape, dtype)
        else:
            tensors[name] = np.frombuffer(mapped, dtype, count, start + begin).reshape(shape)
    return tensors, metadata


def _decode(
    file: Path, tensors: Mapping[str, NDArray[Any]], metadata: Mapping[str, str]
) -> PromptRecord:
    missing = {"prompt_token_ids", "output_token_ids", "top_token_ids", "top_logprobs"} - set(
        tensors
    )
    if missing or "prompt_id" not in metadata:
        raise RecordFormatError(
            f"{file}: missing {sorted(missing) or ['metadata prompt_id']}; not a prompt record"
        )
    forced = None
    try:
        if "tf_token_ids" in tensors:
            start = metadata.get("tf_start")
            forced = TeacherForced(
                token_ids=tensors["tf_token_ids"],
                target_logprobs=tensors["tf_target_logprobs"],
                top=TopLogprobs(tensors["tf_top_token_ids"], tensors["tf_top_logprobs"]),
                start=None if start is None else int(start),
                full_logprobs=tensors.get("tf_full_logprobs"),
            )
        tags = json.loads(metadata.get("tags", "{}"))
        return PromptRecord(
            prompt_id=metadata["prompt_id"],
            prompt_token_ids=tensors["prompt_token_ids"],
            output_token_ids=tensors["output_token_ids"],
            top_logprobs=TopLogprobs(tensors["top_token_ids"], tensors["top_logprobs"]),
            teacher_forced=forced,
            hidden_states=tensors.get("hidden_states"),
            output_text=metadata.get("output_text"),
            tags={str(k): str(v) for k, v in tags.items()},
            logit_scale=tensors.get("logit_scale"),
        )
    except (ValueError, KeyError, AttributeError) as err:
        raise RecordFormatError(f"{file}: invalid prompt record: {err}") from err
