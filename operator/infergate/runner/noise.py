"""The model's own noise in a run: read for the limits, measured where it is missing.

The baseline revision's noise record is read from the golden store (when the operator
keeps one) once per run (`baseline_noise`; a shadow check: `derived_limits`), and the
check's limits are derived from it (`parity.gate_limits.noise_limits`). A revision's
noise is measured by driving it through the suite again against itself at another
concurrency (self against self, each prompt scored along the first answer's sequence),
the pair compared with every check off (`self_noise`), and kept beside its golden
records (`golden.noise`):

- before a suite check's limits, for its baseline revision when no self noise of it is
  kept and the check's limits use self noise (`measure_baseline_noise`): the stable
  revision is measured by the first check that needs it, on the engines that check
  drives anyway, and is judged by it;
- never on the promotion path: a Passed check drives nothing more. A Passed
  dtype-change check of one set of weights keeps its own comparison in the candidate's
  record as that expected change's noise (`keep_change_pair`), which takes no request.

Why the first need and not the promotion: measuring a candidate when it Passed held its
promotion for a whole suite driven twice more (245 s of a 478 s demo step on the
serialised MindFormers side, against 137 s for the check itself), for a record that only
a later bf16-kernel or gpu-to-ascend check reads; a revision never judged under those
profiles (dtype changes, strict, cross-framework) never pays it, and one that is pays
it once, before the limits that read it.

A measurement or store that fails never changes anything else: the run says so and goes
on (a check whose baseline was not measured, under the limits it would have had).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime

from infergate.api.check_status import ProgressStage
from infergate.calibration.kept import change_key, change_noise, change_pair_refusal
from infergate.calibration.noise import pair_report, signed_prompt_measures
from infergate.golden.config import store_from_spec
from infergate.golden.errors import GoldenError
from infergate.golden.noise import get_noise, put_noise
from infergate.parity.calibrated import (
    DerivedLimits,
    FamilyNoise,
    LayerNoise,
    ModelNoise,
    NoiseFamily,
    calibration_need,
)
from infergate.parity.compare import ParityComparison
from infergate.parity.gate_limits import noise_limits
from infergate.parity.noise_families import family_noise
from infergate.parity.profiles import Gate
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.parity.verdict import VerdictStatus
from infergate.runner import overhead
from infergate.runner.context import RunContext, say
from infergate.runner.drive import DriveSettings, drive_suite, measure_prompt
from infergate.runner.layers import can_probe_layers, layer_noise, open_layer_probe
from infergate.runner.sides import SideTarget
from infergate.runner.state import RunState, need
from infergate.runner.status_writer import progress_writer

_UNREADABLE = (GoldenError, OSError, ValueError)
"""What reading the store may raise: it is down, or what it keeps is not a noise record."""


def kept_noise(run: RunContext, baseline: SideTarget) -> ModelNoise | None:
    """The baseline revision's noise record (None: no store, not a revision, none kept,
    or the store could not be read, which the log says)."""
    try:
        return _read_noise(run, baseline)
    except _UNREADABLE as err:
        say(f"noise record of revision {baseline.revision} not usable: {err}")
        return None


def _read_noise(run: RunContext, target: SideTarget) -> ModelNoise | None:
    """`target`'s noise record (None: no store, not a revision, or none kept); raises what
    the store raises."""
    golden = run.options.golden
    if golden is None or target.revision is None or target.deployment is None:
        return None
    store = store_from_spec(golden.store, environ=run.options.environ)
    return get_noise(store, run.api.namespace, target.deployment, target.revision)


def baseline_noise(run: RunContext, state: RunState) -> ModelNoise | None:
    """The baseline revision's noise record (`kept_noise`), read from the store once per
    run: the measurement step, the limits and a failed check's localisation all take it."""
    if state.baseline_noise is None:
        state.baseline_noise = (kept_noise(run, need(state.sides, "the sides")[0]),)
    return state.baseline_noise[0]


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
    run: RunContext, target: SideTarget, sequences: list[list[int]]
) -> LayerNoise | None:
    """A side's per-layer self noise where its layer probe answers (None: it has none,
    or it failed, which the log says: the rest of the noise is kept regardless)."""
    if not can_probe_layers(target):
        return None
    source = open_layer_probe(target, run.options.request_timeout)
    if source is None:
        return None
    try:
        return layer_noise(source, sequences)
    except Exception as err:  # noqa: BLE001 - per-layer noise is optional; the log says why
        say(f"per-layer self noise of revision {target.revision} not measured: {err}")
        return None
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


