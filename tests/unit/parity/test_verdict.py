"""Verdict tables: constructed suites with known defects, and the verdict each must get.

Suites here meet the bf16 profiles' minimum evidence (32 short prompts scored along their
sequence, 4 long prompts of 8K+ tokens) unless a test is about evidence itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pytest

from infergate.parity.compare import compare_sources
from infergate.parity.fingerprints import FingerprintExpectation
from infergate.parity.long_prompts import ratio_floor
from infergate.parity.metrics import ParityMetrics, ParityResult, Rate
from infergate.parity.profiles import ProfileChoiceError, plan_gate, suggest_profile
from infergate.parity.record import ParityRecord, PromptRecord, TopLogprobs
from infergate.parity.regression import (
    check_regression,
    rate_change_upper,
    regression_comparable,
)
from infergate.parity.thresholds import ProfileName, RegressionTolerance, Thresholds
from infergate.parity.verdict import Verdict, VerdictStatus, decide

from .builders import (
    RUN,
    SIDE_FINGERPRINTS,
    candidate_of,
    fork_pair,
    meta,
    prompt,
    replace,
    scored,
    scored_record,
    scored_suite,
    scores_along,
)

BF16_PROFILES = (ProfileName.BF16_KERNEL, ProfileName.DTYPE_CHANGE, ProfileName.GPU_TO_ASCEND_BF16)


@cache
def _suite(output_tokens: int = 24) -> tuple[PromptRecord, ...]:
    return tuple(scored_suite(output_tokens=output_tokens))


def suite(output_tokens: int = 24) -> list[PromptRecord]:
    return list(_suite(output_tokens))


def run(
    baseline: ParityRecord,
    candidate: ParityRecord,
    profile: ProfileName = ProfileName.BF16_KERNEL,
    explicit: dict[str, Any] | None = None,
    *,
    hidden_states: bool = True,
    previous: ParityMetrics | None = None,
) -> tuple[ParityResult, Verdict]:
    thresholds = Thresholds.model_validate(explicit) if explicit is not None else None
    gate = plan_gate(
        baseline.meta, candidate.meta, profile=profile, explicit=thresholds,
        hidden_states=hidden_states,
    )  # fmt: skip
    result = compare_sources(
        baseline, candidate, gate.thresholds, gate.expected_differences, disabled=gate.disabled
    )
    return result, decide(result, gate.warn, previous, RegressionTolerance())


def pair(
    change: Callable[[PromptRecord], PromptRecord] = candidate_of,
    *,
    output_tokens: int = 24,
    **candidate_meta: Any,
) -> tuple[ParityRecord, ParityRecord]:
    base = suite(output_tokens)
    return scored_record(base), scored_record([change(p) for p in base], **candidate_meta)


def _hidden(p: PromptRecord, fn: Callable[[np.ndarray], np.ndarray]) -> PromptRecord:  # type: ignore[type-arg]
    assert p.hidden_states is not None
    return replace(candidate_of(p), hidden_states=fn(p.hidden_states).astype(np.float32))


def _noisy(p: PromptRecord, relative: float) -> PromptRecord:
    """Relative random noise per element, as a precision change gives it."""
    rng = np.random.default_rng(abs(hash(p.prompt_id)) % 2**32)

    def add(h: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return h * (1.0 + relative * rng.standard_normal(h.shape))

    return _hidden(p, add)


def _scaled(p: PromptRecord, factor: float) -> PromptRecord:
    return _hidden(p, lambda h: h * np.float32(factor))


def _kl_shift(shift: float) -> Callable[[PromptRecord], PromptRecord]:
    return lambda p: candidate_of(p, shift=shift)


def _with_nan_hidden(p: PromptRecord) -> PromptRecord:
    def poison(h: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        out = h.copy()
        out[3, 2] = np.nan
        return out

    return _hidden(p, poison) if p.prompt_id == "p1" else candidate_of(p)


def _nan_logprob(p: PromptRecord) -> PromptRecord:
    if p.prompt_id != "p5":
        return candidate_of(p)
    forced = scores_along(p)
    lps = forced.top.logprobs.copy()
    lps[7, 0] = np.nan
    return replace(
        p,
        teacher_forced=type(forced)(
            forced.token_ids, forced.target_logprobs, TopLogprobs(forced.top.token_ids, lps), 1
        ),
    )


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[ParityRecord, ParityRecord]]
    status: VerdictStatus
    reasons: list[str] = field(default_factory=list)
    profile: ProfileName = ProfileName.BF16_KERNEL
    explicit: dict[str, Any] | None = None


CASES = [
    Case("identical", pair, VerdictStatus.PASSED),
    Case(
        "bf16-sized noise: hidden 6e-3 relative, KL 1e-5",
        lambda: pair(lambda p: replace(_noisy(p, 6e-3), teacher_forced=scores_along(p, -6e-4))),
        VerdictStatus.PASSED,
    ),
    Case(
        "final norm scaled by 1.02 (cosine cannot see it)",
        lambda: pair(lambda p: _scaled(p, 1.02)),
        VerdictStatus.FAILED,
        ["maxHiddenNormLogRatio: hidden |log norm ratio| 0.0198"],
    ),
    Case(
        "hidden noise of 20% on one prompt",
        lambda: pair(lambda p: _noisy(p, 0.2) if p.prompt_id == "p2" else candidate_of(p)),
        VerdictStatus.FAILED,
        ["minHiddenCosine: hidden cosine min", "worst prompts: p2"],
    ),
    Case(
        "NaN in candidate hidden states",
        lambda: pair(_with_nan_hidden),
        VerdictStatus.FAILED,
        ["hygiene NonFinite (candidate): NaN or Inf in hidden states in prompts p1"],
    ),
    Case(
        "NaN in candidate scores (fp16 overflow)",
        lambda: pair(_nan_logprob),
        VerdictStatus.FAILED,
        ["hygiene NonFinite (candidate): NaN or Inf in logprobs in prompts p5"],
    ),
    Case(
        "NaN in every candidate score and hidden state (fp16 overflow everywhere)",
        lambda: pair(_all_nan),
        VerdictStatus.FAILED,
        ["hygiene NonFinite (candidate): NaN or Inf in logprobs", "was not measured"],
    ),
    Case(
        "prompt token ids differ (a tokenizer that starts prepending BOS)",
        lambda: pair(
            lambda p: (
                replace(candidate_of(p), prompt_token_ids=np.concatenate([[1], p.prompt_token_ids]))
                if p.prompt_id == "p0"
                else candidate_of(p)
            )
        ),
        VerdictStatus.FAILED,
        ["hygiene PromptTokensDiffer (both)", "first at position 0", "p0"],
    ),
    Case(
        "teacher-forced logprobs drift",
        lambda: pair(_kl_shift(math.log(0.8))),
        VerdictStatus.FAILED,
        ["maxMeanKl: mean KL (nats)", "> 0.0001", "maxLogPerplexityRatio"],
    ),
    Case(
        "a rope error: hidden and KL grow past 8K on the long prompts only",
        lambda: pair(_rope_error),
        VerdictStatus.FAILED,
        ["maxLongToShortHiddenRatio", "maxLongToShortKlRatio"],
    ),
    Case(
        "KL grows 9x from 0-1K to 8K+ but stays inside maxMeanKl (benign: every change grows so "
        "on the fixture)",
        lambda: pair(_long_growth(0.9995, 0.9985)),
        VerdictStatus.PASSED,
    ),
    Case(
        "KL 20x maxMeanKl past 8K only, while the mean over all positions passes",
        lambda: pair(_long_growth(0.999, 0.99)),
        VerdictStatus.FAILED,
        ["maxLongToShortKlRatio"],
    ),
    Case(
        "identical, strict",
        pair,
        VerdictStatus.PASSED,
        profile=ProfileName.STRICT,
    ),
    Case(
        "hidden noise of 1e-3 under strict",
        lambda: pair(lambda p: _noisy(p, 1e-3)),
        VerdictStatus.FAILED,
        ["maxHiddenMaxAbsErr", "maxHiddenRelL2P99", "minHiddenCosineP1", "as observed"],
        profile=ProfileName.STRICT,
    ),
    Case(
        "candidate misses a prompt",
        lambda: (scored_record(suite()), scored_record(suite()[1:])),
        VerdictStatus.ERROR,
        ["prompt 'p0' is missing from the candidate record"],
    ),
    Case(
        "the two sides ran different suites",
        lambda: pair(fingerprints={"suite.digest": "suite-1"}),
        VerdictStatus.ERROR,
        ["did not run the same check: suite.digest"],
    ),
]


def _rope_error(p: PromptRecord) -> PromptRecord:
    if not p.prompt_id.startswith("long"):
        return candidate_of(p)
    assert p.hidden_states is not None
    n = p.prompt_token_ids.shape[0] + p.output_token_ids.shape[0]
    growth = np.where(np.arange(p.hidden_states.shape[0]) >= 8192, 0.05, 1e-4)[:, None]
    rng = np.random.default_rng(7)
    states = p.hidden_states * (1.0 + growth * rng.standard_normal(p.hidden_states.shape))
    forced = scores_along(p)
    lps = forced.top.logprobs.copy()
    far = np.arange(1, n) >= 8192
    lps[far, 0] += math.log(0.9)
    target = lps[:, 0].copy()
    rebuilt = type(forced)(
        forced.token_ids, target, TopLogprobs(forced.top.token_ids, lps), forced.start
    )
    return replace(p, teacher_forced=rebuilt, hidden_states=states.astype(np.float32))


def _all_nan(p: PromptRecord) -> PromptRecord:
    forced = scores_along(p)
    nan = np.full_like(forced.top.logprobs, np.nan)
    assert p.hidden_states is not None
    return replace(
        p,
        teacher_forced=type(forced)(
            forced.token_ids, nan[:, 0].copy(), TopLogprobs(forced.top.token_ids, nan), 1
        ),
        hidden_states=np.full_like(p.hidden_states, np.nan),
    )


def _long_growth(near: float, far: float) -> Callable[[PromptRecord], PromptRecord]:
    """Long prompts' top logprob scaled by `near` before position 8192 and `far` after."""

    def build(p: PromptRecord) -> PromptRecord:
        if not p.prompt_id.startswith("long"):
            return candidate_of(p)
        n = p.prompt_token_ids.shape[0] + p.output_token_ids.shape[0]
        forced = scores_along(p)
        lps = forced.top.logprobs.copy()
        lps[:, 0] += np.where(np.arange(1, n) >= 8192, math.log(far), math.log(near))
        rebuilt = type(forced)(
            forced.token_ids, lps[:, 0].copy(), TopLogprobs(forced.top.token_ids, lps), forced.start
        )
        return replace(p, teacher_forced=rebuilt)

    return build


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdict_table(case: Case) -> None:
    baseline, candidate = case.build()
    _, verdict = run(baseline, candidate, case.profile, case.explicit)
    assert verdict.status == case.status, verdict.reasons
    text = "\n".join(verdict.reasons)
    for expected in case.reasons:
        assert expected in text
    if case.status == VerdictStatus.PASSED:
        assert verdict.reasons == []


