"""Verdict tables: constructed suites with known defects, and the verdict each must get."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infergate.parity.compare import compare_sources
from infergate.parity.metrics import ParityMetrics, ParityResult
from infergate.parity.profiles import PROFILES, resolve_thresholds, resolve_warnings
from infergate.parity.record import ParityRecord, PromptRecord, TopLogprobs
from infergate.parity.thresholds import ProfileName, RegressionTolerance, Thresholds
from infergate.parity.verdict import Verdict, VerdictStatus, check_regression, decide

from .builders import fork_pair, prompt, record, replace, suite, teacher_forced_on


def run(
    baseline: ParityRecord,
    candidate: ParityRecord,
    profile: ProfileName = ProfileName.BF16_KERNEL,
    explicit: Thresholds | None = None,
) -> tuple[ParityResult, Verdict]:
    result = compare_sources(
        baseline,
        candidate,
        resolve_thresholds(profile, explicit),
        PROFILES[profile].allowed_config_differences,
    )
    return result, decide(result, resolve_warnings(profile, explicit))


def _noisy(p: PromptRecord, scale: float, seed: int = 1) -> PromptRecord:
    assert p.hidden_states is not None
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(p.hidden_states.shape).astype(np.float32)
    norms = np.linalg.norm(p.hidden_states, axis=1, keepdims=True) / math.sqrt(
        p.hidden_states.shape[1]
    )
    return replace(p, hidden_states=p.hidden_states + scale * norms * noise)


def _with_nan(p: PromptRecord) -> PromptRecord:
    assert p.hidden_states is not None
    h = p.hidden_states.copy()
    h[3, 2] = np.nan
    return replace(p, hidden_states=h)


def _nan_logprob(p: PromptRecord) -> PromptRecord:
    logprobs = p.top_logprobs.logprobs.copy()
    logprobs[7, 0] = np.nan
    return replace(p, top_logprobs=TopLogprobs(p.top_logprobs.token_ids, logprobs))


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[ParityRecord, ParityRecord]]
    status: VerdictStatus
    reasons: list[str] = field(default_factory=list)
    profile: ProfileName = ProfileName.BF16_KERNEL
    explicit: dict[str, Any] | None = None


def _pair(
    candidate: Callable[[list[PromptRecord]], list[PromptRecord]], **meta: Any
) -> Callable[[], tuple[ParityRecord, ParityRecord]]:
    def build() -> tuple[ParityRecord, ParityRecord]:
        base = suite()
        return record(base), record(candidate(suite()), **meta)

    return build


def _forks(
    at: int, legitimate: bool, forking: int = 6
) -> Callable[[], tuple[ParityRecord, ParityRecord]]:
    """Six prompts, the first `forking` of which fork at output token `at`."""

    def build() -> tuple[ParityRecord, ParityRecord]:
        pairs = [fork_pair(p, at=at, legitimate=legitimate) for p in suite()]
        cand = [c if i < forking else b for i, (b, c) in enumerate(pairs)]
        return record([b for b, _ in pairs]), record(cand)

    return build


def _kl_shift(shift: float) -> Callable[[], tuple[ParityRecord, ParityRecord]]:
    def build() -> tuple[ParityRecord, ParityRecord]:
        base = suite()
        cand = [replace(p, teacher_forced=teacher_forced_on(p, shift=shift)) for p in base]
        return record(base), record(cand)

    return build


CASES = [
    Case("identical", _pair(lambda s: s), VerdictStatus.PASSED),
    Case("identical, strict", _pair(lambda s: s), VerdictStatus.PASSED, profile=ProfileName.STRICT),
    Case(
        "hidden noise of 1e-3 under bf16",
        _pair(lambda s: [_noisy(p, 1e-3) for p in s]),
        VerdictStatus.PASSED,
    ),
    Case(
        "hidden noise of 1e-3 under strict",
        _pair(lambda s: [_noisy(p, 1e-3) for p in s]),
        VerdictStatus.FAILED,
        ["maxHiddenMaxAbsErr", "maxHiddenRelL2P99", "minHiddenCosineP1"],
        profile=ProfileName.STRICT,
    ),
    Case(
        "hidden noise of 20%",
        _pair(lambda s: [_noisy(p, 0.2) if p.prompt_id == "p2" else p for p in s]),
        VerdictStatus.FAILED,
        ["maxHiddenRelL2P99: hidden relative L2 P99", "> 0.05", "worst prompts: p2 (relL2 P99"],
    ),
    Case(
        "NaN in candidate hidden states",
        _pair(lambda s: [_with_nan(p) if p.prompt_id == "p1" else p for p in s]),
        VerdictStatus.FAILED,
        ["hygiene NonFinite (candidate): NaN or Inf in hidden states in prompts p1"],
    ),
    Case(
        "NaN in candidate logprobs (fp16 overflow)",
        _pair(lambda s: [_nan_logprob(p) if p.prompt_id == "p5" else p for p in s]),
        VerdictStatus.FAILED,
        ["hygiene NonFinite (candidate): NaN or Inf in logprobs in prompts p5"],
    ),
    Case(
        "NaN in baseline hidden states",
        lambda: (record([_with_nan(p) for p in suite()]), record(suite())),
        VerdictStatus.ERROR,
        ["hygiene NonFinite (baseline)"],
    ),
    Case(
        "prompt token ids differ (chat template drift)",
        _pair(
            lambda s: [
                replace(p, prompt_token_ids=p.prompt_token_ids + 1) if p.prompt_id == "p0" else p
                for p in s
            ]
        ),
        VerdictStatus.FAILED,
        ["hygiene PromptTokensDiffer (both)", "p0"],
    ),
    Case(
        "layer-norm epsilon differs",
        _pair(
            lambda s: s,
            effective_config={"rms_norm_eps": 1e-5, "rope_theta": 1e6, "dtype": "bfloat16"},
        ),
        VerdictStatus.FAILED,
        ["hygiene ConfigDiffers", "rms_norm_eps: 1e-06 -> 1e-05"],
    ),
    Case(
        "dtype differs under the dtype-change profile",
        _pair(
            lambda s: s,
            dtype="float16",
            effective_config={"rms_norm_eps": 1e-6, "rope_theta": 1e6, "dtype": "float16"},
        ),
        VerdictStatus.PASSED,
        profile=ProfileName.DTYPE_CHANGE,
    ),
    Case(
        "candidate collapses to one token",
        _pair(
            lambda s: [
                replace(p, output_token_ids=np.zeros(24, np.int64)) if p.prompt_id == "p4" else p
                for p in s
            ]
        ),
        VerdictStatus.FAILED,
        ["hygiene Collapse (candidate)", "p4"],
    ),
    Case(
        "candidate misses a prompt",
        _pair(lambda s: s[:-1]),
        VerdictStatus.ERROR,
        ["prompt 'p5' is missing from the candidate record"],
    ),
    Case(
        "empty records",
        lambda: (record([]), record([])),
        VerdictStatus.ERROR,
        ["no prompts to compare"],
    ),
    Case(
        "different suites",
        _pair(lambda s: s, suite="other"),
        VerdictStatus.ERROR,
        ["suites differ: baseline ran 'smoke', candidate ran 'other'"],
    ),
    Case(
        "no hidden states under bf16 profile",
        lambda: (record(suite(hidden=None)), record(suite(hidden=None))),
        VerdictStatus.ERROR,
        ["maxHiddenRelL2P99: hidden relative L2 P99 was not measured"],
    ),
    Case(
        "no hidden states, hidden checks switched off",
        lambda: (record(suite(hidden=None)), record(suite(hidden=None))),
        VerdictStatus.PASSED,
        explicit={"maxHiddenRelL2P99": None, "minHiddenCosineP1": None},
    ),
    Case(
        "illegitimate forks at token 2",
        _forks(at=2, legitimate=False),
        VerdictStatus.FAILED,
        [
            "minFirstDivergenceP10: first divergence P10 2 < 16",
            "minLegitimateDivergenceRate",
            "not in baseline top-5",
        ],
    ),
    Case(
        "one legitimate fork at token 20",
        _forks(at=20, legitimate=True, forking=1),
        VerdictStatus.PASSED,
    ),
    Case(
        "one legitimate fork at token 20 under strict",
        _forks(at=20, legitimate=True, forking=1),
        VerdictStatus.FAILED,
        ["minTokenMatchRate: token match rate 0.833333 < 1", "worst prompts: p0 (forks at 20)"],
        profile=ProfileName.STRICT,
    ),
    Case(
        "one legitimate late fork, match rate required explicitly",
        _forks(at=20, legitimate=True, forking=1),
        VerdictStatus.FAILED,
        ["minTokenMatchRate"],
        explicit={"minTokenMatchRate": 0.9},
    ),
    Case("teacher-forced logprobs nearly equal", _kl_shift(-1e-4), VerdictStatus.PASSED),
    Case(
        "teacher-forced logprobs drift",
        _kl_shift(math.log(0.8)),
        VerdictStatus.FAILED,
        ["maxMeanKl: mean KL (nats)", "> 0.001"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdict_table(case: Case) -> None:
    baseline, candidate = case.build()
    explicit = Thresholds.model_validate(case.explicit) if case.explicit is not None else None
    _, verdict = run(baseline, candidate, case.profile, explicit)
    assert verdict.status == case.status, verdict.reasons
    text = "\n".join(verdict.reasons)
    for expected in case.reasons:
        assert expected in text
    if case.status == VerdictStatus.PASSED:
        assert verdict.reasons == []


def test_failed_reason_names_metric_value_threshold_and_prompt() -> None:
    base = suite()
    cand = [_noisy(p, 0.2) if p.prompt_id == "p3" else p for p in base]
    _, verdict = run(record(base), record(cand))
    check = next(c for c in verdict.checks if c.key == "maxHiddenRelL2P99")
    assert check.outcome == "fail"
    assert check.value is not None
    assert check.value > 0.05
    assert check.threshold == 0.05
    assert check.worst_prompts[0].startswith("p3 ")


def test_warn_thresholds_warn_without_failing() -> None:
    # KL between the bf16 warn (1e-4) and block (1e-3) limits.
    _, verdict = run(*_kl_shift(math.log(0.997))())
    assert verdict.status == VerdictStatus.PASSED
    assert any(w.startswith("maxMeanKl (warn)") for w in verdict.warnings)


def test_long_prompts_with_error_growing_past_8k() -> None:
    rng = np.random.default_rng(0)

    def long_pair(pid: str, tokens: int) -> tuple[PromptRecord, PromptRecord]:
        p = replace(
            prompt(pid, prompt_tokens=tokens, hidden=None),
            hidden_states=rng.standard_normal((tokens, 8)).astype(np.float32) + 1.0,
        )
        assert p.hidden_states is not None
        growth = np.where(np.arange(tokens) >= 8192, 0.2, 1e-4).astype(np.float32)[:, None]
        kl_shift = math.log(0.5) if tokens >= 8192 else math.log(0.999)
        cand = replace(
            p,
            hidden_states=p.hidden_states * (1 + growth),
            teacher_forced=teacher_forced_on(p, shift=kl_shift),
        )
        return p, cand

    pairs = [long_pair("short0", 200), long_pair("short1", 300), long_pair("long0", 9000)]
    result, verdict = run(record([b for b, _ in pairs]), record([c for _, c in pairs]))
    buckets = {b.name: b for b in result.metrics.buckets}
    assert buckets["0-1K"].rel_l2_mean == pytest.approx(1e-4, rel=1e-2)
    assert buckets["8K+"].rel_l2_mean == pytest.approx(0.2, rel=1e-2)
    assert buckets["8K+"].kl_steps == 24
    long = result.metrics.long_sequence
    assert long.prompts == 1
    assert long.diverged_prompts == ["long0"]
    assert long.kl_ratio is not None
    assert long.kl_ratio > 3
    assert verdict.status == VerdictStatus.FAILED
    text = "\n".join(verdict.reasons)
    assert "maxLongSeqDivergenceRate" in text
    assert "maxLongToShortKlRatio" in text
    assert "long0 (" in text


def test_long_sequence_checks_do_not_apply_without_long_prompts() -> None:
    _, verdict = run(record(suite()), record(suite()))
    outcomes = {c.key: c.outcome for c in verdict.checks}
    assert outcomes["maxLongSeqDivergenceRate"] == "skipped"
    assert outcomes["maxLongToShortKlRatio"] == "skipped"


def test_error_is_kept_apart_from_failed() -> None:
    # A missing prompt and a failing metric together: the check could not measure the suite.
    base = suite()
    cand = [_noisy(p, 0.3) for p in base[:-1]]
    _, verdict = run(record(base), record(cand))
    assert verdict.status == VerdictStatus.ERROR


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 40),
    st.integers(0, 10_000),
    st.sampled_from(list(ProfileName)),
)
def test_identical_records_score_perfectly_and_pass_every_profile(
    prompts: int, output_tokens: int, seed: int, profile: ProfileName
) -> None:
    records = [prompt(f"q{i}", output_tokens=output_tokens, seed=seed + i) for i in range(prompts)]
    forced = [replace(p, teacher_forced=teacher_forced_on(p)) for p in records]
    result, verdict = run(record(records), record(forced), profile)
    m = result.metrics
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    assert m.tokens.match_rate.value == 1.0
    assert m.tokens.agreement.value == 1.0
    assert m.tokens.first_divergence.diverged == 0
    assert m.logprobs is not None
    assert m.logprobs.mean_kl.value == 0.0
    assert m.logprobs.same_top_rate.value == 1.0
    assert m.hidden is not None
    assert m.hidden.max_abs_err == 0.0
    assert m.hidden.rel_l2_p99 == 0.0
    assert m.hidden.cosine_p1 == 1.0


def _metrics_with_forks(prompts: int, forks: int) -> ParityMetrics:
    pairs = [fork_pair(p, at=20) for p in suite(prompts)]
    base = [b for b, _ in pairs]
    cand = [c if i < forks else b for i, (b, c) in enumerate(pairs)]
    return run(record(base), record(cand))[0].metrics


def test_small_drop_in_match_rate_is_not_a_regression_within_the_wilson_bound() -> None:
    previous = _metrics_with_forks(40, 0)
    current = _metrics_with_forks(40, 1)
    found = check_regression(current, previous, RegressionTolerance())
    match = next(r for r in found if r.metric == "token match rate")
    assert match.current is not None
    assert match.previous is not None
    assert match.current < match.previous  # a bare point comparison would flag this
    assert not match.regressed
    assert match.bound is not None
    assert match.bound > 0


def test_large_drop_in_match_rate_is_a_regression() -> None:
    previous = _metrics_with_forks(40, 0)
    current = _metrics_with_forks(40, 20)
    found = check_regression(current, previous, RegressionTolerance())
    match = next(r for r in found if r.metric == "token match rate")
    assert match.regressed
    assert "fell from 1.0000 to 0.5000" in match.message


def test_allowed_drop_absorbs_a_regression() -> None:
    previous = _metrics_with_forks(40, 0)
    current = _metrics_with_forks(40, 20)
    tolerance = RegressionTolerance(max_token_match_rate_drop=0.9)
    found = check_regression(current, previous, tolerance)
    match = next(r for r in found if r.metric == "token match rate")
    assert not match.regressed


def test_regression_fails_the_verdict() -> None:
    previous = _metrics_with_forks(40, 0)
    pairs = [fork_pair(p, at=20) for p in suite(40)]
    base = [b for b, _ in pairs]
    cand = [c if i < 20 else b for i, (b, c) in enumerate(pairs)]
    result = compare_sources(
        record(base), record(cand), resolve_thresholds(ProfileName.BF16_KERNEL)
    )
    verdict = decide(result, previous=previous, tolerance=RegressionTolerance())
    assert verdict.status == VerdictStatus.FAILED
    assert any(r.startswith("regression: token match rate") for r in verdict.reasons)


def test_a_blocking_failure_is_not_repeated_as_a_warning() -> None:
    _, verdict = run(*_kl_shift(math.log(0.8))())
    assert any(r.startswith("maxMeanKl:") for r in verdict.reasons)
    assert not any(w.startswith("maxMeanKl") for w in verdict.warnings)


def test_long_to_short_kl_ratio_ignores_noise_far_below_the_kl_limit() -> None:
    # Identical configs still differ by rounding between prefill and decode kernels:
    # KL of ~3e-7 nats at 8K+ against 0 at 0-1K is no evidence of a long-context bug.
    def pair(pid: str, tokens: int, shift: float) -> tuple[PromptRecord, PromptRecord]:
        p = prompt(pid, prompt_tokens=tokens)
        return p, replace(p, teacher_forced=teacher_forced_on(p, shift=shift))

    def judged(long_shift: float) -> tuple[float, VerdictStatus, list[str]]:
        pairs = [pair("short0", 200, 0.0), pair("long0", 9000, long_shift)]
        result, verdict = run(record([b for b, _ in pairs]), record([c for _, c in pairs]))
        ratio = result.metrics.long_sequence.kl_ratio
        assert ratio is not None
        return ratio, verdict.status, verdict.reasons

    noise_ratio, noise_status, reasons = judged(math.log(1 - 1e-4))
    assert noise_ratio < 3
    assert noise_status == VerdictStatus.PASSED, reasons
    harm_ratio, harm_status, reasons = judged(math.log(0.9))
    assert harm_ratio > 3
    assert harm_status == VerdictStatus.FAILED
    assert any("maxLongToShortKlRatio" in reason for reason in reasons)