def noise_concurrency(run_concurrency: int, prompts: int) -> int:
    """The other concurrency the A/A run uses: all at once after one at a time, else one."""
    return max(1, min(prompts, 8)) if run_concurrency <= 1 else 1


def self_noise(
    run: RunContext, state: RunState, target: SideTarget, meta: RecordMeta, by: str, *,
    progress: Callable[[int], None] | None = None,
) -> ModelNoise:  # fmt: skip
    """`target` (a revision, `meta` its record metadata) against itself at another
    concurrency, compared with every check off: its noise record, whose method names `by`
    (who measured it); `progress` is told each prompt done. Raises whatever stops the
    measurement, and `ValueError` when no family was measured (a record without self
    noise would stand for a calibration)."""
    spec, suite = need(state.spec, "the spec"), need(state.suite, "the suite")
    gate = need(state.gate, "the gate")
    off = Thresholds(max_divergence_logprob_gap=gate.thresholds.max_divergence_logprob_gap)
    comparison = ParityComparison(meta, meta, off, ("*",), control=False)
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
    with ExitStack() as stack:
        channels = run.connector.open(
            target, stack, run.options.request_timeout, overhead.RequestLog()
        )
        drive_suite(
            suite.prompts,
            lambda prompt: measure_prompt(prompt, channels, channels, settings),
            feed,
            concurrency=concurrency,
            progress=progress,
        )
    result = comparison.finalize()
    report = pair_report(label, result.model_dump(mode="json", by_alias=True), signed)
    families = family_noise([report])
    if not families:
        raise ValueError(f"{label}: no noise family was measured")
    return ModelNoise(
        revision=target.revision, model=meta.model, engine=meta.engine, dtype=meta.dtype,
        layers=gate.layers, suite_digest=state.suite_digest or "",
        prompts=result.metrics.prompts, measured=datetime.now(UTC).isoformat(),
        method=f"{by}: {label}", self_noise=families,
        layer_rel_l2=_layer_noise(run, target, sequences),
    )  # fmt: skip


def _keep(run: RunContext, target: SideTarget, noise: ModelNoise) -> str:
    """Write `noise` as `target`'s record; the key it was written at."""
    golden, deployment = run.options.golden, target.deployment
    if golden is None or deployment is None:
        raise ValueError("no golden store, or not a revision: nowhere to keep noise")
    store = store_from_spec(golden.store, environ=run.options.environ)
    return put_noise(store, run.api.namespace, deployment, noise)


def _families(table: dict[NoiseFamily, FamilyNoise]) -> str:
    return ", ".join(f"{k.value} {v.upper:.3g}" for k, v in table.items())


def measure_baseline_noise(run: RunContext, state: RunState) -> None:
    """Before the limits: the baseline revision's self noise, measured now and kept when
    none is kept and this check's limits use self noise (`CalibrationNeed.uses_self_noise`),
    and handed to `plan_limits` as any kept record is (`baseline_noise`, read once per
    run). Measured once per revision: a record with self noise (`infergate parity
    calibrate --store`, or an earlier check) is never measured again; one that keeps only
    an expected change's pair (`keep_change_pair`) is measured, and its pair stays. Not
    measured when the runs' config or fingerprints already fail the check
    (`RunState.settled`), nor when the store cannot say whether it keeps one. A failure
    leaves the check under the limits it would have had (static, or Inconclusive where
    the profile needs a calibration), and the log says why."""
    baseline = need(state.sides, "the sides")[0]
    gate, metas = need(state.gate, "the gate"), need(state.metas, "the metadata")
    revision = baseline.revision
    if run.options.golden is None or revision is None or baseline.deployment is None:
        return
    if not calibration_need(gate.profile, metas[1].dtype, gate.layers).uses_self_noise:
        return
    try:
        found = _read_noise(run, baseline)
    except _UNREADABLE as err:
        say(f"self noise of baseline revision {revision} not measured: the store cannot say "
            f"whether it keeps one ({err})")  # fmt: skip
        return
    state.baseline_noise = (found,)
    if found is not None and found.self_noise:
        return
    if state.settled:
        say(f"self noise of baseline revision {revision} not measured: {state.settled}, and "
            "no limit can turn that into a pass")  # fmt: skip
        return
    say(f"no self noise kept for baseline revision {revision}: measuring it now, for this check")
    by = f"runner for check {run.name}, measured before its limits (none was kept)"
    try:
        total = len(need(state.suite, "the suite").prompts)
        stage = progress_writer(run, state, total, ProgressStage.BASELINE_NOISE)
        noise = self_noise(run, state, baseline, metas[0], by, progress=stage)
        if found is not None:  # a record of an expected change's pair alone: it stays
            noise = noise.model_copy(update={"changes": found.changes})
        key = _keep(run, baseline, noise)
    except Exception as err:  # noqa: BLE001 - the check goes on under its limits; the log says why
        say(f"self noise of baseline revision {revision} not measured or not kept: {err}; "
            "this check's limits do without it")  # fmt: skip
        return
    state.baseline_noise = (noise,)
    say(f"self noise of baseline revision {revision} measured now for this check, kept at "
        f"{key}: {_families(noise.self_noise)}")  # fmt: skip


