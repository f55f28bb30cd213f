"""A scored copy as it travels from a mirror pod to the runner, and back into records.

The runner compares every mirror pod's copies in one comparison, so each pod hands over
its scored pairs: both sides' `PromptRecord`s of each copy (token ids, top-k, the
teacher-forced scores), never the prompt's or the answer's text. Arrays travel as
base64 of their little-endian bytes with dtype and shape: exact, compact, and able to
carry the NaN or -inf a JSON number cannot (a canary's NaN must reach the hygiene check).

Decoding trusts nothing: dtypes, shapes, sizes and the records' own invariants are
checked, and anything else is a `PairFormatError`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.mirror.scoring import ScoredPair
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs

MAX_ARRAY_ELEMENTS = 16 * 1024 * 1024
"""No array of a copy holds more (a copy is bounded by the proxy's body limit anyway)."""
MAX_TAGS = 8
PAIR_OVERHEAD_BYTES = 2048
"""Counted for every pair besides its arrays: its JSON keys, shapes and tags, so a budget
of pair bytes also bounds the document the pairs travel in."""
_DTYPES: dict[str, type[np.generic]] = {"int64": np.int64, "float64": np.float64}


class PairFormatError(ValueError):
    """A scored pair from a mirror pod is malformed (the runner cannot use it)."""


def pair_bytes(pair: ScoredPair) -> int:
    """The bytes a pair is counted for against a session's budget: its arrays, plus a fixed
    overhead for what travels around them."""
    records = (pair.baseline, pair.forced, pair.greedy)
    return PAIR_OVERHEAD_BYTES + sum(_record_bytes(r) for r in records if r is not None)


def encode_pair(pair: ScoredPair) -> dict[str, Any]:
    """A JSON-safe document of `pair` (no text)."""
    return {
        "baseline": _encode_record(pair.baseline),
        "forced": _encode_record(pair.forced),
        "greedy": None if pair.greedy is None else _encode_record(pair.greedy),
    }


def decode_pair(document: Any) -> ScoredPair:
    """The pair `encode_pair` made, checked; `PairFormatError` for anything else."""
    doc = _mapping(document, "pair")
    baseline = _decode_record(doc.get("baseline"), "baseline")
    forced = _decode_record(doc.get("forced"), "forced")
    raw_greedy = doc.get("greedy")
    greedy = None if raw_greedy is None else _decode_record(raw_greedy, "greedy")
    for name, record in (("forced", forced), ("greedy", greedy)):
        if record is not None and record.prompt_id != baseline.prompt_id:
            raise PairFormatError(
                f"{name} record is of prompt {record.prompt_id!r}, baseline of "
                f"{baseline.prompt_id!r}"
            )
    if forced.teacher_forced is None:
        raise PairFormatError("forced record has no teacher-forced scores")
    return ScoredPair(baseline, forced, greedy)


def with_prompt_id(pair: ScoredPair, prompt_id: str) -> ScoredPair:
    """`pair` with every record renamed (the runner namespaces ids by mirror pod)."""

    def renamed(record: PromptRecord) -> PromptRecord:
        return replace(record, prompt_id=prompt_id)

    greedy = None if pair.greedy is None else renamed(pair.greedy)
    return ScoredPair(renamed(pair.baseline), renamed(pair.forced), greedy)


# -- records -----------------------------------------------------------------------------


def _record_bytes(record: PromptRecord) -> int:
    total = record.prompt_token_ids.nbytes + record.output_token_ids.nbytes
    total += record.top_logprobs.token_ids.nbytes + record.top_logprobs.logprobs.nbytes
    forced = record.teacher_forced
    if forced is not None:
        total += forced.token_ids.nbytes + forced.target_logprobs.nbytes
        if forced.top is not record.top_logprobs:
            total += forced.top.token_ids.nbytes + forced.top.logprobs.nbytes
    return int(total)


def _encode_record(record: PromptRecord) -> dict[str, Any]:
    forced = record.teacher_forced
    document: dict[str, Any] = {
        "promptId": record.prompt_id,
        "prompt": _encode_array(record.prompt_token_ids),
        "output": _encode_array(record.output_token_ids),
        "top": _encode_top(record.top_logprobs),
        "tags": dict(record.tags),
        "teacherForced": None,
    }
    if forced is not None:
        document["teacherForced"] = {
            "tokens": _encode_array(forced.token_ids),
            "targets": _encode_array(forced.target_logprobs),
            # The scorer's records share one top-k for both; sent once.
            "top": None if forced.top is record.top_logprobs else _encode_top(forced.top),
            "start": forced.start,
        }
    return document


def _decode_record(document: Any, name: str) -> PromptRecord:
    doc = _mapping(document, name)
    prompt_id = doc.get("promptId")
    if not isinstance(prompt_id, str) or not 0 < len(prompt_id) <= 64:
        raise PairFormatError(f"{name}: promptId must be a string of 1 to 64 characters")
    tags = doc.get("tags") or {}
    if (
        not isinstance(tags, Mapping)
        or len(tags) > MAX_TAGS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
    ):
        raise PairFormatError(f"{name}: tags must map at most {MAX_TAGS} strings to strings")
    top = _decode_top(doc.get("top"), f"{name}.top")
    raw = doc.get("teacherForced")
    forced = None if raw is None else _decode_forced(raw, top, f"{name}.teacherForced")
    prompt = _decode_array(doc.get("prompt"), "int64", 1, f"{name}.prompt")
    output = _decode_array(doc.get("output"), "int64", 1, f"{name}.output")
    try:
        return PromptRecord(
            prompt_id=prompt_id,
            prompt_token_ids=prompt,
            output_token_ids=output,
            top_logprobs=top,
            teacher_forced=forced,
            tags=dict(tags),
        )
    except ValueError as err:  # the record's own invariants (steps against tokens)
        raise PairFormatError(f"{name}: {err}") from err


def _decode_forced(document: Any, top: TopLogprobs, name: str) -> TeacherForced:
    doc = _mapping(document, name)
    start = doc.get("start")
    if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
        raise PairFormatError(f"{name}.start must be an integer or null")
    forced_top = top if doc.get("top") is None else _decode_top(doc.get("top"), f"{name}.top")
    tokens = _decode_array(doc.get("tokens"), "int64", 1, f"{name}.tokens")
    targets = _decode_array(doc.get("targets"), "float64", 1, f"{name}.targets")
    try:
        return TeacherForced(tokens, targets, forced_top, start=start)
    except ValueError as err:
        raise PairFormatError(f"{name}: {err}") from err


def _encode_top(top: TopLogprobs) -> dict[str, Any]:
    return {"ids": _encode_array(top.token_ids), "logprobs": _encode_array(top.logprobs)}


def _decode_top(document: Any, name: str) -> TopLogprobs:
    doc = _mapping(document, name)
    ids = _decode_array(doc.get("ids"), "int64", 2, f"{name}.ids")
    logprobs = _decode_array(doc.get("logprobs"), "float64", 2, f"{name}.logprobs")
    try:
        return TopLogprobs(ids, logprobs)
    except ValueError as err:
        raise PairFormatError(f"{name}: {err}") from err


# -- arrays ------------------------------------------------------------------------------


def _encode_array(array: NDArray[Any]) -> dict[str, Any]:
    dtype = "int64" if np.issubdtype(array.dtype, np.integer) else "float64"
    data = np.ascontiguousarray(array, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"))
    return {
        "dtype": dtype,
        "shape": list(array.shape),
        "data": base64.b64encode(data.tobytes()).decode("ascii"),
    }


def _decode_array(document: Any, dtype: str, ndim: int, name: str) -> NDArray[Any]:
    doc = _mapping(document, name)
    shape = doc.get("shape")
    if (
        doc.get("dtype") != dtype
        or not isinstance(shape, list)
        or len(shape) != ndim
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise PairFormatError(f"{name}: expected a {ndim}-D {dtype} array")
    elements = int(np.prod(shape)) if shape else 1
    if elements > MAX_ARRAY_ELEMENTS:
        raise PairFormatError(f"{name}: {elements} elements, more than {MAX_ARRAY_ELEMENTS}")
    data = doc.get("data")
    if not isinstance(data, str):
        raise PairFormatError(f"{name}: data must be base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as err:
        raise PairFormatError(f"{name}: data is not base64: {err}") from err
    kind = np.dtype(_DTYPES[dtype]).newbyteorder("<")
    if len(raw) != elements * kind.itemsize:
        raise PairFormatError(
            f"{name}: {len(raw)} bytes for shape {shape} of {dtype} ({elements * kind.itemsize})"
        )
    return np.frombuffer(raw, dtype=kind).astype(_DTYPES[dtype]).reshape(shape)


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PairFormatError(f"{name}: expected an object, got {type(value).__name__}")
    return value
