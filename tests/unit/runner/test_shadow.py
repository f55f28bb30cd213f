"""A shadow check's verdict from the mirror's results: the core's verdict, the evidence."""

# ruff: noqa: ARG002 - the fakes take the protocols' arguments, used or not

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from infergate.api.common import ConfigMapKeyReference
from infergate.api.enums import CheckPhase
from infergate.api.parity_check import ParityCheckSpec
from infergate.api.shadow import ShadowSettings
from infergate.parity.compare import ParityComparison
from infergate.parity.profiles import PROFILES
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.plan.check_status import Judgement
from infergate.runner import shadow
from infergate.runner.shadow import judge_results, without_hidden
from infergate.runner.sides import SideTarget
from infergate.suite import Suite
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


def _with_greedy(pod: dict[str, Any], copies: int, shift: float = 0.0) -> dict[str, Any]:
    """`pod` where `copies` of its scored copies were greedy requests."""
    counts = {**pod["counts"], "greedy": copies}
    return {**pod, "counts": counts, "greedy": _result(copies, shift)}


def test_too_few_greedy_copies_warn_and_the_teacher_forced_copies_decide() -> None:
    verdict, _, totals = judge_results(
        [_with_greedy(_pod(COPIES), 5)], ShadowSettings(min_requests=COPIES),
        profile=PROFILE.value, warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.PASSED
    assert totals.greedy == 5
    assert any("greedy copies (pod 0)" in w and "Inconclusive" in w for w in verdict.warnings)


def test_too_few_greedy_copies_that_disagree_still_fail() -> None:
    assert _judge([_with_greedy(_pod(COPIES), 5, shift=-1.5)]) is CheckPhase.FAILED


def test_greedy_copies_alone_below_the_floor_stay_inconclusive() -> None:
    pod = {**_with_greedy(_pod(COPIES), 5), "forced": None}
    assert _judge([pod]) is CheckPhase.INCONCLUSIVE


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


class _Sessions:
    """The mirror pods' control API, as run_shadow sees it: one pod with `pod`'s results."""

    opened: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, urls: list[str], session: str, pod: dict[str, Any]) -> None:
        self.pod = pod

    def open(self, body: dict[str, Any]) -> None:
        _Sessions.opened.append(dict(body))

    def counts(self) -> list[dict[str, Any]]:
        return [self.pod["counts"]]

    def results(self) -> list[dict[str, Any]]:
        return [self.pod]

    def close(self) -> None:
        pass


@dataclass
class _Runner:
    """What run_shadow uses of the runner; the sides are revisions of one deployment."""

    name: str = "qwen-bbbbbbbbbb"
    check: dict[str, Any] = field(default_factory=dict)
    namespace: str = "llm"
    finished: list[tuple[Judgement, dict[str, Any]]] = field(default_factory=list)

    def mark_running(self, total: int) -> bool:
        return True

    def resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]:
        common: dict[str, Any] = {
            "model": "tiny-qwen", "engine": "vllm", "engine_version": "0.32.0",
            "dtype": "bfloat16", "deployment": "qwen",
        }  # fmt: skip
        return (
            SideTarget(side="baseline", url="http://baseline", description="stable",
                       revision="aaaaaaaaaa", **common),
            SideTarget(side="candidate", url="http://candidate", description="canary",
                       revision="bbbbbbbbbb", **common),
        )  # fmt: skip

    def health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        pass

    def meta(self, target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
        return meta(fingerprints=dict(asked))

    def progress(self, done: int, total: int) -> None:
        pass

    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        service = {
            "metadata": {"name": name},
            "spec": {"ports": [{"name": "control", "port": 9000}]},
        }
        slices = [
            {
                "metadata": {"labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "control", "port": 9000}],
                "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}],
            }
        ]
        return service, slices

    def write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference:
        return ConfigMapKeyReference(name=f"{self.name}-report", key="result.json")

    def finish(
        self, verdict: Judgement, baseline: SideTarget, candidate: SideTarget,
        report: ConfigMapKeyReference, extra: Mapping[str, Any],
    ) -> None:  # fmt: skip
        self.finished.append((verdict, dict(extra)))


def _shadow_spec() -> ParityCheckSpec:
    return ParityCheckSpec.model_validate(
        {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
            "source": "shadow",
            "shadow": {"minRequests": COPIES},
            "profile": PROFILE.value,
            "thresholds": {"minLongPrompts": 0},
            "disabledChecks": ["maxLogPerplexityRatio"],
        }
    )


def test_a_shadow_check_runs_under_the_suites_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session gets the gate's thresholds (no hidden-state limit, the stated long-prompt
    minimum) and disabled checks; both sides' records carry the runner's sampling
    fingerprints; enough agreeing copies pass."""
    pod = _pod(COPIES)
    _Sessions.opened.clear()
    monkeypatch.setattr(
        shadow, "MirrorSessions", lambda urls, session: _Sessions(urls, session, pod)
    )
    runner, spec = _Runner(), _shadow_spec()
    shadow.run_shadow(runner, spec, sleep=lambda _: None)
    [body] = _Sessions.opened
    assert body["thresholds"]["min_long_prompts"] == 0
    assert all(v is None for k, v in body["thresholds"].items() if "hidden" in k)
    assert "maxLogPerplexityRatio" in body["disabled"]
    for side in ("baseline", "candidate"):
        assert body[side]["fingerprints"]["sampling.top_logprobs"] == spec.sampling.top_logprobs
    [(verdict, extra)] = runner.finished
    assert verdict.phase is CheckPhase.PASSED
    assert extra["shadow"]["scored"] == COPIES
