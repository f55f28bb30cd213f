"""Hygiene checks: hard failures that no threshold should let through.

NaN/Inf (fp16 overflow), collapse to one repeated token (what overflow does to argmax),
differing prompt token ids (tokenizer or chat-template drift) and differing effective
engine configuration (a norm epsilon tolerances alone can miss). A finding on the
baseline's side is an Error, not a Failed: the reference itself cannot be trusted.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from infergate.parity.metrics import HygieneCheck, HygieneFinding
from infergate.parity.record import PAD_TOKEN_ID, PromptRecord
from infergate.parity.tokens import is_collapsed

FindingSide = Literal["baseline", "candidate", "both"]
_NAN_LOGPROBS = "NaN or Inf in logprobs"


class HygieneLog:
    """Collects findings prompt by prompt, grouped by (check, side, detail)."""

    def __init__(self) -> None:
        self._found: dict[tuple[HygieneCheck, FindingSide, str], list[str]] = {}

    def flag(
        self, check: HygieneCheck, side: FindingSide, detail: str, prompt_id: str = ""
    ) -> None:
        self._found.setdefault((check, side, detail), []).append(prompt_id)

    def prompt_ids(self) -> set[str]:
        return {pid for ids in self._found.values() for pid in ids if pid}

    def findings(self) -> list[HygieneFinding]:
        return [
            HygieneFinding(
                check=check,
                severity="Error" if side == "baseline" else "Failed",
                side=side,
                prompt_ids=[p for p in prompt_ids if p],
                detail=detail,
            )
            for (check, side, detail), prompt_ids in self._found.items()
        ]


def check_prompt_pair(log: HygieneLog, baseline: PromptRecord, candidate: PromptRecord) -> None:
    """Flag one prompt's pair: differing prompt tokens, NaN/Inf logprobs, a collapse."""
    pid = baseline.prompt_id
    if not np.array_equal(baseline.prompt_token_ids, candidate.prompt_token_ids):
        log.flag(
            HygieneCheck.PROMPT_TOKENS_DIFFER,
            "both",
            "prompt token ids differ (tokenizer, special tokens or chat template drift): "
            + _first_difference(baseline.prompt_token_ids, candidate.prompt_token_ids),
            pid,
        )
    if nonfinite_logprobs(baseline):
        log.flag(HygieneCheck.NON_FINITE, "baseline", _NAN_LOGPROBS, pid)
    if nonfinite_logprobs(candidate):
        log.flag(HygieneCheck.NON_FINITE, "candidate", _NAN_LOGPROBS, pid)
    if is_collapsed(candidate.output_token_ids) and not is_collapsed(baseline.output_token_ids):
        log.flag(HygieneCheck.COLLAPSE, "candidate", "output collapsed to one repeated token", pid)


def _first_difference(a: NDArray[np.int64], b: NDArray[np.int64]) -> str:
    common = min(a.shape[0], b.shape[0])
    mismatch = np.flatnonzero(a[:common] != b[:common])
    at = int(mismatch[0]) if mismatch.size else common
    head_a, head_b = a[at : at + 4].tolist(), b[at : at + 4].tolist()
    return (
        f"first at position {at} (baseline {head_a}, candidate {head_b}; "
        f"lengths {a.shape[0]} / {b.shape[0]})"
    )


def nonfinite_logprobs(record: PromptRecord) -> bool:
    """Whether any recorded logprob (padding aside) is NaN or infinite."""
    tops = [record.top_logprobs]
    if record.teacher_forced is not None:
        tops.append(record.teacher_forced.top)
        if not np.isfinite(record.teacher_forced.target_logprobs).all():
            return True
        full = record.teacher_forced.full_logprobs
        # -inf is a token of probability 0; NaN and +inf are a broken distribution.
        if full is not None and (np.isnan(full).any() or np.isposinf(full).any()):
            return True
    return any(not np.isfinite(top.logprobs[top.token_ids != PAD_TOKEN_ID]).all() for top in tops)


def config_differences(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], allowed: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """(differences as 'key: old -> new', keys present on one side only).

    Nested dicts compare by dotted key; keys matching an `allowed` fnmatch pattern are
    expected to differ. Keys on one side only are not compared: engines name their
    settings differently, so only shared keys can be judged.
    """
    patterns = tuple(allowed)
    a, b = _flatten(baseline), _flatten(candidate)
    differing = sorted(
        key
        for key in a.keys() & b.keys()
        if a[key] != b[key] and not any(fnmatch.fnmatchcase(key, p) for p in patterns)
    )
    return [f"{k}: {a[k]!r} -> {b[k]!r}" for k in differing], sorted(a.keys() ^ b.keys())


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat
