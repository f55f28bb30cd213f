"""Thresholds proposed from measured noise: a stated multiple of its worst upper bound.

k = 3 for errors linear in a perturbation (relative L2, abs errors, miss rates, |log ratio|)
and k^2 = 9 for quadratic ones (KL, 1 - cosine), so both scale alike; a model deeper than
the one calibrated on scales the noise first by the measured depth growth. Why 3, and where
the growth was measured: `infergate parity calibrate --help` and experiments/RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LINEAR_MULTIPLE = 3.0

DEPTH_GROWTH: Mapping[int, float] = {2: 3.1, 4: 4.2, 7: 5.6, 14: 8.0, 21: 9.9, 28: 11.5}
"""How much larger the bf16-vs-fp32 last-layer relative L2 is for a model of N layers at
Qwen2.5-7B's width than for the fixture's shape (2 layers, hidden 128): the 7B-shape
model cut after N layers over the fixture shape, both random init (normal 0.02), 8K
tokens, on an H200 (experiments/gpu_noise.json; experiments/RESULTS.md). Thresholds
calibrated on the fixture are scaled by it (`--target-layers`): linear errors by the
factor, KL and 1 - cosine by its square."""


@dataclass(frozen=True)
class ProposalRule:
    """How one threshold key is proposed from one metric."""

    key: str
    path: str
    power: int
    """1 for errors linear in a perturbation, 2 for quadratic ones (KL, 1 - cosine)."""
    form: str
    """'max': threshold = multiple * noise; 'min-rate': 1 - multiple * miss;
    'min-cosine': 1 - multiple^2 * shortfall."""


PROPOSAL_RULES: tuple[ProposalRule, ...] = (
    ProposalRule("maxMeanKl", "logprobs.meanKl", 2, "max"),
    ProposalRule("minSameTopRate", "logprobs.sameTopRate", 1, "min-rate"),
    ProposalRule("maxHiddenRelL2P99", "hidden.relL2P99", 1, "max"),
    ProposalRule("maxHiddenMeanAbsErr", "hidden.meanAbsErr", 1, "max"),
    ProposalRule("maxHiddenMaxAbsErr", "hidden.maxAbsErr", 1, "max"),
    ProposalRule("minHiddenCosineP1", "hidden.cosineP1", 2, "min-cosine"),
    ProposalRule("minTokenMatchRate", "tokens.matchRate", 1, "min-rate"),
    ProposalRule("minTokenAgreement", "tokens.agreement", 1, "min-rate"),
    ProposalRule("maxHiddenNormRatio", "signed.hiddenNormRatio", 1, "max"),
    ProposalRule("maxLogPerplexityRatio", "signed.logPerplexityRatio", 1, "max"),
)
"""Keys of today's Thresholds plus the signed metrics' (named as the core may name them;
a key the core does not have is proposed all the same, marked as such)."""


def propose(
    pairs: Sequence[Mapping[str, Any]],
    multiple: float = LINEAR_MULTIPLE,
    depth_factor: float = 1.0,
    known_keys: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Thresholds from the worst (largest) noise bound over `pairs`, times the multiple.

    `depth_factor` scales the noise first (linear metrics by it, quadratic ones by its
    square), for a model deeper than the one calibrated on.
    """
    known = set(known_keys)
    proposals = []
    for rule in PROPOSAL_RULES:
        worst: float | None = None
        bounded = True
        sources = []
        for pair in pairs:
            metric = pair["noise"].get(rule.path)
            if metric is None or metric["upper"] is None:
                continue
            sources.append(pair["label"])
            bounded = bounded and bool(metric["bounded"])
            worst = metric["upper"] if worst is None else max(worst, metric["upper"])
        if worst is None:
            continue
        factor = (multiple * depth_factor) ** rule.power
        noise = max(0.0, worst)
        value = factor * noise if rule.form == "max" else max(0.0, 1.0 - factor * noise)
        proposals.append(
            {
                "key": rule.key,
                "value": float(f"{value:.3g}") if value else 0.0,
                "noiseUpper": noise,
                "bounded": bounded,
                "factor": factor,
                "from": sources,
                "inThresholds": rule.key in known if known else None,
                "note": "observed noise 0: bit-exact, i.e. the strict profile" if not noise else "",
            }
        )
    return proposals


def depth_factor(target_layers: int | None) -> float:
    """The noise growth for a model of `target_layers` layers (1 when not given)."""
    return DEPTH_GROWTH.get(target_layers, 1.0) if target_layers else 1.0


def rule_text(multiple: float, depth: float, target_layers: int | None) -> str:
    """The proposal rule in words, as the report states it."""
    return (
        f"{multiple:g} x the noise bound for linear errors, {multiple**2:g} x for "
        "KL and 1 - cosine"
        + (f"; noise scaled x{depth:.3g} for {target_layers} layers" if depth != 1 else "")
    )
