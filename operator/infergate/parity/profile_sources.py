"""Where each profile's numbers come from, and why some metrics are reported only.

The one place this prose lives: `profiles.PROFILES` attaches it to each profile, and the
tables of docs/parity-profiles.md are generated from it (`infergate crds --profiles`).
A source names a published anchor, this project's measurement (experiments/RESULTS.md,
experiments/GATE_BENCH.md), or "to calibrate" where the A/A measurement of
`infergate parity calibrate` is still to replace the number. Keys are threshold keys
(camelCase), as a user writes them.
"""

from __future__ import annotations

from types import MappingProxyType

_LLAMA_CPP = "llama.cpp perplexity --kl-divergence, LLaMA-3-8B: BF16 vs FP16 mean KLD 2.5e-5"
_Q8 = "q8_0 vs F16 KLD 1.36e-3 (must be blocked)"
_OURS_BF16 = "experiments/RESULTS.md: vLLM bf16 vs fp32 on the fixture, KL 1.26e-5..1.47e-5"
_OURS_HIDDEN = (
    "experiments/RESULTS.md bf16 vs fp32 (2-layer fixture): hidden relative L2 mean 6.2e-3, "
    "cosine P1 0.99993"
)
_DEPTH = "scaled to depth (DESIGN.md: 0.014 after 1 layer, 0.066 after 28 at Qwen2.5-7B shape)"
_CALIBRATE = "to calibrate with infergate parity calibrate (A/A)"
_LEGIT = "vLLM check_logprobs_close: both tokens in each other's top-k at the first fork"
_TAU_BF16 = "PARITY.md: baseline logprob gap at the fork under ~0.1 nat (bf16)"
_MSPROBE_COS = "msprobe guidance: cosine > 0.99"
_EVIDENCE = (
    "one-sided 95% Wilson bound of 0 bad in 32 prompts is 7.8%, under the 10% rate limits; "
    "16 prompts would allow 15.6%"
)
_LONG_EVIDENCE = (
    "paired per-prompt bounds need several long prompts: t(0.95, 3 df) = 2.35; the default "
    "suite has 4 (2 Chinese, 2 English), the most that fits a few CPU minutes"
)
_STEPS = (
    "Wilson lower bound of a same-top rate of 1 over n steps is n / (n + 2.7): 4096 steps "
    "certify 0.9993, above every same-top limit"
)
_NORM = (
    "a final norm scaled by 1.02 moves every token's log norm ratio by 0.0198 (4x this); "
    "bf16 output rounding is 2^-9 per element, about 5e-4 on a norm"
)
_PPL = "vLLM model tests: perplexity gap < 0.01; " + _CALIBRATE
_DP_RMS = "llama.cpp BF16 vs FP16 RMS delta-p 0.15% (6.7x here for a flatter fixture); "
_LONG = "PARITY.md long context: 8K+ bucket KLD over 3x the 0-1K bucket's fails"
_LONG_TOP = "PARITY.md long context: 8K+ same-top rate drop over half a point fails"
_LONG_HIDDEN = (
    "experiments/RESULTS.md: bf16 vs fp32 hidden relative L2 flat with position (6.3e-3 at "
    "0-1K, 6.2e-3 at 8K+); a rope error grows with position"
)
_LONG_RATE = "at most half the long prompts fork unexplained (0 of 4: Wilson upper 0.40)"
_FORK_BF16 = (
    "ours: under 10% of prompts fork unexplained within 16 tokens (legitimate near-tie forks "
    "are expected without batch invariance: vLLM forks around token 100 on Qwen3-235B)"
)
_ILLEGIT = f"{_LEGIT}; ours: under 10% of prompts with an unexplained fork"

_DECODE = (
    "k 3 x 5.2e-3 nats of decode-vs-prefill noise (mean |delta| upper bound): first vLLM bf16 "
    "CPU on the fixture, now standing on the H100 A/A at 28 layers (5.0e-3); vLLM's GPU "
    "decode path unmeasured (experiments/DECODE_NOISE.md)"
)

