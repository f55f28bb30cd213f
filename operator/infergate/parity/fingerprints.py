"""Fingerprints: what each side actually ran, compared key by key before any number.

A fingerprint is a flat mapping of dotted keys to JSON values. Groups (the prefix):

- `tokenizer.*`        digest of the tokenizer's content (layout-independent), the ids a
                       fixed probe text encodes to with special tokens (so a BOS that starts
                       being prepended shows), bos/eos/pad ids, add_bos/add_eos settings
- `chat_template.*`    digest of the chat template the engine serves (None when it has none)
- `generation_config.*` the generation config the engine applies, EOS ids included
- `weights.*`          digest of the weight tensors' content (names, dtypes, shapes, bytes;
                       independent of sharding and file order, so a re-saved checkpoint
                       keeps it)
- `model_config.*`     the numeric model configuration the engine loaded (rms_norm_eps,
                       rope_theta, max_position_embeddings, vocab, hidden, layers, ...)
- `versions.*`         engine, framework (torch or mindspore), transformers, tokenizers
- `engine.*`           engine kind and compute dtype as served
- `sampling.*`         max_tokens, temperature, top_logprobs, seed: set by the runner
- `suite.*`            digest of the suite's content (not its name): set by the runner

Engines report the first groups (our adapters at `/v1/parity/config`; a vLLM side through
the probe that runs next to it); the runner adds `sampling.*` and `suite.*`. Any source
works: `merge_fingerprints` joins them and refuses two sources that disagree on a key.

Comparison: a key whose values differ, unless the profile expects that key to differ,
fails as hygiene naming the key and both values; a key on one side only fails too (it
cannot be compared, and a change that removes a setting is a change). Differences under
`sampling.*` or `suite.*` mean the two sides did not run the same check: that is an
Error, not a Failed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RUN_GROUPS: tuple[str, ...] = ("sampling.", "suite.")
"""Keys set by the runner for both sides: a difference means the check itself is invalid."""

GROUPS: tuple[str, ...] = (
    "tokenizer.",
    "chat_template.",
    "generation_config.",
    "weights.",
    "model_config.",
    "versions.",
    "engine.",
    *RUN_GROUPS,
)


class FingerprintExpectation(StrEnum):
    """Whether each side must report what it ran (a ParityCheck's `spec.fingerprints`).

    Required: a side that reports no fingerprint of its own (only the runner's `sampling.*`
    and `suite.*`) leaves the tokenizer, template, weights and loaded config unverified,
    so the check cannot pass: Inconclusive. NotExpected: the sides cannot report them (an
    endpoint serving a plain vLLM); what both report is compared, the rest is noted.
    """

    REQUIRED = "Required"
    NOT_EXPECTED = "NotExpected"


def engine_keys(fingerprints: Mapping[str, Any]) -> list[str]:
    """The keys a side reported itself: every key but the runner's run settings."""
    return [k for k in fingerprints if not k.startswith(RUN_GROUPS)]


class FingerprintConflictError(ValueError):
    """Two sources give different values for one fingerprint key of the same side."""


@dataclass(frozen=True)
class FingerprintDifference:
    key: str
    baseline: Any
    candidate: Any

    def describe(self) -> str:
        return (
            f"{self.key}: {_show(self.baseline)} (baseline) / {_show(self.candidate)} (candidate)"
        )


@dataclass(frozen=True)
class FingerprintComparison:
    differing: tuple[FingerprintDifference, ...]
    """Keys on both sides whose values differ and that the profile does not expect to differ."""
    one_sided: tuple[tuple[str, str], ...]
    """(key, the side that has it) for keys reported by one side only."""
    expected: tuple[FingerprintDifference, ...]
    """Differences the profile expects (e.g. versions.* under bf16-kernel), for the report."""
    run_differences: tuple[FingerprintDifference, ...]
    """Differences in sampling.* or suite.*: the sides did not run the same check."""


def digest(value: Any) -> str:
    """sha256 over sorted-key JSON, 16 hex digits: the digest of any JSON value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def merge_fingerprints(*sources: Mapping[str, Any]) -> dict[str, Any]:
    """One side's fingerprints from several sources (engine, probe, runner).

    Nested mappings are flattened; a key given by two sources with different values is
    refused with `FingerprintConflictError` naming it.
    """
    merged: dict[str, Any] = {}
    for source in sources:
        for key, value in flatten(source).items():
            if key in merged and not _same(merged[key], value):
                raise FingerprintConflictError(
                    f"fingerprint {key}: one source says {_show(merged[key])}, another "
                    f"{_show(value)}; a side has one value per key"
                )
            merged[key] = value
    return merged


def run_fingerprints(
    *, suite_digest: str, max_tokens: int, temperature: float, top_logprobs: int, seed: int
) -> dict[str, Any]:
    """The runner's part: what both sides were asked to do (identical for both sides)."""
    return {
        "suite.digest": suite_digest,
        "sampling.max_tokens": max_tokens,
        "sampling.temperature": temperature,
        "sampling.top_logprobs": top_logprobs,
        "sampling.seed": seed,
    }


def compare_fingerprints(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], expected: Iterable[str] = ()
) -> FingerprintComparison:
    """Differences between two sides' fingerprints; `expected` are fnmatch key patterns."""
    patterns = tuple(expected)
    a, b = flatten(baseline), flatten(candidate)
    differing: list[FingerprintDifference] = []
    allowed: list[FingerprintDifference] = []
    run: list[FingerprintDifference] = []
    for key in sorted(a.keys() & b.keys()):
        if _same(a[key], b[key]):
            continue
        difference = FingerprintDifference(key, a[key], b[key])
        if key.startswith(RUN_GROUPS):
            run.append(difference)
        elif any(fnmatch.fnmatchcase(key, p) for p in patterns):
            allowed.append(difference)
        else:
            differing.append(difference)
    one_sided = [(k, "baseline") for k in sorted(a.keys() - b.keys())]
    one_sided += [(k, "candidate") for k in sorted(b.keys() - a.keys())]
    return FingerprintComparison(tuple(differing), tuple(one_sided), tuple(allowed), tuple(run))


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    if _numeric(x) and _numeric(y):
        return bool(x == y)
    return type(x) is type(y) and bool(x == y)


def _numeric(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
