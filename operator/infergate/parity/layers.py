"""Where two runs part: the first layer whose hidden-state error leaves the allowed band.

When a check fails on hidden states or logprobs, both sides (or stand-ins loaded with the
same weights, `layer_probe_plan`) return every layer's hidden states on the same token
ids, teacher-forced on the baseline's sequence. The states are indexed

    0            embeddings (the token embedding's output)
    1 .. n       the output of decoder layer 0 .. n-1 (the residual stream, before the
                 final norm)
    n + 1        the final norm's output (what the last-layer hidden-state check compares)

so state i + 1 is "layer i" and a change inside layer i (its input norm, attention, MLP)
first shows at state i + 1. Errors are relative L2 (|c - b| / |b|) and cosine per
position, aggregated over positions by a high quantile.

Noise grows with depth (bf16 against fp32 at Qwen2.5-7B's shape, random init: relative
L2 0.014 after layer 1, 0.066 after layer 28; DESIGN.md section 5), so the band is an
input per state, e.g. a multiple of A/A noise measured per layer (`band_from_noise`) or
a geometric ramp between two anchors (`depth_band`). A state is out of band when its
error exceeds the band or is not finite; the first diverging layer is the first state
that leaves the band and stays out for `persist` consecutive states (or to the last
one), so a single noisy layer that comes back in band is not blamed. Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

EMBEDDINGS: Final = "embeddings"
FINAL_NORM: Final = "final norm"
LAYER_PROBE_ENGINES: Final = frozenset({"mindformers", "transformers"})
"""Engines whose adapters answer POST /v1/parity/layer_states themselves."""


def layer_state_names(num_layers: int) -> tuple[str, ...]:
    """Names of the n + 2 states of a model with `num_layers` decoder layers."""
    if num_layers < 1:
        raise ValueError(f"num_layers: {num_layers} is not allowed; a model has at least one")
    return (EMBEDDINGS, *(f"layer {i}" for i in range(num_layers)), FINAL_NORM)


def layer_of_state(index: int, num_states: int) -> int | None:
    """The decoder layer whose output state `index` is (None: embeddings or final norm)."""
    if 1 <= index <= num_states - 2:
        return index - 1
    return None


@dataclass(frozen=True, eq=False)
class LayerErrors:
    """Per state, candidate against baseline: relative L2 and cosine over positions.

    `rel_l2[i]` is the `quantile` of the per-position relative L2 errors at state i,
    `cosine[i]` the (1 - quantile) of the per-position cosines (the worst positions).
    """

    names: tuple[str, ...]
    rel_l2: NDArray[np.float64]
    cosine: NDArray[np.float64]
    quantile: float
    positions: int


def _finite_or(values: NDArray[np.float64], fallback: float) -> NDArray[np.float64]:
    return np.where(np.isfinite(values), values, fallback)


def per_layer_errors(
    baseline: NDArray[np.floating],
    candidate: NDArray[np.floating],
    names: Sequence[str],
    *,
    quantile: float = 0.99,
) -> LayerErrors:
    """Errors of [states, positions, hidden] arrays (full states or projections of them).

    A position where either side is not finite counts as an infinite error and a cosine
    of -1, so NaN or Inf never hides inside an average.
    """
    base = np.asarray(baseline, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if base.shape != cand.shape or base.ndim != 3:
        raise ValueError(
            f"layer states: baseline {base.shape} and candidate {cand.shape} must both be "
            "[states, positions, hidden]"
        )
    if base.shape[0] != len(names):
        raise ValueError(f"layer states: {base.shape[0]} states for {len(names)} names")
    if base.shape[1] == 0:
        raise ValueError("layer states: no positions to compare")
    if not 0.5 <= quantile <= 1.0:
        raise ValueError(f"quantile: {quantile} is not allowed; give 0.5..1")
    tiny = np.finfo(np.float64).tiny
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.linalg.norm(cand - base, axis=2)
        norm_b = np.linalg.norm(base, axis=2)
        norm_c = np.linalg.norm(cand, axis=2)
        rel = diff / np.maximum(norm_b, tiny)
        cos = np.einsum("lph,lph->lp", base, cand) / np.maximum(norm_b * norm_c, tiny)
    both_zero = (norm_b == 0) & (norm_c == 0)
    rel = np.where(both_zero, 0.0, rel)
    cos = np.where(both_zero, 1.0, cos)
    bad = ~(np.isfinite(base).all(axis=2) & np.isfinite(cand).all(axis=2))
    rel = np.where(bad, np.inf, _finite_or(rel, np.inf))
    cos = np.where(bad, -1.0, _finite_or(np.clip(cos, -1.0, 1.0), -1.0))
    return LayerErrors(
        names=tuple(names),
        rel_l2=np.quantile(rel, quantile, axis=1, method="higher"),
        cosine=np.quantile(cos, 1.0 - quantile, axis=1, method="lower"),
        quantile=quantile,
        positions=int(base.shape[1]),
    )


def first_diverging_layer(
    per_layer_errors: Sequence[float], band: Sequence[float], *, persist: int = 2
) -> int | None:
    """Index of the first state whose error leaves `band` and stays out.

    `per_layer_errors[i]` is an error that grows when the runs differ (relative L2, or
    1 - cosine); `band[i]` the most it may be at state i. Out of band: error > band, or
    not finite. The state returned is out of band, and so are the `persist - 1` states
    after it (fewer when the model ends first). None: every state stays in band, or no
    excursion lasts.
    """
    errors = [float(e) for e in per_layer_errors]
    limits = [float(b) for b in band]
    if len(errors) != len(limits):
        raise ValueError(f"band: {len(limits)} limits for {len(errors)} errors; give one per state")
    if persist < 1:
        raise ValueError(f"persist: {persist} is not allowed; give at least 1")
    if any(math.isnan(b) or b < 0 for b in limits):
        raise ValueError("band: limits must be numbers >= 0")
    out = [not math.isfinite(e) or e > b for e, b in zip(errors, limits, strict=True)]
    for start, leaves in enumerate(out):
        if leaves and all(out[start : start + persist]):
            return start
    return None


def depth_band(num_states: int, first: float, last: float) -> tuple[float, ...]:
    """A band that grows geometrically from `first` (state 0) to `last` (the last state)."""
    if num_states < 2:
        raise ValueError(f"num_states: {num_states}; a band spans at least two states")
    if not 0 < first <= last:
        raise ValueError(f"depth band: need 0 < first ({first}) <= last ({last})")
    ratio = (last / first) ** (1.0 / (num_states - 1))
    return tuple(first * ratio**i for i in range(num_states))


def band_from_noise(
    noise: Sequence[float], *, multiplier: float, floor: float
) -> tuple[float, ...]:
    """`multiplier` x the A/A noise measured at each state, never below `floor`."""
    if multiplier < 1 or floor <= 0:
        raise ValueError(f"band: multiplier {multiplier} must be >= 1 and floor {floor} > 0")
    return tuple(max(floor, multiplier * float(n)) for n in noise)


@dataclass(frozen=True)
class LayerProbePlan:
    """Who answers the layer probe for one side, and what the report must say of it."""

    engine: str
    prober: str
    stand_in: bool
    note: str


def layer_probe_plan(engine: str) -> LayerProbePlan:
    """How the runner gets one side's per-layer states.

    MindFormers and the transformers reference answer themselves. vLLM returns only the
    last layer (its pooling runner), so a transformers reference server loaded with the
    same weights, dtype and numeric overrides stands in for it, and the report says so.
    """
    if engine in LAYER_PROBE_ENGINES:
        return LayerProbePlan(engine, engine, False, f"per-layer states from the {engine} side")
    return LayerProbePlan(
        engine,
        "transformers",
        True,
        f"{engine} cannot return intermediate layers: the transformers reference, loaded with "
        "the same weights, dtype and numeric overrides, answered for it as a stand-in",
    )


@dataclass(frozen=True)
class LayerDivergence:
    """The localisation a report and a verdict reason show."""

    index: int | None
    name: str | None
    error: float | None
    limit: float | None
    metric: str
    num_layers: int
    notes: tuple[str, ...] = ()

    def reason(self) -> str:
        """One line for the verdict's reasons."""
        if self.index is None:
            return (
                f"no layer left the band ({self.metric}); the difference arises after the "
                "last hidden state (lm_head, logits or sampling)"
            )
        return (
            f"first diverging layer: {self.name} of {self.num_layers} "
            f"({self.metric} {self.error:.3g} > band {self.limit:.3g})"
        )


def localise(
    errors: LayerErrors,
    band: Sequence[float],
    *,
    use: str = "rel_l2",
    persist: int = 2,
    notes: Sequence[str] = (),
) -> LayerDivergence:
    """The first diverging layer by relative L2 (`use="rel_l2"`) or by 1 - cosine."""
    if use == "rel_l2":
        values = errors.rel_l2
        metric = f"relative L2 P{errors.quantile * 100:g}"
    elif use == "cosine":
        values = 1.0 - errors.cosine
        metric = f"1 - cosine P{(1 - errors.quantile) * 100:g}"
    else:
        raise ValueError(f"use: {use!r} is not allowed; allowed: rel_l2, cosine")
    index = first_diverging_layer(values.tolist(), band, persist=persist)
    return LayerDivergence(
        index=index,
        name=None if index is None else errors.names[index],
        error=None if index is None else float(values[index]),
        limit=None if index is None else float(band[index]),
        metric=metric,
        num_layers=len(errors.names) - 2,
        notes=tuple(notes),
    )