@pytest.mark.parametrize("profile", BF16_PROFILES)
def test_a_two_percent_final_norm_scale_fails_every_bf16_profile(profile: ProfileName) -> None:
    result, verdict = run(*pair(lambda p: _scaled(p, 1.02)), profile)
    assert verdict.status == VerdictStatus.FAILED
    outcomes = {c.key: c.outcome for c in verdict.checks}
    assert outcomes["maxHiddenNormLogRatio"] == "fail"
    # What cosine and relative L2 say about it: nothing wrong.
    assert outcomes["minHiddenCosineP1"] == "pass"
    assert outcomes["maxHiddenRelL2P99"] == "pass"
    ratio = result.metrics.estimates["hiddenNormLogRatio"]
    assert ratio.value == pytest.approx(math.log(1.02), rel=1e-4)


@pytest.mark.parametrize("profile", list(ProfileName))
def test_identical_records_pass_every_profile(profile: ProfileName) -> None:
    # 64 generated tokens: the fp32 profile judges forks within 64 tokens.
    result, verdict = run(*pair(output_tokens=64), profile)
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    m = result.metrics
    assert m.tokens.match_rate.value == 1.0
    assert m.logprobs is not None
    assert m.logprobs.mean_kl.value == 0.0
    assert m.hidden is not None
    assert m.hidden.cosine_p1 == 1.0