_BF16 = {
    "confidence": "TensorRT-LLM accuracy gate: one-sided test at alpha 0.05",
    "maxDecodeSelfDelta": _DECODE,
    "maxDecodeExcess": _DECODE + "; a prefill-only decode side shows the other's as excess",
    "requireDecodeEvidence": "decode paths are seen nowhere else: without top-k logprobs of "
    "the generated tokens the check cannot judge them",
    "minPrompts": _EVIDENCE,
    "minLongPrompts": _LONG_EVIDENCE,
    "minScoredSteps": _STEPS,
    "maxMeanKl": f"{_LLAMA_CPP} (4x); {_OURS_BF16} (7x); {_Q8} is 13x above",
    "maxKlP99": f"10x the mean limit for a heavy tail; {_CALIBRATE}",
    "minSameTopRate": "PARITY.md bf16 row; llama.cpp BF16 vs FP16 same top 99.74%, q8_0 97.67%",
    "maxDeltaPRms": _DP_RMS + _CALIBRATE,
    "maxDeltaPMean": f"llama.cpp reports mean delta-p near 0 for BF16; {_CALIBRATE}",
    "maxLogPerplexityRatio": _PPL,
    "maxHiddenNormLogRatio": _NORM,
    "minHiddenCosineP1": f"{_OURS_HIDDEN} (1 - cos 7e-5, 7x); {_DEPTH}",
    "minHiddenCosine": (
        f"{_MSPROBE_COS} at 28 layers; at the fixture's 2: experiments/GATE_BENCH.md "
        "calibration, benign bf16 vs fp32 worst token 1 - cos = 1.06e-3 over 35,813 tokens, "
        f"9x (the rule for quadratic errors) gives 0.99 (0.999 failed that benign pair); {_DEPTH}; "
        "a raw minimum at depth is loose: minHiddenCosineP1 carries the decision there"
    ),
    "maxHiddenRelL2P99": f"{_OURS_HIDDEN} (P99 about 1.2e-2, 2.5x); {_DEPTH}",
    "maxIllegitimateDivergenceRate": _ILLEGIT,
    "maxDivergenceLogprobGap": (
        f"{_TAU_BF16}; scaled by the dtype rounding step at the logit on both sides "
        "(2 u |logit|, u = 2^-8 bf16, 2^-11 fp16, 2^-24 fp32)"
    ),
    "minFirstDivergenceP10": _FORK_BF16,
    "maxLongSeqDivergenceRate": _LONG_RATE,
    "maxLongToShortKlRatio": (
        _LONG + "; now paired per prompt on its own positions, each bucket plus maxMeanKl / "
        "(limit - 1): fails when far > limit x near + maxMeanKl (experiments/GATE_BENCH.md: "
        "every change on the fixture, benign ones included, grows a prompt's own KL 1.2-3.7x "
        "by 8K+)"
    ),
    "maxLongSameTopDrop": _LONG_TOP + "; each long prompt 0-1K against its positions from "
    "4K on, binomial over those positions (long_prompts.same_top_drop)",
    "maxLongToShortHiddenRatio": (
        _LONG_HIDDEN + "; each bucket plus maxHiddenRelL2P99 / (limit - 1): fails when far > "
        "limit x near + maxHiddenRelL2P99"
    ),
    "longPromptTokens": "PARITY.md long context: 8K+",
}

_BF16_REPORTED_ONLY = {
    "hiddenMeanAbsErr": "absolute scale depends on the model; relative L2 decides",
    "hiddenMaxAbsErr": (
        "msprobe's max-abs < 1e-3 is below one bf16 rounding step of a unit-scale state "
        "(3.9e-3); msprobe's bf16 rule (dual 100) needs per-element errors, not measured"
    ),
    "minTokenMatchRate": "forks at near-ties are expected without batch invariance",
    "minTokenAgreement": "as the token match rate",
    "minLegitimateDivergenceRate": (
        "replaced by maxIllegitimateDivergenceRate: a share among forks is undefined with few forks"
    ),
    "hiddenNormLogRatio": "signed direction of maxHiddenNormLogRatio, shown for reports",
    "kl coverage": "covered mass of the top-k is reported beside the KL it bounds",
}

