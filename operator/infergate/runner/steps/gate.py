"""The gate a check is judged under: both sides' fingerprints, the profile, the comparison.

Each side's record metadata carries what the runner asks of it (suite digest and
sampling, `run_fingerprints`) merged with what the side reports; the profile and its
thresholds follow from both (`plan_gate`, by `parity.profiles.plan_gate`), then its
limits from the baseline revision's own measured noise where it is kept (`plan_limits`,
by `runner.noise.baseline_noise`; a suite check measures it between the two when none is
kept: `runner.noise.measure_baseline_noise`). When the runs' config or fingerprints
already fail the check, only a few prompts are measured: no prompt can make it pass, and
a few give the report its figures.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from infergate.api.parity_check import ParityCheckSpec
from infergate.parity import profiles
from infergate.parity.calibrated import provenance_lines
from infergate.parity.compare import ParityComparison
from infergate.parity.fingerprints import merge_fingerprints, run_fingerprints
from infergate.parity.gate_limits import noise_limits, with_limits
from infergate.parity.record import RecordMeta
from infergate.plan import reasons
from infergate.runner.context import CheckEndedError, RunContext, say
from infergate.runner.noise import baseline_noise
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState, need
from infergate.suite import Suite

SETTLED_PROMPTS = 4
"""Prompts measured when the fingerprints already fail a check: no prompt can make it
pass (a failure needs no minimum evidence), and a few give the report figures. A demo
check of two MindFormers CPU sides spent ~10 minutes on a suite whose answer was known at
its first request."""


def plan_gate(run: RunContext, state: RunState) -> None:
    """Both sides' metadata and the gate: the profile and its static thresholds."""
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    baseline, candidate = need(state.sides, "the sides")
    asked = run_fingerprints(
        suite_digest=suite.digest(),
        max_tokens=spec.sampling.max_tokens,
        temperature=spec.sampling.temperature,
        top_logprobs=spec.sampling.top_logprobs,
        seed=spec.sampling.seed,
    )
    meta_c = record_meta(candidate, suite, asked)
    golden = state.golden_base
    meta_b = golden.meta if golden is not None else record_meta(baseline, suite, asked)
    try:
        gate = profiles.plan_gate(
            meta_b,
            meta_c,
            profile=spec.profile,
            explicit=spec.effective_thresholds(),
            hidden_states=spec.hidden_states.enabled,
        )
    except profiles.ProfileChoiceError as err:
        raise CheckEndedError(reasons.CHECK_INVALID, str(err)) from err
    state.metas, state.gate = (meta_b, meta_c), gate
    state.settled = settled_reason(_comparison(spec, gate, (meta_b, meta_c)))


def plan_limits(run: RunContext, state: RunState) -> None:
    """The gate's limits from the baseline's kept noise, the comparison to feed, and the
    prompts to measure."""
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    gate, (meta_b, meta_c) = need(state.gate, "the gate"), need(state.metas, "the metadata")
    limits = noise_limits(
        gate, meta_c.dtype, baseline_noise(run, state), spec.effective_thresholds()
    )
    gate = with_limits(gate, limits)
    for line in provenance_lines(limits):
        say(f"limits: {line}")
    comparison = _comparison(spec, gate, (meta_b, meta_c))
    say(f"profile {gate.profile.value} ({gate.reason}); {len(suite.prompts)} prompts")
    say(f"limits: {gate.limits.describe()}")
    state.gate, state.comparison, state.limits = gate, comparison, limits
    state.suite, state.stopped_early = settled_suite(state.settled, suite)


def _comparison(
    spec: ParityCheckSpec, gate: profiles.Gate, metas: tuple[RecordMeta, RecordMeta]
) -> ParityComparison:
    """The comparison of the two sides under `gate` (its thresholds as they stand)."""
    return ParityComparison(
        metas[0],
        metas[1],
        gate.thresholds,
        gate.expected_differences,
        disabled=gate.disabled,
        fingerprints=spec.fingerprints,
        limits=gate.limits,
    )


def settled_reason(comparison: ParityComparison) -> str | None:
    """What already fails `comparison` before any prompt, in words (None: nothing). The
    config and fingerprint findings do not depend on the limits, so the gate's static
    comparison (`plan_gate`) says it for the check."""
    settled = comparison.failed_before_prompts()
    if not settled:
        return None
    first = settled[0]
    return (
        f"the runs' config or fingerprints already fail the check ({first.check.value}: "
        f"{first.detail})"
    )


def settled_suite(settled: str | None, suite: Suite) -> tuple[Suite, str | None]:
    """The prompts to measure, and why fewer than the suite's when the runs' config or
    fingerprints already fail the check (`settled`, `settled_reason`'s words): a few short
    prompts then, for the report."""
    if settled is None or len(suite.prompts) <= SETTLED_PROMPTS:
        return suite, None
    short = suite.select(long=False, limit=SETTLED_PROMPTS)
    chosen = short if short.prompts else suite.select(limit=SETTLED_PROMPTS)
    why = (
        f"{settled}; {len(chosen.prompts)} of {len(suite.prompts)} prompts measured, for the "
        "report's figures only"
    )
    say(why)
    return chosen, why


def record_meta(target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
    """A side's record metadata: what it reports, with what the runner asks merged in."""
    identity = json.dumps(
        {"revision": target.revision, "config": target.effective_config, "url": target.url},
        sort_keys=True,
        default=str,
    )
    return RecordMeta(
        engine=target.engine,
        engine_version=target.engine_version,
        dtype=target.dtype,
        config_hash=target.revision or hashlib.sha256(identity.encode()).hexdigest()[:10],
        model=target.model,
        suite=suite.name,
        effective_config=target.effective_config,
        fingerprints=merge_fingerprints(target.fingerprints, asked),
    )