@pytest.mark.parametrize("profile", list(ProfileName))
def test_identical_records_are_inconclusive_only_below_the_minimum_evidence(
    profile: ProfileName,
) -> None:
    base = suite()[:12]
    _, verdict = run(scored_record(base), scored_record([candidate_of(p) for p in base]), profile)
    assert verdict.status == VerdictStatus.INCONCLUSIVE
    assert verdict.reasons[0].startswith("not enough evidence: 12 of 32 prompts needed")
    assert not any(c.outcome == "fail" for c in verdict.checks)


def test_a_suite_without_long_prompts_is_not_a_pass_of_the_long_checks() -> None:
    base = [p for p in suite() if not p.prompt_id.startswith("long")]
    records = scored_record(base), scored_record([candidate_of(p) for p in base])
    _, verdict = run(*records)
    assert verdict.status == VerdictStatus.INCONCLUSIVE
    assert "0 of 4 long prompts (of 8192+ tokens)" in verdict.reasons[0]
    # A profile that states it needs no long evidence says the checks were not part of it.
    _, strict = run(*records, ProfileName.STRICT)
    assert strict.status == VerdictStatus.PASSED
    assert any("minLongPrompts 0" in e for e in strict.excluded)


def test_a_straddling_interval_is_inconclusive_and_names_the_metric() -> None:
    # Half the short prompts drift a little, the rest agree: the mean KL has a wide interval.
    def half(p: PromptRecord) -> PromptRecord:
        odd = p.prompt_id[1:].isdigit() and int(p.prompt_id[1:]) % 2 == 1
        return candidate_of(p, shift=-2e-3 if odd else 0.0)

    records = pair(half)
    kl = run(*records)[0].metrics.estimates["meanKl"]
    assert kl.value is not None
    assert kl.lower is not None
    assert kl.upper is not None
    assert kl.lower < kl.value < kl.upper
    # A limit at the point estimate: neither bound decides it.
    _, verdict = run(*records, explicit={"maxMeanKl": kl.value})
    assert verdict.status == VerdictStatus.INCONCLUSIVE, verdict.reasons
    assert any(r.startswith("maxMeanKl: mean KL (nats)") and "straddles" in r
               for r in verdict.reasons)  # fmt: skip
    check = next(c for c in verdict.checks if c.key == "maxMeanKl")
    assert check.outcome == "inconclusive"


