"""A shadow check's verdict from the mirror's results: the core's verdict, the evidence."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.api.enums import CheckPhase
from infergate.api.shadow import ShadowSettings
from infergate.parity.compare import ParityComparison
from infergate.parity.profiles import PROFILES
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.runner.shadow import judge_results, without_hidden
from tests.unit.parity.builders import meta, prompt, replace, teacher_forced_on

PROFILE = ProfileName.BF16_KERNEL
# The profile's limits and evidence floor (32 prompts, 4,096 scored positions), less the
# long-context minimum: the copies built here are short live requests (the long-context
# checks have their own tests in tests/unit/parity).
THRESHOLDS = without_hidden(PROFILES[PROFILE].block.model_copy(update={"min_long_prompts": 0}))
# Copies of 12 prompt and 128 output tokens: 40 of them score 5,560 positions.
COPIES = 40


def _result(copies: int, shift: float = 0.0) -> dict[str, Any]:
    comparison = ParityComparison(meta(), meta(), THRESHOLDS)
    for i in range(copies):
        base = prompt(f"m{i:06d}", seed=i, hidden=None, output_tokens=128)
        forced = teacher_forced_on(base, shift)
        comparison.add(base, replace(base, top_logprobs=forced.top, teacher_forced=forced))
    return comparison.finalize().model_dump(mode="json", by_alias=True)


def _pod(scored: int, *, shift: float = 0.0, canary_failures: int = 0) -> dict[str, Any]:
    return {
        "counts": {
            "mirrored": scored * 5,
            "sampled": scored + canary_failures,
            "scored": scored,
            "greedy": 0,
            "refused": {"notSampled": scored * 4},
            "canaryFailures": canary_failures,
            "lastError": "canary: HTTP 500" if canary_failures else None,
        },
        "forced": _result(scored, shift) if scored else None,
        "greedy": None,
    }


def _judge(pods: list[dict[str, Any]], minimum: int = COPIES) -> CheckPhase:
    verdict, _, _ = judge_results(
        pods,
        ShadowSettings(min_requests=minimum),
        profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )
    return verdict.phase


def test_enough_agreeing_copies_pass() -> None:
    assert _judge([_pod(COPIES)]) is CheckPhase.PASSED


def test_below_the_minimum_evidence_it_is_inconclusive_never_passed() -> None:
    verdict, _, totals = judge_results(
        [_pod(12)], ShadowSettings(min_requests=COPIES), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.INCONCLUSIVE
    assert totals.scored == 12
    assert any(r.metric == "shadow.minRequests" for r in verdict.reasons)


@pytest.mark.xfail(
    strict=True,
    reason="each mirror pod's copies are compared and judged on their own evidence; with "
    "several mirror pods every pod needs the profile's minimum: pooling the pods' copies "
    "into one comparison is not built (the default and the e2e run one mirror pod)",
)
def test_evidence_is_counted_over_every_mirror_pod() -> None:
    assert _judge([_pod(COPIES // 2), _pod(COPIES // 2)]) is CheckPhase.PASSED


def test_a_canary_drifting_on_live_requests_fails() -> None:
    assert _judge([_pod(COPIES, shift=-1.5)]) is CheckPhase.FAILED


def test_a_canary_that_failed_to_answer_copies_is_an_error() -> None:
    assert _judge([_pod(COPIES, canary_failures=3)]) is CheckPhase.ERROR


def test_nothing_scored_is_inconclusive() -> None:
    assert _judge([_pod(0)]) is CheckPhase.INCONCLUSIVE


def test_hidden_state_limits_are_left_out() -> None:
    assert all(
        getattr(THRESHOLDS, name) is None for name in Thresholds.model_fields if "hidden" in name
    )
