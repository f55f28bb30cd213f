"""The positive control: a known small harmful change scored through the check's own suite.

Every comparison also scores the baseline against a copy of itself with its final norm
scaled by s: with no bias after the final norm (Llama, Qwen2 and their kind), every
logit is multiplied by s and so is the last hidden state the probe records (the state
after the final norm). That copy is computed from the baseline's own records, so it
costs no engine call and exists for every check, live or against a golden record:

- logprobs: lp' = s * lp - log Z(s). Exact where the full distribution was recorded;
  over a top-k, Z sums the top-k exactly and takes the mass outside it as tokens no more
  likely than the k-th (an upper bound of their share of Z, so the control is if
  anything slightly smaller than its nominal size);
- hidden states and the chosen token's logit scale: times s;
- greedy tokens: unchanged (scaling logits keeps the argmax).

The control's size is the gate-bench's harmful `final-norm-x1.02` variant
(experiments/GATE_BENCH.md: final norm weight x 1.02, which every profile there blocks);
the ladder around it gives the minimum detectable effect. `decide_control` says whether
the check's own limits failed on each size: a check that cannot detect its control at
`CONTROL_SCALE` is Inconclusive (`verdict.decide`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np
from numpy.typing import NDArray

from infergate.parity.checks import CheckResult
from infergate.parity.power import ControlResult, ControlStep
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs

CONTROL_SCALE: Final = 1.02
"""The control every check must detect: the final norm x 1.02 (gate-bench's harmful
`final-norm-x1.02`, experiments/GATE_BENCH.md)."""

LADDER: Final[tuple[float, ...]] = (1.005, 1.01, CONTROL_SCALE, 1.05)
"""Sizes scored, smallest first; the smallest detected is the minimum detectable effect."""

PERTURBATION: Final = (
    "final norm x s: every logit and the last hidden state scaled by s, computed from the "
    "baseline's own records"
)


def _scaled_top(
    logprobs: NDArray[np.float64], scale: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Top-k logprobs [steps, k] under logits x `scale`, and each row's new log Z."""
    if logprobs.size == 0:
        return logprobs.copy(), np.zeros(logprobs.shape[0], np.float64)
    finite = np.isfinite(logprobs)
    safe = np.where(finite, logprobs, -np.inf)
    probs = np.where(finite, np.exp(safe), 0.0)
    tail = np.clip(1.0 - probs.sum(axis=1), 0.0, 1.0)
    kth = np.where(finite, probs, np.inf).min(axis=1)
    kth = np.where(np.isfinite(kth), kth, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail_scaled = np.where(kth > 0, tail * np.power(kth, scale - 1.0), 0.0)
        top_scaled = np.where(finite, np.exp(scale * safe), 0.0).sum(axis=1)
        log_z = np.log(top_scaled + tail_scaled)
    scaled = np.where(finite, scale * safe - log_z[:, None], -np.inf)
    return scaled, log_z


def _scaled_full(full: NDArray[np.float32], scale: float) -> NDArray[np.float32]:
    """Full-vocabulary logprobs under logits x `scale` (exact)."""
    raised = scale * full.astype(np.float64)
    top = raised.max(axis=1, keepdims=True)
    log_z = top + np.log(np.exp(raised - top).sum(axis=1, keepdims=True))
    scaled: NDArray[np.float32] = (raised - log_z).astype(np.float32)
    return scaled


def _scaled_forced(forced: TeacherForced, scale: float) -> TeacherForced:
    top, log_z = _scaled_top(forced.top.logprobs, scale)
    if forced.top.k == 0:
        log_z = np.zeros(forced.token_ids.shape[0], np.float64)
    target = scale * forced.target_logprobs - log_z
    full = None if forced.full_logprobs is None else _scaled_full(forced.full_logprobs, scale)
    if full is not None and full.shape[0]:
        # The last m positions have the exact distribution: their target logprobs too.
        m = full.shape[0]
        rows = np.arange(forced.token_ids.shape[0] - m, forced.token_ids.shape[0])
        target[rows] = full[np.arange(m), forced.token_ids[rows]]
    return TeacherForced(
        token_ids=forced.token_ids,
        target_logprobs=target,
        top=TopLogprobs(forced.top.token_ids, top),
        start=forced.start,
        full_logprobs=full,
    )


def perturb(record: PromptRecord, scale: float) -> PromptRecord:
    """`record` as it would read with its final norm scaled by `scale`."""
    top, _ = _scaled_top(record.top_logprobs.logprobs, scale)
    hidden = record.hidden_states
    return replace(
        record,
        top_logprobs=TopLogprobs(record.top_logprobs.token_ids, top),
        teacher_forced=(
            None if record.teacher_forced is None else _scaled_forced(record.teacher_forced, scale)
        ),
        hidden_states=None if hidden is None else (hidden * np.float32(scale)),
        logit_scale=None if record.logit_scale is None else record.logit_scale * scale,
    )


def decide_control(outcomes: Mapping[float, Sequence[CheckResult]], prompts: int) -> ControlResult:
    """The control's result from the check's limits scored on each size of the ladder.

    A size is detected when at least one limit failed on it; the check's own control is
    the size `CONTROL_SCALE`, and a ladder that lacks it counts as not detected.
    """
    ladder = [
        ControlStep(
            scale=scale,
            detected=any(c.outcome == "fail" for c in outcomes[scale]),
            failed=[c.key for c in outcomes[scale] if c.outcome == "fail"],
        )
        for scale in sorted(outcomes)
    ]
    own = next((step for step in ladder if step.scale == CONTROL_SCALE), None)
    smallest = next((step.scale for step in ladder if step.detected), None)
    return ControlResult(
        perturbation=PERTURBATION,
        scale=CONTROL_SCALE,
        detected=own is not None and own.detected,
        failed=[] if own is None else own.failed,
        ladder=ladder,
        minimum_detectable=None if smallest is None else round(smallest - 1.0, 6),
        prompts=prompts,
    )


def control_reason(control: ControlResult) -> str | None:
    """Why a check whose suite cannot detect its own control is Inconclusive (None: it can)."""
    if control.detected:
        return None
    tried = ", ".join(f"x{s.scale:g}" for s in control.ladder)
    return (
        f"positive control not detected: no limit of this check failed on the final norm "
        f"x{control.scale:g} ({control.perturbation}; sizes tried {tried}, over "
        f"{control.prompts} prompts), so passing it would prove nothing; add prompts "
        "(long ones, more output tokens) or tighten the limits with a calibration"
    )


def describe_control(control: ControlResult) -> str:
    """One line for the report: the control's outcome and the minimum detectable effect."""
    mde = (
        f"minimum detectable effect: final norm x{1 + control.minimum_detectable:g} "
        f"({control.minimum_detectable:.1%})"
        if control.minimum_detectable is not None
        else f"minimum detectable effect: above every size tried (x{control.ladder[-1].scale:g})"
        if control.ladder
        else "no control scored"
    )
    seen = f"detected by {', '.join(control.failed)}" if control.detected else "NOT detected"
    return f"Positive control final norm x{control.scale:g}: {seen}; {mde}."
