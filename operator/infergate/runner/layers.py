"""A failed check's first diverging layer, asked of both sides after the verdict.

When a check Fails and both sides are our adapters (MindFormers, the transformers
reference: they answer `POST /v1/parity/layer_states`), the runner asks both for every
layer's hidden states on the worst prompts' baseline sequences (teacher-forced: the same
token ids on both sides), at up to `POSITIONS_PER_PROMPT` positions spread over each
sequence, and finds the first state that leaves the band (`infergate.parity.layers`).
The layer goes into the verdict's reasons and the per-layer error plot into the report.

The band grows geometrically from a tenth of the profile's last-layer limit (relative
L2 P99) at the embeddings to that limit at the final norm: noise grows with depth
(DESIGN.md section 5: bf16 against fp32 at Qwen2.5-7B's shape, 0.014 after layer 1 to
0.066 after layer 28, a factor of ~5), so the input end is held tighter than the output.

vLLM returns only its last layer: for a vLLM side the transformers stand-in in its
probe pod answers (`infergate.render.layer_stand_in`, loaded with the side's weights,
dtype and numeric overrides on the first request), and both the verdict's reason and
the report say that side's layers came from the stand-in (`layer_probe_plan`). The
stand-in reproduces the weights and numeric configuration, not vLLM's kernels, so
where it finds no diverging layer the report says a difference of the engine itself
would not show there. A side nothing answers for (no stand-in could start, a golden
record has no live side) is not localised, and the report says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import escape
from typing import Final, Protocol

import numpy as np

from infergate.engines.client import EngineClientError
from infergate.engines.layer_probe import LayerProbe, LayerStates
from infergate.parity.calibrated import LayerNoise, ModelNoise
from infergate.parity.layers import (
    LayerDivergence,
    depth_band,
    layer_probe_plan,
    localise,
    per_layer_errors,
)
from infergate.parity.metrics import ParityResult, PromptSummary
from infergate.parity.noise_families import layer_band
from infergate.report.layer_chart import layer_error_chart
from infergate.runner.sides import SideTarget

WORST_PROMPTS: Final = 3
POSITIONS_PER_PROMPT: Final = 32
_SKETCH_DIMS: Final = 64
_INPUT_BAND_FRACTION: Final = 0.1
"""The band at the embeddings as a share of the last-layer limit (see the module doc)."""
_DEFAULT_LAST_BAND: Final = 0.1
"""The final-state limit when the profile sets no hidden-state limit: above the 0.066 bf16
against fp32 reaches after 28 layers at Qwen2.5-7B's shape (DESIGN.md section 5)."""
_KERNELS_UNSEEN: Final = (
    "no layer left the band in the stand-in's states: it reproduces the weights, dtype and "
    "numeric overrides, not vLLM's kernels, so a difference inside the engine itself (its "
    "version, kernels or flags) does not show there"
)
_NOISE_FLOOR: Final = 1e-6
"""Least band at any state: fp32 across frameworks differs by ~5e-7 on the fixture
(experiments/RESULTS.md), so a tighter band would blame rounding."""


class LayerSource(Protocol):
    """One side's per-layer probe."""

    def layer_states(
        self,
        token_ids: Sequence[int],
        *,
        positions: Sequence[int] | None = None,
        sketch_dims: int | None = None,
    ) -> LayerStates: ...


LayerOpener = Callable[[SideTarget, float], LayerSource | None]


def open_layer_probe(target: SideTarget, timeout: float) -> LayerSource | None:
    """The side's layer probe (its adapter or its stand-in); None when it has none."""
    if target.layer_url is None:
        return None
    return LayerProbe(target.layer_url, target.model, timeout=timeout)


def can_probe_layers(target: SideTarget) -> bool:
    """Something answers the layer probe for the side: our adapter, or a stand-in."""
    return target.layer_url is not None


def stand_in_notes(sides: Sequence[SideTarget]) -> tuple[str, ...]:
    """What the report and the reason say of each side whose layers came from a stand-in."""
    by_note: dict[str, list[str]] = {}
    for target in sides:
        plan = layer_probe_plan(target.engine)
        if plan.stand_in:
            by_note.setdefault(plan.note, []).append(f"{target.side} ({target.engine})")
    return tuple(f"{', '.join(who)}: {note}" for note, who in by_note.items())


@dataclass(frozen=True)
class LayerReport:
    """What the verdict and the report get: the reason line, notes, an HTML section."""

    reason: str | None
    notes: tuple[str, ...]
    html: str

    @classmethod
    def skipped(cls, why: str) -> LayerReport:
        """No localisation; the report says why."""
        return cls(None, (f"first diverging layer not localised: {why}",), "")


def worst_prompts(prompts: Sequence[PromptSummary], count: int = WORST_PROMPTS) -> list[str]:
    """Prompt ids with the largest hidden-state error (else mean KL), worst first."""

    def badness(p: PromptSummary) -> tuple[float, float]:
        rel = p.hidden_rel_l2_p99 if p.hidden_rel_l2_p99 is not None else -1.0
        kl = p.mean_kl if p.mean_kl is not None else -1.0
        return (rel, kl)

    ranked = sorted(prompts, key=badness, reverse=True)
    return [p.prompt_id for p in ranked[:count]]


def spread_positions(length: int, count: int = POSITIONS_PER_PROMPT) -> list[int]:
    """Up to `count` positions spread evenly over a sequence, the first and last included."""
    if length <= count:
        return list(range(length))
    return sorted({round(i * (length - 1) / (count - 1)) for i in range(count)})


