"""Per-position hidden-state summaries: the exact L2 norm and a fixed random projection.

A projection `S` of the hidden size down to `dims` with independent random signs scaled
by 1/sqrt(dims) keeps lengths on average (Johnson-Lindenstrauss; Achlioptas, "Database-
friendly random projections", 2003): for any difference d of two hidden vectors,
|S d| / |d| has mean close to 1 and a relative spread of about 1/sqrt(2 dims) (9% at 64).
Because S is linear, S a - S b = S (a - b): relative L2 error and cosine between a
stored baseline and a later run are estimated from the two projections, and the norm
ratio is exact. Max abs error is not recoverable from a summary; a comparison against a
summary-only record must say so.

The signs come from SHA-256 in counter mode over (seed, hidden size, row), not from a
numpy generator, so the same projection is rebuilt by any later version of anything.
Pure numpy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np
from numpy.typing import NDArray

SKETCH_SEED: Final = 20261109
"""Seed of the projection every record uses; stored in each entry beside the dims."""


@lru_cache(maxsize=8)
def _signs(hidden_size: int, dims: int, seed: int) -> NDArray[np.float64]:
    row_bytes = (dims + 7) // 8
    blocks = (row_bytes + 31) // 32
    rows = []
    for row in range(hidden_size):
        stream = b"".join(
            hashlib.sha256(f"{seed}:{hidden_size}:{row}:{block}".encode()).digest()
            for block in range(blocks)
        )[:row_bytes]
        bits = np.unpackbits(np.frombuffer(stream, np.uint8))[:dims]
        rows.append(bits)
    matrix = np.stack(rows).astype(np.float64) * 2.0 - 1.0
    matrix /= np.sqrt(dims)
    matrix.setflags(write=False)
    return matrix


def projection(hidden_size: int, dims: int, seed: int = SKETCH_SEED) -> NDArray[np.float64]:
    """The [hidden_size, dims] projection: entries +-1/sqrt(dims), fixed by the seed."""
    if hidden_size < 1 or dims < 1:
        raise ValueError(f"projection: hidden_size {hidden_size} and dims {dims} must be >= 1")
    return _signs(hidden_size, dims, seed)


@dataclass(frozen=True, eq=False)
class HiddenSummary:
    """Per position: `norms` [T] (exact L2 norm), `sketch` [T, dims] (the projection)."""

    norms: NDArray[np.float32]
    sketch: NDArray[np.float32]

    def __post_init__(self) -> None:
        if self.norms.ndim != 1 or self.sketch.ndim != 2:
            raise ValueError(
                f"summary: norms must be [T] and sketch [T, dims], got {self.norms.shape} "
                f"and {self.sketch.shape}"
            )
        if self.norms.shape[0] != self.sketch.shape[0]:
            raise ValueError(
                f"summary: {self.norms.shape[0]} norms for {self.sketch.shape[0]} sketch rows"
            )

    @property
    def positions(self) -> int:
        return int(self.norms.shape[0])

    @property
    def dims(self) -> int:
        return int(self.sketch.shape[1])

    def head(self, rows: int) -> HiddenSummary:
        return HiddenSummary(self.norms[:rows], self.sketch[:rows])


def summarize(hidden: NDArray[np.floating], dims: int, seed: int = SKETCH_SEED) -> HiddenSummary:
    """The summary of [T, hidden] states (computed in float64, stored as float32)."""
    states = np.asarray(hidden, dtype=np.float64)
    if states.ndim != 2:
        raise ValueError(f"summarize: hidden states must be [T, hidden], got {states.shape}")
    norms = np.linalg.norm(states, axis=1)
    sketch = states @ projection(states.shape[1], dims, seed)
    return HiddenSummary(norms.astype(np.float32), sketch.astype(np.float32))


@dataclass(frozen=True, eq=False)
class SummaryErrors:
    """Per position, candidate against baseline: estimated relative L2 error and cosine,
    and the exact norm ratio (candidate / baseline)."""

    rel_l2: NDArray[np.float64]
    cosine: NDArray[np.float64]
    norm_ratio: NDArray[np.float64]


def summary_errors(baseline: HiddenSummary, candidate: HiddenSummary) -> SummaryErrors:
    """Errors over the positions both summaries cover (the shorter one's length)."""
    if baseline.dims != candidate.dims:
        raise ValueError(
            f"summaries: {baseline.dims} and {candidate.dims} dims; both sides must use the "
            "projection the record was made with"
        )
    rows = min(baseline.positions, candidate.positions)
    sa = baseline.sketch[:rows].astype(np.float64)
    sb = candidate.sketch[:rows].astype(np.float64)
    na = baseline.norms[:rows].astype(np.float64)
    nb = candidate.norms[:rows].astype(np.float64)
    tiny = np.finfo(np.float64).tiny
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.linalg.norm(sa - sb, axis=1) / np.maximum(na, tiny)
        dot = np.einsum("ij,ij->i", sa, sb)
        cos = dot / np.maximum(np.linalg.norm(sa, axis=1) * np.linalg.norm(sb, axis=1), tiny)
        ratio = nb / np.maximum(na, tiny)
    return SummaryErrors(rel_l2=rel, cosine=np.clip(cos, -1.0, 1.0), norm_ratio=ratio)
