"""Where a check's limits come from: printed with every verdict, so a number can be traced.

A limit is a profile's static number (measured on the fixture, its source in
`profile_sources`), scaled to the model's depth by the one rule of `depth` when both
sides report it, or set explicitly in the check (never scaled), or k x the baseline
revision's own kept noise (`calibrated.with_measured`, which fills in `k` and the noise;
the provenance of each derived limit is `calibrated.LimitProvenance`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from infergate.parity.depth import NoiseGrowth, depth_scale
from infergate.parity.wire import WireModel

STATIC = "static profile"
"""The only source of limits today: a profile's numbers (docs/parity-profiles.md)."""

DEPTH_RULE = (
    "errors linear in the rounding (relative L2, abs errors, log norm ratio, delta-p RMS, "
    "same-top miss rate, fork gap) x sqrt(L / L0); KL, log perplexity ratio, mean delta-p "
    "and 1 - cosine x L / L0; never below the calibrated value (parity.depth)"
)


class LimitSource(WireModel):
    """The provenance of the limits a verdict was decided under."""

    profile: str
    source: str = Field(description="static profile, or measured noise")
    k: float | None = Field(
        default=None,
        description="The multiple of the model's measured A/A noise each limit is (None: "
        "static limits, not derived from measured noise).",
    )
    depth_rule: str
    calibrated_layers: int | None = Field(
        description="Depth of the model the profile's limits were measured on (L0)."
    )
    layers: int | None = Field(
        description="The model's depth as both sides report it (None: unknown, not scaled)."
    )
    scale: dict[str, float] = Field(
        default_factory=dict,
        description="Factor applied to the depth-scaled limits, per kind of growth.",
    )
    explicit: list[str] = Field(
        default_factory=list,
        description="Threshold keys set in the check itself: used as given, never scaled.",
    )

    def describe(self) -> str:
        """One line for a report: source, k, depth rule and depth."""
        k = "k -" if self.k is None else f"k {self.k:g} x measured noise"
        if self.calibrated_layers is None:
            depth = "not scaled with depth (the profile's limits are not depth-dependent)"
        elif self.layers is None:
            depth = (
                f"measured at {self.calibrated_layers} layers; the model's depth is not "
                "reported by both sides, so not scaled"
            )
        elif not self.scale:
            depth = (
                f"model depth {self.layers} <= the {self.calibrated_layers} layers the limits "
                "were measured at: not scaled"
            )
        else:
            factors = ", ".join(f"{growth} x{factor:.3g}" for growth, factor in self.scale.items())
            depth = (
                f"scaled from {self.calibrated_layers} to {self.layers} layers ({factors}); "
                f"rule: {self.depth_rule}"
            )
        text = f"{self.source} {self.profile}; {k}; {depth}"
        if self.explicit:
            text += f"; set in the check, as given: {', '.join(self.explicit)}"
        return text


def limit_source(
    profile: str,
    calibrated_layers: int | None,
    layers: int | None,
    explicit: Iterable[str] = (),
) -> LimitSource:
    """The provenance of a static profile's limits resolved at `layers`."""
    scale: dict[str, float] = {}
    if calibrated_layers is not None and layers is not None and layers > calibrated_layers:
        scale = {g.value: depth_scale(g, layers, calibrated_layers) for g in NoiseGrowth}
    return LimitSource(
        profile=profile,
        source=STATIC,
        depth_rule=DEPTH_RULE,
        calibrated_layers=calibrated_layers,
        layers=layers,
        scale=scale,
        explicit=sorted(explicit),
    )
