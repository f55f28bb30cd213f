"""Thresholds proposed from measured noise: a stated multiple of its worst upper bound.

k = 3 for errors linear in a perturbation (relative L2, abs errors, miss rates, |log ratio|)
and k^2 = 9 for quadratic ones (KL, 1 - cosine), so both scale alike; a model deeper than
the one calibrated on scales the noise first by the depth rule the profiles use
(`infergate.parity.depth`: linear errors by sqrt(layers / calibrated layers), quadratic
ones by its square). Why 3: `infergate parity calibrate --help`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.parity.depth import NoiseGrowth, depth_scale

LINEAR_MULTIPLE = 3.0


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
    square), for a model deeper than the one calibrated on (see `depth_factor()`).
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


def depth_factor(target_layers: int | None, reference_layers: int | None) -> float:
    """The linear noise growth from `reference_layers` (the depth calibrated on) to
    `target_layers` (1 when either is not given); quadratic metrics take its square,
    which is `depth_scale`'s quadratic factor."""
    if not target_layers or not reference_layers:
        return 1.0
    return depth_scale(NoiseGrowth.LINEAR, target_layers, reference_layers)


def rule_text(multiple: float, depth: float, target_layers: int | None) -> str:
    """The proposal rule in words, as the report states it."""
    return (
        f"{multiple:g} x the noise bound for linear errors, {multiple**2:g} x for "
        "KL and 1 - cosine"
        + (f"; noise scaled x{depth:.3g} for {target_layers} layers" if depth != 1 else "")
    )