def test_disabled_hidden_states_take_their_thresholds_with_them() -> None:
    base = [replace(p, hidden_states=None) for p in suite()]
    records = scored_record(base), scored_record([candidate_of(p) for p in base])
    _, verdict = run(*records, hidden_states=False)
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    disabled = [c for c in verdict.checks if c.outcome == "disabled"]
    assert {c.key for c in disabled} >= {"maxHiddenRelL2P99", "minHiddenCosineP1"}
    assert any("hiddenStates.enabled: false" in e for e in verdict.excluded)
    # Without saying so, missing hidden states cannot be measured: Error, never Passed.
    _, error = run(*records)
    assert error.status == VerdictStatus.ERROR


def test_switched_off_checks_are_listed_as_not_part_of_the_verdict() -> None:
    _, verdict = run(*pair(), explicit={"maxKlP99": None})
    assert verdict.status == VerdictStatus.PASSED
    assert any(e.startswith("maxKlP99") for e in verdict.excluded)


def test_a_censored_p10_does_not_pass_by_itself() -> None:
    # 24 tokens generated, the fp32 profile asks about forks within 64: nothing observed.
    _, verdict = run(*pair(), ProfileName.FP32_CROSS_FRAMEWORK)
    check = next(c for c in verdict.checks if c.key == "minFirstDivergenceP10")
    assert check.outcome == "inconclusive"
    assert "raise maxTokens" in check.message


def test_legitimate_near_tie_forks_do_not_fail_p10() -> None:
    base = suite()
    forks = {f"p{i}": fork_pair(base[i], at=5) for i in range(2)}

    def change(p: PromptRecord) -> PromptRecord:
        if p.prompt_id in forks:
            return replace(forks[p.prompt_id][1], teacher_forced=scores_along(p))
        return candidate_of(p)

    baseline = [replace(forks[p.prompt_id][0], teacher_forced=p.teacher_forced)
                if p.prompt_id in forks else p for p in base]  # fmt: skip
    _, verdict = run(scored_record(baseline), scored_record([change(p) for p in base]))
    outcomes = {c.key: c.outcome for c in verdict.checks}
    assert outcomes["minFirstDivergenceP10"] == "pass"
    assert outcomes["maxIllegitimateDivergenceRate"] == "pass"
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons


def test_illegitimate_early_forks_fail() -> None:
    base = suite()
    forks = {f"p{i}": fork_pair(base[i], at=2, legitimate=False) for i in range(10)}

    def change(p: PromptRecord) -> PromptRecord:
        if p.prompt_id in forks:
            return replace(forks[p.prompt_id][1], teacher_forced=scores_along(p))
        return candidate_of(p)

    baseline = [replace(forks[p.prompt_id][0], teacher_forced=p.teacher_forced)
                if p.prompt_id in forks else p for p in base]  # fmt: skip
    _, verdict = run(scored_record(baseline), scored_record([change(p) for p in base]))
    assert verdict.status == VerdictStatus.FAILED
    text = "\n".join(verdict.reasons)
    assert "minFirstDivergenceP10" in text
    assert "maxIllegitimateDivergenceRate" in text
    assert "not in baseline top-5" in text


def test_fingerprint_difference_fails_naming_the_key_and_both_values() -> None:
    base = suite()
    tokenizer = {"tokenizer.add_bos_token": False, "model_config.rms_norm_eps": 1e-6}
    _, verdict = run(
        scored_record(base, fingerprints=tokenizer),
        scored_record(
            [candidate_of(p) for p in base],
            fingerprints={"tokenizer.add_bos_token": True, "model_config.rms_norm_eps": 1e-6},
        ),
    )
    assert verdict.status == VerdictStatus.FAILED
    assert any(
        "FingerprintDiffers" in r
        and "tokenizer.add_bos_token: false (baseline) / true (candidate)" in r
        for r in verdict.reasons
    )


def test_a_fingerprint_on_one_side_only_fails() -> None:
    base = suite()
    _, verdict = run(
        scored_record(base, fingerprints={"generation_config.eos_token_id": [2]}),
        scored_record([candidate_of(p) for p in base]),
    )
    assert verdict.status == VerdictStatus.FAILED
    assert any("generation_config.eos_token_id" in r and "absent on the candidate" in r
               for r in verdict.reasons)  # fmt: skip


def test_expected_fingerprint_differences_pass_under_their_profile() -> None:
    base = suite()
    _, verdict = run(
        scored_record(base, fingerprints={"versions.engine": "vllm 0.32.0"}),
        scored_record(
            [candidate_of(p) for p in base], fingerprints={"versions.engine": "vllm 0.33.0"}
        ),
    )
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    _, strict = run(
        scored_record(base, fingerprints={"versions.engine": "vllm 0.32.0"}),
        scored_record(
            [candidate_of(p) for p in base], fingerprints={"versions.engine": "vllm 0.33.0"}
        ),
        ProfileName.STRICT,
    )
    assert strict.status == VerdictStatus.FAILED


REPORTED = {**SIDE_FINGERPRINTS, **RUN}
SILENT = dict(RUN)  # the runner's own keys only: the side reported nothing of itself
REQUIRED, NOT_EXPECTED = FingerprintExpectation.REQUIRED, FingerprintExpectation.NOT_EXPECTED


@pytest.mark.parametrize(
    ("baseline", "candidate", "expectation", "status"),
    [
        (REPORTED, REPORTED, REQUIRED, VerdictStatus.PASSED),
        (REPORTED, REPORTED, NOT_EXPECTED, VerdictStatus.PASSED),
        # Two plain vLLM endpoints: nothing says they ran the same weights or tokenizer.
        (SILENT, SILENT, REQUIRED, VerdictStatus.INCONCLUSIVE),
        (SILENT, SILENT, NOT_EXPECTED, VerdictStatus.PASSED),
        # A side that stops reporting: what the other reports is missing (a change), and
        # the silent side is unverified; the failure outranks.
        (REPORTED, SILENT, REQUIRED, VerdictStatus.FAILED),
        (SILENT, REPORTED, REQUIRED, VerdictStatus.FAILED),
        # Not expected: the side that cannot report is compared without them.
        (REPORTED, SILENT, NOT_EXPECTED, VerdictStatus.PASSED),
    ],
)
def test_a_side_without_fingerprints_is_inconclusive_unless_they_are_not_expected(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    expectation: FingerprintExpectation,
    status: VerdictStatus,
) -> None:
    base = suite()
    result = compare_sources(
        ParityRecord(meta(fingerprints=baseline), base),
        ParityRecord(meta(fingerprints=candidate), [candidate_of(p) for p in base]),
        _thresholds(),
        fingerprints=expectation,
    )
    verdict = decide(result)
    assert verdict.status == status, verdict.reasons
    if status is VerdictStatus.INCONCLUSIVE:
        assert any(
            "baseline and candidate report none" in r and "spec.fingerprints: NotExpected" in r
            for r in verdict.reasons
        ), verdict.reasons
    if SILENT in (baseline, candidate) and expectation is NOT_EXPECTED:
        assert any("no fingerprints (spec.fingerprints: NotExpected)" in n for n in result.notes)


