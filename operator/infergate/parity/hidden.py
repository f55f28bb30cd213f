"""Streaming comparison of last-layer hidden states, one prompt pair at a time.

Feed prompt pairs into `HiddenStateAccumulator.add`, then `finalize`. Each pair is
reduced to five numbers per token (max abs error, mean abs error, relative L2 error,
cosine, log norm ratio) and dropped, so peak memory is one prompt pair plus a small chunk
buffer, whatever the suite size. The per-token numbers (about 30 bytes a token) are kept
for exact percentiles and their bounds over prompts (`prompt_bounds`).

The log norm ratio log(||candidate|| / ||baseline||) is signed: a final norm scaled by
1.02 leaves every cosine at exactly 1 and the relative L2 error at 0.02, but moves the
log norm ratio of every token by log 1.02 = 0.0198, far outside rounding noise.

The kernel walks the tokens in chunks that fit in cache: one subtraction reads both
sides from memory, and every other pass (squared norms by vecdot, absolute value, max,
sum) runs on cached data, accumulating in float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from infergate.parity.metrics import (
    POSITION_BUCKETS,
    BucketMetrics,
    Estimate,
    HiddenMetrics,
    Mean,
    bucket_of,
)
from infergate.parity.prompt_bounds import (
    clustered_bounds,
    clustered_error,
    clustered_quantile_bounds,
)
from infergate.parity.record import ParityInputError

LOG_NORM_RATIO_CLIP = 50.0
"""|log norm ratio| is clipped here: a zero-norm row on one side stays a finite, huge error."""

CHUNK_BYTES = 2 << 20
"""Bytes of one side per chunk: the two inputs and their difference stay in cache (measured
best between 1 and 4 MiB on a 2 MiB-L2 / 32 MiB-L3 EPYC; see bench/parity_bench.py)."""


def _rowdot_einsum(
    x: NDArray[np.float32], y: NDArray[np.float32], out: NDArray[np.float32]
) -> None:
    np.einsum("ij,ij->i", x, y, out=out)


def _rowdot_vecdot(
    x: NDArray[np.float32], y: NDArray[np.float32], out: NDArray[np.float32]
) -> None:
    np.vecdot(x, y, out=out)


# numpy 2's vecdot is a third faster than einsum here; the MindFormers venv pins numpy < 2.
_rowdot = _rowdot_vecdot if hasattr(np, "vecdot") else _rowdot_einsum


@dataclass(frozen=True)
class TokenErrors:
    """Per-token errors of one prompt; rows with non-finite input are NaN."""

    max_abs: NDArray[np.float32]
    mean_abs: NDArray[np.float32]
    rel_l2: NDArray[np.float64]
    cosine: NDArray[np.float64]
    nonfinite_baseline: int
    nonfinite_candidate: int
    log_norm_ratio: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """log(||candidate|| / ||baseline||) per token; 0 when both are zero."""

    @property
    def valid(self) -> NDArray[np.bool_]:
        return ~np.isnan(self.cosine)


def token_errors(
    baseline: NDArray[np.float32], candidate: NDArray[np.float32], chunk_bytes: int = CHUNK_BYTES
) -> TokenErrors:
    """Per-token max abs, mean abs, relative L2 (to the baseline) and cosine of two [n, h]."""
    if baseline.shape != candidate.shape or baseline.ndim != 2:
        raise ParityInputError(
            f"hidden_states shapes differ: baseline {baseline.shape}, candidate {candidate.shape}"
        )
    n, h = baseline.shape
    rows = max(1, chunk_bytes // max(1, 4 * h))
    sums = np.empty((5, n), np.float32)  # |d|^2, |a|^2, |b|^2, max|d|, sum|d|
    buffer = np.empty((min(rows, n), h), np.float32)
    a = baseline.astype(np.float32, copy=False)
    b = candidate.astype(np.float32, copy=False)
    # Overflow and NaN are expected in broken rows; they are found and handled below.
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            x, y, d = a[start:stop], b[start:stop], buffer[: stop - start]
            np.subtract(x, y, out=d)
            _rowdot(d, d, sums[0, start:stop])
            _rowdot(x, x, sums[1, start:stop])
            _rowdot(y, y, sums[2, start:stop])
            np.abs(d, out=d)
            np.max(d, axis=1, out=sums[3, start:stop], initial=0.0)
            np.einsum("ij->i", d, out=sums[4, start:stop])
    wide = sums.astype(np.float64)
    bad_a, bad_b = _redo_overflowed_rows(a, b, wide)
    d2, a2, b2 = wide[0], wide[1], wide[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        norm_d, norm_a = np.sqrt(d2), np.sqrt(a2)
        rel = np.where(a2 > 0.0, norm_d / norm_a, np.where(d2 > 0.0, np.inf, 0.0))
        # (|a|^2 + |b|^2 - |a-b|^2) / 2 = a.b, and it is exactly 1 for identical rows.
        denom = 2.0 * np.sqrt(a2 * b2)
        cos = np.where(
            denom > 0.0, (a2 + b2 - d2) / denom, np.where((a2 == 0.0) & (b2 == 0.0), 1.0, 0.0)
        )
    cos = np.clip(cos, -1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = 0.5 * (np.log(b2) - np.log(a2))
    log_ratio = np.where((a2 == 0.0) & (b2 == 0.0), 0.0, log_ratio)
    log_ratio = np.clip(log_ratio, -LOG_NORM_RATIO_CLIP, LOG_NORM_RATIO_CLIP)
    bad = bad_a | bad_b
    rel[bad] = np.nan
    cos[bad] = np.nan
    log_ratio[bad] = np.nan
    max_abs = wide[3].astype(np.float32)
    mean_abs = (wide[4] / max(h, 1)).astype(np.float32)
    max_abs[bad] = np.nan
    mean_abs[bad] = np.nan
    return TokenErrors(max_abs, mean_abs, rel, cos, int(bad_a.sum()), int(bad_b.sum()), log_ratio)


def _redo_overflowed_rows(
    a: NDArray[np.float32], b: NDArray[np.float32], wide: NDArray[np.float64]
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Rows of each side holding NaN or Inf; finite rows whose float32 sums overflowed are
    summed again in float64 (a squared norm overflows float32 from values past 1.8e19)."""
    n = a.shape[0]
    bad_a, bad_b = np.zeros(n, np.bool_), np.zeros(n, np.bool_)
    for row in np.flatnonzero(~np.isfinite(wide).all(axis=0)):
        bad_a[row] = not bool(np.isfinite(a[row]).all())
        bad_b[row] = not bool(np.isfinite(b[row]).all())
        if not (bad_a[row] or bad_b[row]):
            x, y = a[row].astype(np.float64), b[row].astype(np.float64)
            d = np.abs(x - y)
            wide[:, row] = (d @ d, x @ x, y @ y, d.max(initial=0.0), d.sum())
    return bad_a, bad_b