def _ask(source: LayerSource, tokens: Sequence[int], positions: Sequence[int]) -> LayerStates:
    try:
        return source.layer_states(tokens, positions=positions)
    except EngineClientError:
        # Too many floats for the server's bound (a wide model): projections instead.
        return source.layer_states(tokens, positions=positions, sketch_dims=_SKETCH_DIMS)


def localise_failure(
    result: ParityResult,
    sides: tuple[SideTarget, SideTarget],
    references: Mapping[str, Sequence[int]],
    opener: LayerOpener,
    *,
    timeout: float,
    noise: ModelNoise | None = None,
) -> LayerReport:
    """The first diverging layer of a failed check (or why it cannot be found); `noise`:
    the baseline revision's kept noise, whose per-layer part sets the band."""
    baseline, candidate = sides
    cannot = [t for t in sides if not can_probe_layers(t)]
    if cannot:
        who = "; ".join(
            f"{t.side} ({t.engine}) cannot return intermediate layers"
            + (f": {t.layer_missing}" if t.layer_missing else "")
            for t in cannot
        )
        return LayerReport.skipped(who)
    base_probe, cand_probe = opener(baseline, timeout), opener(candidate, timeout)
    if base_probe is None or cand_probe is None:
        return LayerReport.skipped("no layer probe")
    try:
        return _localise(result, (base_probe, cand_probe), references, stand_in_notes(sides), noise)
    finally:
        for probe in (base_probe, cand_probe):
            close = getattr(probe, "close", None)
            if callable(close):
                close()


def _localise(
    result: ParityResult,
    probes: tuple[LayerSource, LayerSource],
    references: Mapping[str, Sequence[int]],
    stand_ins: tuple[str, ...] = (),
    noise: ModelNoise | None = None,
) -> LayerReport:
    base_probe, cand_probe = probes
    chosen = [p for p in worst_prompts(result.prompts) if p in references]
    if not chosen:
        return LayerReport.skipped("no prompts")
    base_parts, cand_parts = [], []
    names: tuple[str, ...] = ()
    sketched = False
    try:
        for prompt_id in chosen:
            tokens = list(references[prompt_id])
            positions = spread_positions(len(tokens))
            b = _ask(base_probe, tokens, positions)
            c = _ask(cand_probe, tokens, positions)
            if b.names != c.names or b.states.shape != c.states.shape:
                return LayerReport.skipped(
                    f"the sides' models differ in shape ({len(b.names)} and {len(c.names)} states)"
                )
            names = b.names
            sketched = sketched or b.sketch_dims is not None
            base_parts.append(b.states)
            cand_parts.append(c.states)
    except (EngineClientError, OSError, ValueError, KeyError) as err:
        skipped = LayerReport.skipped(f"the layer probe failed: {err}")
        return LayerReport(None, (*skipped.notes, *stand_ins), "")
    errors = per_layer_errors(
        np.concatenate(base_parts, axis=1), np.concatenate(cand_parts, axis=1), names
    )
    limit = result.thresholds.max_hidden_rel_l2_p99
    last = max(limit if limit is not None else _DEFAULT_LAST_BAND, _NOISE_FLOOR)
    static = depth_band(len(names), max(last * _INPUT_BAND_FRACTION, _NOISE_FLOOR), last)
    band, band_source = layer_band(static, names, noise)
    how = (
        f"per-layer states of the {len(chosen)} worst prompts ({', '.join(chosen)}), "
        f"{errors.positions} positions teacher-forced on the baseline's sequences"
        + (", as 64-dim projections" if sketched else "")
        + f"; band: {band_source}"
    )
    divergence: LayerDivergence = localise(errors, band, notes=(how, *stand_ins))
    notes = divergence.notes
    if stand_ins and divergence.index is None:
        notes = (*notes, _KERNELS_UNSEEN)
    chart = layer_error_chart(
        names,
        [float(v) for v in errors.rel_l2],
        band,
        first=divergence.index,
        metric=divergence.metric,
        note=how,
    )
    reason = divergence.reason()
    if stand_ins:
        reason = f"{reason} [{'; '.join(stand_ins)}]"
    paragraphs = "".join(f"<p>{escape(n)}</p>" for n in notes[1:])
    html = f"<h2>First diverging layer</h2><p>{escape(reason)}</p>{paragraphs}{chart}"
    return LayerReport(reason, notes, html)


def layer_noise(source: LayerSource, sequences: Sequence[Sequence[int]]) -> LayerNoise | None:
    """Self against self per layer: each sequence asked alone, then all of them at once
    (another batch, as the A/A of the serving path runs at another concurrency). None
    without sequences or when the answers differ in shape."""
    if not sequences:
        return None
    ask = [(list(s), spread_positions(len(s))) for s in sequences]
    alone = [_ask(source, tokens, positions) for tokens, positions in ask]
    with ThreadPoolExecutor(max_workers=len(ask)) as pool:
        together = list(pool.map(lambda item: _ask(source, item[0], item[1]), ask))
    names = alone[0].names
    if any(a.names != names or a.states.shape != b.states.shape
           for a, b in zip(alone, together, strict=True)):  # fmt: skip
        return None
    errors = per_layer_errors(
        np.concatenate([a.states for a in alone], axis=1),
        np.concatenate([b.states for b in together], axis=1),
        names,
    )
    return LayerNoise(
        names=list(names),
        rel_l2=[float(v) for v in errors.rel_l2],
        positions=errors.positions,
        method=f"{len(ask)} sequences asked one at a time against all at once",
    )
