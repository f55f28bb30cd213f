"""Decode-path evidence: the generated tokens' own logprobs before the first fork."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_the_suite_reports_decode_evidence_and_the_verdict_ignores_it() -> None:
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
    # Reported, not decided on: no limit exists yet, so the verdict is the same.
    assert decide(drift).status == decide(same).status
    assert "decode path before the first fork" in render_report(drift, decide(drift))


def _thresholds():  # type: ignore[no-untyped-def]
    from infergate.parity.profiles import plan_gate
    from infergate.parity.thresholds import ProfileName

    from .builders import meta

    return plan_gate(meta(), meta(), profile=ProfileName.BF16_KERNEL).thresholds