def test_the_run_settings_are_compared_even_when_fingerprints_are_not_expected() -> None:
    base = suite()
    result = compare_sources(
        ParityRecord(meta(fingerprints=SILENT), base),
        ParityRecord(
            meta(fingerprints={**SILENT, "sampling.max_tokens": 8}),
            [candidate_of(p) for p in base],
        ),
        _thresholds(),
        fingerprints=NOT_EXPECTED,
    )
    assert decide(result).status == VerdictStatus.ERROR
    assert any("sampling.max_tokens" in e for e in result.errors)


def test_an_unknown_dtype_gets_no_profile_by_guess() -> None:
    with pytest.raises(ProfileChoiceError, match=r"set spec\.profile"):
        suggest_profile(meta(dtype="unknown"), meta())


def test_hidden_limits_scale_with_the_model_depth() -> None:
    deep = {"model_config.num_hidden_layers": 28}
    gate = plan_gate(
        meta(fingerprints=deep), meta(fingerprints=deep), profile=ProfileName.BF16_KERNEL
    )
    shallow = plan_gate(meta(), meta(), profile=ProfileName.BF16_KERNEL)
    assert gate.layers == 28
    assert shallow.thresholds.max_hidden_rel_l2_p99 == 3e-2
    assert gate.thresholds.max_hidden_rel_l2_p99 == pytest.approx(3e-2 * math.sqrt(14))
    assert gate.thresholds.min_hidden_cosine_p1 == pytest.approx(1 - 5e-4 * 14)
    # The measured bf16-vs-fp32 error at 28 layers (0.066 mean) stays within the scaled limit.
    assert gate.thresholds.max_hidden_rel_l2_p99 > 0.066


# -- regression ----------------------------------------------------------------------------


def _metrics(
    change: Callable[[PromptRecord], PromptRecord] = candidate_of, **meta: Any
) -> ParityMetrics:
    return run(*pair(change, **meta))[0].metrics


def test_a_benign_change_after_a_bit_identical_check_is_not_a_regression() -> None:
    previous = _metrics()  # KL 0 with a standard error of exactly 0
    result, verdict = run(*pair(_kl_shift(-6e-4)), previous=previous)
    assert result.metrics.logprobs is not None
    assert result.metrics.logprobs.mean_kl.value is not None
    assert result.metrics.logprobs.mean_kl.value > 0
    assert verdict.regressions
    assert not any(r.regressed for r in verdict.regressions)
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons


def test_a_zero_standard_error_stays_zero_so_a_metric_can_regress() -> None:
    previous = _metrics()
    current = _metrics(_kl_shift(math.log(0.99)))
    found = check_regression(current, previous, RegressionTolerance(max_mean_kl_increase=1e-6))
    kl = next(r for r in found if r.metric == "mean KL")
    assert kl.bound is not None
    assert kl.regressed


def test_regression_compares_only_the_same_suite_and_sampling() -> None:
    previous = _metrics()
    assert regression_comparable(_metrics(_kl_shift(-6e-4)), previous) is None
    other_suite = run(
        scored_record(suite(), fingerprints={"suite.digest": "suite-9"}),
        scored_record([candidate_of(p) for p in suite()], fingerprints={"suite.digest": "suite-9"}),
    )[0].metrics
    why = regression_comparable(other_suite, previous)
    assert why is not None
    assert "suite.digest" in why
    _, verdict = run(*pair(), previous=other_suite)
    assert verdict.regressions == []
    assert any("no regression test" in e for e in verdict.excluded)


def test_large_drop_in_same_top_rate_is_a_regression() -> None:
    previous = _metrics()
    current = _metrics(_kl_shift(-5.0))  # the best token changes at every position
    found = check_regression(current, previous, RegressionTolerance(), _thresholds())
    same = next(r for r in found if r.metric == "same-top-token rate")
    assert same.regressed


