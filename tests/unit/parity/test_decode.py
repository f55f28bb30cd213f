"""Decode-path evidence: the generated tokens' own logprobs before the first fork."""

from __future__ import annotations

import numpy as np
import pytest

from infergate.parity.checks import evaluate_checks
from infergate.parity.compare import compare_sources
from infergate.parity.decode import decode_evidence
from infergate.parity.record import PromptRecord, TopLogprobs
from infergate.parity.verdict import decide
from infergate.report.page import render_report

from .builders import candidate_of, prompt, replace, scored, scored_record, scored_suite


def _decode_shift(p: PromptRecord, shift: float, from_step: int = 0) -> PromptRecord:
    """The same tokens, the generation top-k logprobs moved by `shift` from `from_step`
    (its decode path drifted; its prefill scoring unchanged)."""
    lps = p.top_logprobs.logprobs.copy()
    lps[from_step:, :] += shift
    return replace(p, top_logprobs=TopLogprobs(p.top_logprobs.token_ids, lps))


@pytest.mark.parametrize(
    ("candidate", "fork", "cross", "candidate_self"),
    [
        # Decode agrees with the baseline's and with its own prefill.
        (candidate_of, None, 0.0, 0.0),
        # The candidate's decode path is off by 0.02 nat (its prefill is not): both show it.
        (lambda p: _decode_shift(candidate_of(p), 0.02), None, 0.02, 0.02),
        # Off only from step 10, after a fork at step 5: nothing past the fork is compared.
        (lambda p: _decode_shift(candidate_of(p), 0.5, from_step=10), 5, 0.0, 0.0),
        # Off from step 3, fork at 5: steps 3 and 4 show it.
        (lambda p: _decode_shift(candidate_of(p), 0.5, from_step=3), 5, 0.5, 0.5),
    ],
)
def test_decode_differences_before_the_first_fork(
    candidate: object, fork: int | None, cross: float, candidate_self: float
) -> None:
    base = scored(prompt("p0", output_tokens=24))
    other = candidate(base)  # type: ignore[operator]
    found = decode_evidence(base, other, fork)
    assert found.cross.shape[0] == (24 if fork is None else fork)
    assert np.nanmax(np.abs(found.cross)) == pytest.approx(cross, abs=1e-9)
    assert np.nanmax(np.abs(found.candidate_self)) == pytest.approx(candidate_self, abs=1e-9)
    assert np.nanmax(np.abs(found.baseline_self)) == pytest.approx(0.0, abs=1e-9)


def test_a_token_outside_the_top_k_is_not_measured() -> None:
    base = scored(prompt("p0", output_tokens=4))
    lps = base.top_logprobs
    other_ids = lps.token_ids.copy()
    other_ids[2, :] = (other_ids[2, :] + 7) % 1000 + 2000  # the chosen token is not listed
    other = replace(candidate_of(base), top_logprobs=TopLogprobs(other_ids, lps.logprobs))
    found = decode_evidence(base, other, None)
    assert np.isnan(found.cross[2])
    assert np.isfinite(np.delete(found.cross, 2)).all()


def test_the_suite_reports_decode_evidence() -> None:
    prompts = scored_suite()
    baseline = scored_record(prompts)
    same = compare_sources(baseline, scored_record([candidate_of(p) for p in prompts]),
                           _thresholds())  # fmt: skip
    drift = compare_sources(
        baseline,
        scored_record([_decode_shift(candidate_of(p), 0.05) for p in prompts]),
        _thresholds(),
    )
    assert same.metrics.decode is not None
    assert drift.metrics.decode is not None
    assert same.metrics.decode.cross_max_abs == pytest.approx(0.0, abs=1e-12)
    estimate = drift.metrics.decode.cross_mean_abs
    assert estimate is not None
    assert estimate.value == pytest.approx(0.05)
    assert drift.metrics.decode.candidate_self_max_abs == pytest.approx(0.05)
    assert drift.metrics.decode.prompts == len(prompts)
    assert "decode path before the first fork" in render_report(drift, decide(drift))


LIMIT = 0.01
"""The decode limits of the table below (nats); the profiles' own come from measurement."""


def _no_decode_top_k(p: PromptRecord) -> PromptRecord:
    """The candidate returned no generation top-k: no decode step can be compared."""
    empty = TopLogprobs(np.zeros((p.output_token_ids.shape[0], 0), np.int64),
                        np.zeros((p.output_token_ids.shape[0], 0)))  # fmt: skip
    return replace(candidate_of(p), top_logprobs=empty)


def _spread(p: PromptRecord) -> PromptRecord:
    """Decode off by 0 or 2x the limit, alternating by prompt: the bounds straddle it."""
    index = int(p.prompt_id.removeprefix("p").removeprefix("long"))
    return _decode_shift(candidate_of(p), 2 * LIMIT if index % 2 else 0.0)


@pytest.mark.parametrize(
    ("candidate", "required", "self_outcome", "excess_outcome"),
    [
        # The same decode and prefill paths: both pass.
        (candidate_of, True, "pass", "pass"),
        # Decode alone moved 5x the limit (a KV cache in another dtype): both fail.
        (lambda p: _decode_shift(candidate_of(p), 5 * LIMIT), True, "fail", "fail"),
        # Decode and prefill moved alike (another kernel or dtype, judged by the prefill
        # metrics): decode is as far from the baseline as prefill, and from its own prefill
        # not at all.
        (lambda p: _decode_shift(candidate_of(p, 5 * LIMIT), 5 * LIMIT), True, "pass", "pass"),
        # Half the prompts 2x off, half not: the bounds straddle the limit.
        (_spread, True, "inconclusive", "inconclusive"),
        # No decode evidence: Inconclusive where the profile requires it...
        (_no_decode_top_k, True, "inconclusive", "inconclusive"),
        # ...else not part of the verdict.
        (_no_decode_top_k, False, "not-required", "not-required"),
    ],
)
def test_decode_limits_decide(
    candidate: object, required: bool, self_outcome: str, excess_outcome: str
) -> None:
    prompts = scored_suite()
    thresholds = _thresholds().model_copy(
        update={"max_decode_self_delta": LIMIT, "max_decode_excess": LIMIT,
                "require_decode_evidence": required}
    )  # fmt: skip
    result = compare_sources(
        scored_record(prompts),
        scored_record([candidate(p) for p in prompts]),  # type: ignore[operator]
        thresholds,
    )
    outcomes = {c.key: c for c in evaluate_checks(result.metrics, result.prompts, thresholds)}
    assert outcomes["maxDecodeSelfDelta"].outcome == self_outcome, outcomes[
        "maxDecodeSelfDelta"
    ].message
    assert outcomes["maxDecodeExcess"].outcome == excess_outcome, outcomes[
        "maxDecodeExcess"
    ].message
    verdict = decide(result)
    if "fail" in (self_outcome, excess_outcome):
        assert verdict.status.value == "Failed"
        assert any("maxDecodeSelfDelta" in r for r in verdict.reasons)
    if self_outcome == "inconclusive":
        assert verdict.status.value == "Inconclusive"
        assert any("maxDecodeExcess" in r for r in verdict.reasons)


def _thresholds():  # type: ignore[no-untyped-def]
    from infergate.parity.profiles import plan_gate
    from infergate.parity.thresholds import ProfileName

    from .builders import meta

    return plan_gate(meta(), meta(), profile=ProfileName.BF16_KERNEL).thresholds
