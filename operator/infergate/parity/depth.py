"""How numeric noise grows with a model's depth: one rule for profiles and calibration.

Rounding noise enters at every layer and adds up in the residual stream like a random
walk, so an error linear in the perturbation (relative L2, absolute errors, the log of
a norm ratio, delta-p RMS, a same-top miss rate, a fork's logprob gap) grows like
sqrt(layers), and one quadratic in it (KL divergence, 1 - cosine, which is half the
squared relative error, and the signed means that are of the order of a KL: the log
perplexity ratio and mean delta-p) grows like layers.

The anchor (experiments/RESULTS.md, "bf16/fp16 noise against depth and length";
raw: experiments/gpu_noise.json): bf16 against fp32, last-layer states of a Qwen2.5-7B
shape model (random init, 2 x 8,192 tokens, one H200). Relative L2 P99 0.014 after 1
layer and 0.068 after 28 (x4.9; sqrt(28) = 5.3: the first layer adds the embeddings'
own rounding), 0.0179 after 2 and 0.0678 after 28 (x3.8; sqrt(14) = 3.7); 1 - cosine P1
1.6e-4 -> 2.29e-3 (x14.3 for 14x the layers); logit KL 1.8e-4 -> 2.3e-3 (x12.8). Flat over
8K positions. KL grows as the square of the logit perturbation while it is small.

The anchor is an upper envelope of trained growth (experiments/TRAINED_DEPTH.md; raw:
experiments/cpu_trained_depth.json): Qwen2 models of one width (128, CPU) trained the
same 250 steps at 2, 4, 8, 14 and 28 layers, bf16 and fp16 against fp32 on held-out
text, stayed at or below this rule's projection from their 2-layer point at every depth
in every family; fitted exponents: relative L2 P99 0.29 (rule 0.5), 1 - cosine P1 0.59
(rule 1), mean KL and KL P99 0.0 (rule 1), bootstrap 95% bounds under the rule's. At 28
layers measured/projected was 0.56 (relative L2), 0.32 (1 - cosine), 0.08 (KL); the
width-768 trained 28-layer model of experiments/GPU_GATE_TABLE.md likewise had relative L2
P99 0.0116 against 0.066 projected. On the H100 at that width (raw:
experiments/gpu_trained_depth.json; 550 steps a depth, held-out loss 3.5-3.7, 8K-token
prompts) the same holds more strongly: exponents 0.12 (relative L2), 0.24 (1 - cosine),
0.04 (mean KL), 0.00 (same-top miss); at 28 layers measured/projected 0.37, 0.14, 0.08,
0.28, and relative L2 P99 0.0118 (the gate table's model: 0.0116). So a depth-scaled
static limit is safe but loose for a trained model; its own calibration (the
bf16-vs-fp32 envelope) tightens it.

Where this is an extrapolation: the anchor is one architecture at random init, bf16 and
fp16 rounding; trained weights, other dtypes (fp8, quantised kernels) and other
architectures (MoE, much deeper stacks) are not measured, and width is not modelled (the
fixture's 2-layer, hidden-128 shape is 3.1x quieter than a 2-layer slice of the 7B shape:
a shape effect this rule leaves out). Limits are never scaled below their calibrated
value. Fork rates and first-divergence positions are not scaled: they depend on how
many near ties a model's distributions have, which depth alone does not say. The robust
answer stays per-model A/A noise (`infergate parity calibrate` on the model itself).
"""

from __future__ import annotations

import math
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class NoiseGrowth(StrEnum):
    """How a metric's noise grows with depth."""

    LINEAR = "linear"
    """Linear in the perturbation: grows like sqrt(layers)."""
    QUADRATIC = "quadratic"
    """Quadratic in the perturbation (KL, 1 - cosine): grows like layers."""


def depth_scale(growth: NoiseGrowth, layers: int, reference_layers: int) -> float:
    """The factor a limit measured at `reference_layers` takes at `layers` (never below 1)."""
    if reference_layers <= 0:
        raise ValueError(f"reference_layers: {reference_layers} must be positive")
    if layers <= reference_layers:
        return 1.0
    ratio = layers / reference_layers
    return math.sqrt(ratio) if growth is NoiseGrowth.LINEAR else ratio


DEPTH_SCALED: Final[MappingProxyType[str, NoiseGrowth]] = MappingProxyType(
    {
        "max_mean_kl": NoiseGrowth.QUADRATIC,
        "max_kl_p99": NoiseGrowth.QUADRATIC,
        "min_same_top_rate": NoiseGrowth.LINEAR,
        "max_divergence_logprob_gap": NoiseGrowth.LINEAR,
        "max_log_perplexity_ratio": NoiseGrowth.QUADRATIC,
        "max_delta_p_mean": NoiseGrowth.QUADRATIC,
        "max_delta_p_rms": NoiseGrowth.LINEAR,
        "max_hidden_norm_log_ratio": NoiseGrowth.LINEAR,
        "max_hidden_max_abs_err": NoiseGrowth.LINEAR,
        "max_hidden_mean_abs_err": NoiseGrowth.LINEAR,
        "max_hidden_rel_l2_p99": NoiseGrowth.LINEAR,
        "min_hidden_cosine_p1": NoiseGrowth.QUADRATIC,
        "min_hidden_cosine": NoiseGrowth.QUADRATIC,
        "max_decode_self_delta": NoiseGrowth.LINEAR,
        "max_decode_excess": NoiseGrowth.LINEAR,
    }
)
"""Threshold fields scaled with depth, and how. A `min_` limit is scaled on its distance
from perfect (1 - rate, 1 - cosine)."""


def scale_limit(name: str, limit: float, layers: int, reference_layers: int) -> float:
    """Threshold field `name`'s `limit` at `layers`, from one measured at `reference_layers`."""
    growth = DEPTH_SCALED.get(name)
    if growth is None:
        return limit
    factor = depth_scale(growth, layers, reference_layers)
    if name.startswith("min_hidden_cosine"):
        return max(-1.0, 1.0 - (1.0 - limit) * factor)
    if name.startswith("min_"):
        return max(0.0, 1.0 - (1.0 - limit) * factor)
    return limit * factor
