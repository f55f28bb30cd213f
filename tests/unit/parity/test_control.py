"""The positive control: the final norm scaled, computed from the baseline's records, scored
through the check's own limits; a check that cannot detect it is Inconclusive."""

from __future__ import annotations

import numpy as np
import pytest

from infergate.parity.checks import CheckResult
from infergate.parity.compare import compare_sources
from infergate.parity.control import (
    CONTROL_SCALE,
    LADDER,
    control_reason,
    decide_control,
    describe_control,
    perturb,
)
from infergate.parity.profiles import plan_gate
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.parity.verdict import VerdictStatus, decide

from .builders import scored_record
from .test_verdict import suite


def _logits_record(logits: np.ndarray, hidden: np.ndarray) -> PromptRecord:  # type: ignore[type-arg]
    full = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    order = np.argsort(-full, axis=1)
    steps = full.shape[0]
    tokens = order[:, 0]
    top = TopLogprobs(order, np.take_along_axis(full, order, axis=1))
    forced = TeacherForced(
        tokens, full[np.arange(steps), tokens], top, full_logprobs=full.astype(np.float32)
    )
    return PromptRecord("p", np.arange(4), tokens, top, forced, hidden_states=hidden)


def test_perturb_is_the_softmax_of_scaled_logits_and_scales_the_hidden_state() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 8)) * 3
    record = _logits_record(logits, rng.standard_normal((4, 6)).astype(np.float32))
    scaled = perturb(record, 1.02)
    expected = _logits_record(1.02 * logits, record.hidden_states * 1.02)  # type: ignore[operator]
    # The whole vocabulary is in the top-k here: exact.
    np.testing.assert_allclose(
        scaled.top_logprobs.logprobs, expected.top_logprobs.logprobs, atol=1e-9
    )
    assert scaled.teacher_forced is not None
    assert expected.teacher_forced is not None
    np.testing.assert_allclose(
        scaled.teacher_forced.target_logprobs, expected.teacher_forced.target_logprobs, atol=1e-5
    )
    np.testing.assert_allclose(scaled.hidden_states, expected.hidden_states, rtol=1e-6)  # type: ignore[arg-type]
    np.testing.assert_array_equal(scaled.output_token_ids, record.output_token_ids)


def test_over_a_top_k_the_tail_counts_as_tokens_no_likelier_than_the_kth() -> None:
    # Top-2 of a 4-token distribution [0.6, 0.3, 0.05, 0.05]: the tail's true scaled share
    # is 2 * 0.05**s; the control counts 0.1 * 0.3**(s - 1), which is larger.
    probs = np.array([[0.6, 0.3]])
    scaled = perturb(
        PromptRecord(
            "p", np.arange(2), np.array([0]), TopLogprobs(np.array([[0, 1]]), np.log(probs))
        ),
        1.05,
    )
    exact_z = 0.6**1.05 + 0.3**1.05 + 2 * 0.05**1.05
    control_z = 0.6**1.05 + 0.3**1.05 + 0.1 * 0.3**0.05
    assert scaled.top_logprobs.logprobs[0, 0] == pytest.approx(
        1.05 * np.log(0.6) - np.log(control_z)
    )
    assert np.log(control_z) > np.log(exact_z)


def _checks(*failed: str) -> list[CheckResult]:
    keys = ["maxMeanKl", "maxHiddenRelL2P99", *failed]
    return [
        CheckResult(key=k, label=k, value=0.0, threshold=1.0, op="<=", worst_prompts=[],
                    outcome="fail" if k in failed else "pass", message=k)
        for k in dict.fromkeys(keys)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("failing", "detected", "mde"),
    [
        ({1.005: (), 1.01: ("maxMeanKl",), 1.02: ("maxMeanKl",), 1.05: ("maxMeanKl",)}, True, 0.01),
        ({1.005: (), 1.01: (), 1.02: (), 1.05: ("maxKlP99",)}, False, 0.05),
        ({1.005: (), 1.01: (), 1.02: (), 1.05: ()}, False, None),
        ({1.005: ("maxMeanKl",), 1.01: (), 1.02: ("maxMeanKl",), 1.05: ()}, True, 0.005),
        ({1.01: ("maxMeanKl",)}, False, 0.01),
    ],
)
def test_decide_control(
    failing: dict[float, tuple[str, ...]], detected: bool, mde: float | None
) -> None:
    control = decide_control({scale: _checks(*keys) for scale, keys in failing.items()}, prompts=36)
    assert control.detected is detected
    assert control.minimum_detectable == mde
    assert (control_reason(control) is None) is detected
    assert ("NOT detected" in describe_control(control)) is (not detected)


def test_every_check_carries_its_control_and_a_strong_suite_detects_it() -> None:
    base = scored_record(suite())
    gate = plan_gate(base.meta, base.meta, profile=ProfileName.BF16_KERNEL)
    result = compare_sources(base, base, gate.thresholds, disabled=gate.disabled)
    assert result.control is not None
    assert [s.scale for s in result.control.ladder] == list(LADDER)
    assert result.control.detected
    assert result.control.scale == CONTROL_SCALE
    assert result.control.minimum_detectable is not None
    assert result.control.minimum_detectable <= CONTROL_SCALE - 1
    assert decide(result).status is VerdictStatus.PASSED


def test_limits_too_loose_to_see_the_control_make_a_clean_check_inconclusive() -> None:
    base = scored_record(suite())
    loose = Thresholds(max_mean_kl=1.0, min_same_top_rate=0.5, min_prompts=4)
    result = compare_sources(base, base, loose)
    verdict = decide(result)
    assert result.control is not None
    assert not result.control.detected
    assert verdict.status is VerdictStatus.INCONCLUSIVE
    assert any(r.startswith("positive control not detected") for r in verdict.reasons)


def test_a_proven_failure_stays_failed_whatever_the_control() -> None:
    base = scored_record(suite())
    worse = scored_record([perturb(p, 1.2) for p in suite()])
    loose = Thresholds(max_hidden_rel_l2_p99=0.1, min_prompts=4)
    result = compare_sources(base, worse, loose)
    assert result.control is not None
    assert not result.control.detected
    assert decide(result).status is VerdictStatus.FAILED