_FP32 = {
    **_BF16,
    "maxMeanKl": (
        "PARITY.md fp32 warn row (1e-6); experiments/RESULTS.md fp32 across frameworks "
        "3e-13..7e-11 at 2 layers; room for depth; " + _CALIBRATE
    ),
    "maxKlP99": f"10x the mean limit; {_CALIBRATE}",
    "minSameTopRate": "PARITY.md fp32-across-frameworks row",
    "maxDeltaPRms": f"fp32 logit errors are ~1e-6 relative; {_CALIBRATE}",
    "maxDeltaPMean": _CALIBRATE,
    "maxLogPerplexityRatio": f"100x under the bf16 limit; {_CALIBRATE}",
    "maxHiddenNormLogRatio": "experiments/RESULTS.md fp32 relative L2 5e-7; 20x",
    "minHiddenCosineP1": f"PARITY.md fp32 row; {_DEPTH}",
    "minHiddenCosine": f"PARITY.md fp32 row, 10x looser for the worst token; {_DEPTH}",
    "maxHiddenRelL2P99": (
        f"experiments/RESULTS.md fp32 relative L2 5e-7 (40x); torch.testing fp32 rtol 1.3e-6; "
        f"{_DEPTH}"
    ),
    "maxHiddenMaxAbsErr": "msprobe guidance: MaxAbsErr < 1e-3",
    "maxDivergenceLogprobGap": "PARITY.md: gap under ~1e-3 nat (fp32)",
    "minFirstDivergenceP10": "ours: fp32 forks are rare; " + _CALIBRATE,
    "maxLongSameTopDrop": _LONG_TOP + "; each long prompt 0-1K against its positions from "
    "4K on, binomial over those positions (long_prompts.same_top_drop)",
}

_STRICT_KEYS = (
    "minTokenMatchRate",
    "minTokenAgreement",
    "maxMeanKl",
    "minSameTopRate",
    "maxHiddenMaxAbsErr",
    "maxHiddenRelL2P99",
    "minHiddenCosineP1",
    "maxLongSeqDivergenceRate",
)


BF16 = MappingProxyType(_BF16)
DTYPE_CHANGE = MappingProxyType(
    {**_BF16, "maxMeanKl": f"PARITY.md dtype-change row; {_BF16['maxMeanKl']}"}
)
GPU_TO_ASCEND_BF16 = MappingProxyType(
    {k: f"PARITY.md GPU -> Ascend bf16 row: as bf16; {v}" for k, v in _BF16.items()}
)
FP32_CROSS_FRAMEWORK = MappingProxyType(_FP32)
STRICT = MappingProxyType(
    {
        **dict.fromkeys(
            _STRICT_KEYS,
            "vLLM batch invariance: logprobs bitwise equal between batch sizes; "
            "PARITY.md replay row (KLD 0, same top 100%, cos 1.0, relL2 0). A "
            "limit at a bound of its range is decided on what was observed: any "
            "violation fails",
        ),
        "confidence": _BF16["confidence"],
        "minPrompts": _EVIDENCE,
        "minLongPrompts": "bit-exactness shows at any position: long prompts "
        "are judged when present, not required",
        "minScoredSteps": "enough positions for one difference to show",
    }
)

BF16_REPORTED = MappingProxyType(_BF16_REPORTED_ONLY)
FP32_REPORTED = MappingProxyType(
    {k: v for k, v in _BF16_REPORTED_ONLY.items() if k != "hiddenMaxAbsErr"}
)
STRICT_REPORTED = MappingProxyType(
    {"every other metric": "any difference already fails the exact checks"}
)