@dataclass(frozen=True)
class PromptHidden:
    """One prompt's hidden-state summary."""

    tokens: int
    max_abs_err: float | None
    rel_l2_p99: float | None
    cosine_p1: float | None
    cosine_min: float | None
    nonfinite_baseline: int
    nonfinite_candidate: int
    norm_abs_log_ratio: float | None = None
    bucket_rel_l2: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Sum of the relative L2 error per position bucket (with `bucket_tokens`)."""
    bucket_tokens: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))


class HiddenStateAccumulator:
    """Compares hidden states prompt pair by prompt pair; `finalize` gives suite metrics."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._chunk_bytes = chunk_bytes
        self._parts: list[tuple[TokenErrors, NDArray[np.intp]]] = []
        self._nonfinite = [0, 0]

    def add(
        self, prompt_id: str, baseline: NDArray[np.float32], candidate: NDArray[np.float32]
    ) -> PromptHidden:
        """Compare one prompt's [tokens, hidden] pair; row i is sequence position i."""
        if baseline.shape != candidate.shape:
            raise ParityInputError(
                f"prompt {prompt_id!r}: hidden_states shapes differ: baseline "
                f"{baseline.shape}, candidate {candidate.shape}; both must be [tokens, hidden]"
            )
        errors = token_errors(baseline, candidate, self._chunk_bytes)
        buckets = bucket_of(np.arange(baseline.shape[0], dtype=np.int64))
        self._parts.append((errors, buckets))
        self._nonfinite[0] += errors.nonfinite_baseline
        self._nonfinite[1] += errors.nonfinite_candidate
        valid = errors.valid
        n = len(POSITION_BUCKETS)
        return PromptHidden(
            tokens=int(baseline.shape[0]),
            max_abs_err=_max(errors.max_abs[valid]),
            rel_l2_p99=_quantile(errors.rel_l2[valid], 0.99, "higher"),
            cosine_p1=_quantile(errors.cosine[valid], 0.01, "lower"),
            cosine_min=_min(errors.cosine[valid]),
            nonfinite_baseline=errors.nonfinite_baseline,
            nonfinite_candidate=errors.nonfinite_candidate,
            norm_abs_log_ratio=_mean(np.abs(errors.log_norm_ratio[valid])),
            bucket_rel_l2=np.bincount(
                buckets[valid], weights=errors.rel_l2[valid], minlength=n
            ).astype(np.float64),
            bucket_tokens=np.bincount(buckets[valid], minlength=n).astype(np.int64),
        )

    @property
    def prompts(self) -> int:
        return len(self._parts)

    def finalize(self) -> tuple[HiddenMetrics, list[BucketMetrics]]:
        """Suite metrics (means token-weighted, P99 errors and P1 cosine over all tokens)."""
        valid = [e.valid for e, _ in self._parts]
        max_abs = _concat([e.max_abs[v] for (e, _), v in zip(self._parts, valid, strict=True)])
        rel = _concat([e.rel_l2[v] for (e, _), v in zip(self._parts, valid, strict=True)])
        cos = _concat([e.cosine[v] for (e, _), v in zip(self._parts, valid, strict=True)])
        buckets = _concat_int([b[v] for (_, b), v in zip(self._parts, valid, strict=True)])
        counts = [int(v.sum()) for v in valid]
        metrics = HiddenMetrics(
            prompts=len(self._parts),
            tokens=int(rel.shape[0]),
            max_abs_err=_max(max_abs),
            mean_abs_err=self._mean([e.mean_abs for e, _ in self._parts], valid, counts),
            rel_l2=self._mean([e.rel_l2 for e, _ in self._parts], valid, counts),
            rel_l2_p99=_quantile(rel, 0.99, "higher"),
            cosine=self._mean([e.cosine for e, _ in self._parts], valid, counts),
            cosine_p1=_quantile(cos, 0.01, "lower"),
            cosine_min=_min(cos),
            nonfinite_tokens_baseline=self._nonfinite[0],
            nonfinite_tokens_candidate=self._nonfinite[1],
            norm_log_ratio=self._mean([e.log_norm_ratio for e, _ in self._parts], valid, counts),
            norm_abs_log_ratio=self._mean(
                [np.abs(e.log_norm_ratio) for e, _ in self._parts], valid, counts
            ),
        )
        per_bucket = []
        for index, (name, start, end) in enumerate(POSITION_BUCKETS):
            inside = buckets == index
            per_bucket.append(
                BucketMetrics(
                    name=name,
                    start=start,
                    end=end,
                    kl_steps=0,
                    mean_kl=None,
                    same_top_rate=None,
                    hidden_tokens=int(inside.sum()),
                    rel_l2_mean=_mean(rel[inside]),
                    rel_l2_p99=_quantile(rel[inside], 0.99, "higher"),
                    cosine_mean=_mean(cos[inside]),
                    cosine_p1=_quantile(cos[inside], 0.01, "lower"),
                    max_abs_err=_max(max_abs[inside]),
                )
            )
        return metrics, per_bucket

    @property
    def tokens(self) -> int:
        return sum(int(e.valid.sum()) for e, _ in self._parts)

    def estimates(self, confidence: float) -> dict[str, Estimate]:
        """What the hidden-state thresholds decide on, with one-sided bounds at `confidence`."""
        valid = [e.valid for e, _ in self._parts]
        counts = [int(v.sum()) for v in valid]
        tokens = sum(counts)

        def mean(parts: list[NDArray[np.floating]]) -> Estimate:
            sums = [float(p[v].sum(dtype=np.float64)) for p, v in zip(parts, valid, strict=True)]
            found = clustered_bounds(sums, counts, confidence)
            return Estimate(
                value=found.value, lower=found.lower, upper=found.upper,
                evidence=tokens, unit="tokens", method="prompt means",
            )  # fmt: skip

        def quantile(parts: list[NDArray[np.floating]], q: float) -> Estimate:
            kept = [p[v] for p, v in zip(parts, valid, strict=True)]
            value, low, high = clustered_quantile_bounds(kept, q, confidence)
            return Estimate(
                value=value, lower=low, upper=high, evidence=tokens, unit="tokens",
                method="prompt shares",
            )  # fmt: skip

        def observed(value: float | None) -> Estimate:
            # An extreme seen is a bound on the true extreme on the side it was seen.
            return Estimate(
                value=value, lower=value, upper=value, evidence=tokens, unit="tokens",
                method="observed",
            )  # fmt: skip

        errors = [e for e, _ in self._parts]
        max_abs = _concat([e.max_abs[v] for e, v in zip(errors, valid, strict=True)])
        cos = _concat([e.cosine[v] for e, v in zip(errors, valid, strict=True)])
        return {
            "hiddenMaxAbsErr": observed(_max(max_abs)),
            "hiddenMeanAbsErr": mean([e.mean_abs for e in errors]),
            "hiddenRelL2Mean": mean([e.rel_l2 for e in errors]),
            "hiddenRelL2P99": quantile([e.rel_l2 for e in errors], 0.99),
            "hiddenCosineP1": quantile([e.cosine for e in errors], 0.01),
            "hiddenCosineMin": observed(_min(cos)),
            "hiddenNormLogRatio": mean([e.log_norm_ratio for e in errors]),
            "hiddenNormAbsLogRatio": mean([np.abs(e.log_norm_ratio) for e in errors]),
        }

    @staticmethod
    def _mean(
        parts: list[NDArray[np.floating]], valid: list[NDArray[np.bool_]], counts: list[int]
    ) -> Mean:
        sums = [float(p[v].sum(dtype=np.float64)) for p, v in zip(parts, valid, strict=True)]
        found = clustered_error(sums, counts)
        return Mean(
            value=found.value, stderr=found.stderr, count=sum(counts), clusters=found.clusters
        )


def _concat(parts: list[NDArray[np.floating]]) -> NDArray[np.float64]:
    if not parts:
        return np.zeros(0, np.float64)
    return np.concatenate(parts).astype(np.float64, copy=False)


def _concat_int(parts: list[NDArray[np.intp]]) -> NDArray[np.intp]:
    return np.concatenate(parts) if parts else np.zeros(0, np.intp)


def _quantile(values: NDArray[np.floating], q: float, method: str) -> float | None:
    """Quantile that leans to the bad side: 'higher' for errors, 'lower' for cosine."""
    if values.size == 0:
        return None
    return float(np.quantile(values, q, method=method))  # type: ignore[call-overload]


def _max(values: NDArray[np.floating]) -> float | None:
    return float(values.max()) if values.size else None


def _min(values: NDArray[np.floating]) -> float | None:
    return float(values.min()) if values.size else None


def _mean(values: NDArray[np.floating]) -> float | None:
    return float(values.mean(dtype=np.float64)) if values.size else None