def test_a_step_rate_change_is_judged_on_prompt_means_not_the_pooled_share() -> None:
    # Nine short prompts and one long one carrying most steps; the long one loses 10 points.
    totals = [60] * 9 + [1000]
    previous = Rate.over_steps(totals, totals)
    current = Rate.over_steps([60] * 9 + [900], totals)
    assert current.value == pytest.approx(1440 / 1540)  # the pooled share fell 6.5 points
    assert current.prompt_mean == pytest.approx(0.99)  # one prompt of ten fell 10 points
    high = rate_change_upper(current, previous, 0.95)
    assert high is not None
    # t (9 df) x the error of ten prompt rates above the 1-point fall of their mean.
    assert high == pytest.approx(-0.01 + 1.833 * 0.01, abs=1e-3)
    # An allowance of 2 points: the pooled share's 6.5-point fall alone would have regressed.
    assert high > -0.02


def test_a_step_rate_recorded_without_its_prompt_mean_is_not_judged() -> None:
    previous = _metrics()
    current = _metrics(_kl_shift(-5.0))
    assert previous.logprobs is not None
    old_rate = previous.logprobs.same_top_rate.model_copy(update={"prompt_mean": None})
    old = previous.model_copy(
        update={"logprobs": previous.logprobs.model_copy(update={"same_top_rate": old_rate})}
    )
    found = check_regression(current, old, RegressionTolerance(), _thresholds())
    same = next(r for r in found if r.metric == "same-top-token rate")
    assert same.bound is None
    assert not same.regressed
    assert "not judged" in same.message


def _thresholds() -> Thresholds:
    return plan_gate(meta(), meta(), profile=ProfileName.BF16_KERNEL).thresholds


def test_failed_reason_names_metric_value_bounds_and_prompt() -> None:
    _, verdict = run(*pair(lambda p: _noisy(p, 0.2) if p.prompt_id == "p3" else candidate_of(p)))
    check = next(c for c in verdict.checks if c.key == "minHiddenCosine")
    assert check.outcome == "fail"
    assert check.value is not None
    assert check.threshold == 0.99
    assert check.worst_prompts[0].startswith("p3 ")


def test_warn_thresholds_warn_without_failing() -> None:
    _, verdict = run(*pair(_kl_shift(-1.5e-3)))  # KL 5.7e-5: past 3e-5, under 1e-4
    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    assert any(w.startswith("maxMeanKl (warn)") for w in verdict.warnings)


def test_error_is_kept_apart_from_failed() -> None:
    base = suite()
    cand = [_noisy(p, 0.3) for p in base[:-1]]
    _, verdict = run(scored_record(base), scored_record(cand))
    assert verdict.status == VerdictStatus.ERROR


def test_legacy_records_without_prompt_scores_cannot_judge_long_context() -> None:
    base = [prompt(f"q{i}", seed=i) for i in range(4)] + [
        prompt("long0", prompt_tokens=8300, hidden=None)
    ]
    forced = [replace(p, teacher_forced=scored(p).teacher_forced) for p in base]
    legacy = [replace(p, teacher_forced=None) for p in base]
    _, verdict = run(
        scored_record(legacy), scored_record(forced), hidden_states=False,
        explicit={"minPrompts": 1, "minLongPrompts": 1, "minScoredSteps": 1},
    )  # fmt: skip
    check = next(c for c in verdict.checks if c.key == "maxLongToShortKlRatio")
    assert check.outcome in ("unmeasured", "inconclusive")
    assert verdict.status != VerdictStatus.PASSED


@pytest.mark.parametrize(
    ("near", "far", "fails"),
    [(0.0, 1e-4, False), (0.0, 1.01e-4, True), (1e-5, 1.3e-4, False), (1e-5, 1.31e-4, True)],
)
def test_the_long_ratio_fails_exactly_past_limit_times_near_plus_the_allowance(
    near: float, far: float, fails: bool
) -> None:
    # bf16 profiles: maxMeanKl 1e-4, ratio limit 3 -> fails when far > 3 * near + 1e-4.
    f = ratio_floor(1e-4, 3.0, 1e-9)
    assert ((far + f) / (near + f) > 3.0) is fails
