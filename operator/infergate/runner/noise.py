"""The model's own noise in a run: read for the limits, measured when a revision becomes stable.

`derived_limits` reads the baseline revision's noise record from the golden store (when
the operator keeps one) and derives the check's limits from it
(`parity.calibrated.derive_limits`). `measure_self_noise` runs after a check Passed and
its records were kept: the candidate, about to become stable, is driven through the suite
again against itself at another concurrency (self against self, each prompt scored along
the first answer's sequence), the pair compared with every check off, and its per-family
noise written beside its golden record (`golden.noise`). A store that fails never
changes the verdict: the run says so and goes on.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime

from infergate.calibration.noise import pair_report, signed_prompt_measures
from infergate.golden.config import store_from_spec
from infergate.golden.errors import GoldenError
from infergate.golden.noise import get_noise, put_noise
from infergate.parity.calibrated import (
    DerivedLimits,
    LayerNoise,
    ModelNoise,
)
from infergate.parity.compare import ParityComparison
from infergate.parity.gate_limits import noise_limits
from infergate.parity.noise_families import family_noise
from infergate.parity.profiles import Gate
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.parity.thresholds import Thresholds
from infergate.parity.verdict import VerdictStatus
from infergate.runner import overhead
from infergate.runner.context import RunContext, say
from infergate.runner.drive import DriveSettings, drive_suite, measure_prompt
from infergate.runner.layers import can_probe_layers, layer_noise, open_layer_probe
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState, need


def kept_noise(run: RunContext, baseline: SideTarget) -> ModelNoise | None:
    """The baseline revision's noise record (None: no store, not a revision, none kept,
    or the store could not be read, which the log says)."""
    golden = run.options.golden
    if golden is None or baseline.revision is None or baseline.deployment is None:
        return None
    try:
        store = store_from_spec(golden.store, environ=run.options.environ)
        return get_noise(store, run.api.namespace, baseline.deployment, baseline.revision)
    except (GoldenError, OSError, ValueError) as err:
        say(f"noise record of revision {baseline.revision} not usable: {err}")
        return None


def derived_limits(
    run: RunContext, gate: Gate, metas: tuple[RecordMeta, RecordMeta], baseline: SideTarget,
    explicit: Thresholds,
) -> DerivedLimits:  # fmt: skip
    """The check's limits from the baseline revision's kept noise, or the static ones."""
    return noise_limits(gate, metas[1].dtype, kept_noise(run, baseline), explicit)


LAYER_NOISE_PROMPTS = 3
"""Prompts whose sequences the per-layer self noise is measured on (as many as a failed
check's localisation asks: `runner.layers.WORST_PROMPTS`)."""


def _layer_noise(
    run: RunContext, candidate: SideTarget, sequences: list[list[int]]
) -> LayerNoise | None:
    """The candidate's per-layer self noise where its layer probe answers (None: it has
    none, or it failed, which the log says: the rest of the noise is kept regardless)."""
    if not can_probe_layers(candidate):
        return None
    source = open_layer_probe(candidate, run.options.request_timeout)
    if source is None:
        return None
    try:
        return layer_noise(source, sequences)
    except Exception as err:  # noqa: BLE001 - per-layer noise is optional; the log says why
        say(f"per-layer self noise of revision {candidate.revision} not measured: {err}")
        return None
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


def noise_concurrency(run_concurrency: int, prompts: int) -> int:
    """The other concurrency the A/A run uses: all at once after one at a time, else one."""
    return max(1, min(prompts, 8)) if run_concurrency <= 1 else 1


def measure_self_noise(run: RunContext, state: RunState) -> None:
    """After a Passed check kept its records: the candidate against itself, kept as noise."""
    golden, verdict = state.golden, state.verdict
    if run.options.golden is None or not golden or not golden.get("stored"):
        return
    if verdict is None or verdict.status is not VerdictStatus.PASSED or state.stopped_early:
        return
    _, candidate = need(state.sides, "the sides")
    if candidate.revision is None or candidate.deployment is None:
        return
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    gate = need(state.gate, "the gate")
    meta_c = need(state.metas, "the metadata")[1]
    off = Thresholds(max_divergence_logprob_gap=gate.thresholds.max_divergence_logprob_gap)
    comparison = ParityComparison(meta_c, meta_c, off, ("*",), control=False)
    signed: list[dict[str, float | None]] = []

    sequences: list[list[int]] = []

    def feed(first: PromptRecord, again: PromptRecord) -> None:
        comparison.add(first, again)
        signed.append(signed_prompt_measures(first, again))
        if len(sequences) < LAYER_NOISE_PROMPTS:
            sequences.append([*first.prompt_token_ids.tolist(), *first.output_token_ids.tolist()])

    settings = DriveSettings(
        max_tokens=spec.sampling.max_tokens,
        top_logprobs=spec.sampling.top_logprobs,
        seed=spec.sampling.seed,
        max_hidden_positions=spec.hidden_states.max_positions_per_prompt,
    )
    concurrency = noise_concurrency(run.options.concurrency, len(suite.prompts))
    label = f"self vs self at concurrency {concurrency} (the check ran {run.options.concurrency})"
    try:
        with ExitStack() as stack:
            channels = run.connector.open(
                candidate, stack, run.options.request_timeout, overhead.RequestLog()
            )
            drive_suite(
                suite.prompts,
                lambda prompt: measure_prompt(prompt, channels, channels, settings),
                feed,
                concurrency=concurrency,
            )
        result = comparison.finalize()
        report = pair_report(label, result.model_dump(mode="json", by_alias=True), signed)
        noise = ModelNoise(
            revision=candidate.revision, model=meta_c.model, engine=meta_c.engine,
            dtype=meta_c.dtype, layers=gate.layers, suite_digest=state.suite_digest or "",
            prompts=result.metrics.prompts, measured=datetime.now(UTC).isoformat(),
            method=f"runner after check {run.name} Passed: {label}",
            self_noise=family_noise([report]),
            layer_rel_l2=_layer_noise(run, candidate, sequences),
        )  # fmt: skip
        store = store_from_spec(run.options.golden.store, environ=run.options.environ)
        key = put_noise(store, run.api.namespace, candidate.deployment, noise)
    except Exception as err:  # noqa: BLE001 - the verdict stands; the log says why
        say(f"self noise of revision {candidate.revision} not measured: {err}")
        return
    families = ", ".join(f"{k.value} {v.upper:.3g}" for k, v in noise.self_noise.items())
    say(f"self noise of revision {candidate.revision} kept at {key}: {families}")