def keep_change_pair(run: RunContext, state: RunState) -> None:
    """After a Passed check kept its records: its own comparison, where it is an expected
    change's pair (`_change_pair`), in the candidate's noise record, beside any self noise
    kept there. Nothing is driven: the candidate's self noise is measured by the first
    check that needs it (`measure_baseline_noise`). A store that cannot say what it keeps
    is not written to."""
    golden, verdict = state.golden, state.verdict
    if run.options.golden is None or not golden or not golden.get("stored"):
        return
    if verdict is None or verdict.status is not VerdictStatus.PASSED or state.stopped_early:
        return
    candidate = need(state.sides, "the sides")[1]
    if candidate.revision is None or candidate.deployment is None:
        return
    changes = _change_pair(run, state)
    if not changes:
        return
    try:
        found = _read_noise(run, candidate)
        record = _pair_record(run, state, changes) if found is None else found.model_copy(
            update={"changes": {**found.changes, **changes}}
        )  # fmt: skip
        key = _keep(run, candidate, record)
    except Exception as err:  # noqa: BLE001 - the verdict stands; the log says why
        say(f"this check's pair not kept for revision {candidate.revision}: {err}")
        return
    for change, table in changes.items():
        say(f"'{change}' noise of revision {candidate.revision} kept at {key} from this "
            f"check's own pair: {_families(table)}")  # fmt: skip


def _pair_record(
    run: RunContext, state: RunState, changes: dict[str, dict[NoiseFamily, FamilyNoise]]
) -> ModelNoise:
    """A new record of the candidate holding this check's pair alone: no self noise until
    a check measures it (`parity.calibrated` does not take an empty one as measured)."""
    meta_b, meta_c = need(state.metas, "the metadata")
    candidate = need(state.sides, "the sides")[1]
    return ModelNoise(
        revision=candidate.revision, model=meta_c.model, engine=meta_c.engine,
        dtype=meta_c.dtype, layers=need(state.gate, "the gate").layers,
        suite_digest=state.suite_digest or "",
        prompts=need(state.result, "the result").metrics.prompts,
        measured=datetime.now(UTC).isoformat(),
        method=f"runner after check {run.name} Passed: its {meta_b.dtype} vs {meta_c.dtype} "
        "pair; self noise not measured yet",
        self_noise={}, changes=changes,
    )  # fmt: skip


def _change_pair(run: RunContext, state: RunState) -> dict[str, dict[NoiseFamily, FamilyNoise]]:
    """This Passed check's own comparison as the noise of the expected change from the
    baseline's dtype, for the candidate's record (`changes["dtype <baseline dtype>"]`,
    where `parity.calibrated` looks up a dtype-change check's pair and a bf16 kernel
    check's envelope), when the check is that pair: profile dtype-change, the same
    weights, nothing but the dtype changed (`calibration.kept.change_pair_refusal`).
    Its families come by the calibration's own path (`calibration.kept.change_noise`).

    Safe to keep: the pair is a physical measurement of the same weights under the same
    two dtypes, what `infergate parity calibrate --also-dtype` records in process, here
    through the serving engines on a suite whose check Passed. A bf16 kernel check
    takes it as its envelope, which only ever tightens a static limit
    (`parity.calibrated.ENVELOPE_CAP_NOTE`); a later dtype-change check between the same
    two dtypes of the same weights is judged against the noise of exactly that change.
    """
    gate = need(state.gate, "the gate")
    if gate.profile is not ProfileName.DTYPE_CHANGE:
        return {}
    meta_b, meta_c = need(state.metas, "the metadata")
    result = need(state.result, "the result")
    key = change_key(meta_b.dtype)
    refused = change_pair_refusal(meta_b, meta_c, result.thresholds.confidence)
    if refused is not None:
        say(f"this check's pair not kept as the '{key}' noise of the candidate: {refused}")
        return {}
    # No signed measures: no noise family reads them (`parity.noise_families`).
    label = f"{meta_b.dtype} vs {meta_c.dtype}, check {run.name}"
    table = change_noise(label, result.model_dump(mode="json", by_alias=True))
    return {key: table} if table else {}
