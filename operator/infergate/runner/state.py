"""The one record a run's steps read and fill in, from the check as read to its report.

Each step of `runner.steps` takes the run's fixed inputs (`RunContext`) and this state,
reads what earlier steps filled in and fills in its own part; a mode is the order its
steps run in (`runner.modes`). Nothing here talks to the API server or an engine, so a
test builds a state by hand and runs one step on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from infergate.api.common import ConfigMapKeyReference
from infergate.api.parity_check import ParityCheckSpec
from infergate.parity.calibrated import DerivedLimits, ModelNoise
from infergate.parity.compare import ParityComparison
from infergate.parity.metrics import ParityResult
from infergate.parity.profiles import Gate
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.parity.verdict import Verdict
from infergate.runner.golden import GoldenRecorder
from infergate.runner.golden_baseline import GoldenBaseline
from infergate.runner.layers import LayerReport
from infergate.runner.load import LoadOutcome
from infergate.runner.sides import SideTarget
from infergate.suite import Suite

_T = TypeVar("_T")


@dataclass
class RunState:
    """Everything one run knows so far; each field says which step fills it in."""

    check: dict[str, Any] = field(default_factory=dict)
    """The ParityCheck as last read or written (`read_check`, then every status write)."""
    done: bool = False
    """Nothing more to do: the check had already ended (any step may set it)."""
    generation: int | None = None
    """The spec generation the runner measures (`read_check`)."""
    spec: ParityCheckSpec | None = None
    """The validated spec (`read_check`)."""
    suite: Suite | None = None
    """The prompts to measure (`load_suite`; `plan_limits` may settle it to a few)."""
    suite_digest: str | None = None
    """The content digest of the whole suite as loaded, which the verdict names (`load_suite`)."""
    started: float = 0.0
    """`time.monotonic()` when the suite was loaded (the report's seconds count from it)."""
    golden_base: GoldenBaseline | None = None
    """The golden record serving as the baseline (`open_golden_baseline`); closed at the end."""
    sides: tuple[SideTarget, SideTarget] | None = None
    """Baseline and candidate (`resolve_sides`, or `open_golden_baseline`)."""
    candidate: SideTarget | None = None
    """The candidate alone, before a golden baseline joins it (`resolve_candidate`)."""
    metas: tuple[RecordMeta, RecordMeta] | None = None
    """Both sides' record metadata, the runner's fingerprints merged in (`plan_gate`)."""
    gate: Gate | None = None
    """Profile, thresholds and disabled checks (`plan_gate`; `plan_limits` sets its limits)."""
    settled: str | None = None
    """What already fails the check before any prompt (config or fingerprints the profile
    does not allow to differ), in words; None: nothing (`plan_gate`)."""
    limits: DerivedLimits | None = None
    """The limits' provenance: measured noise x k, static or explicit (`plan_limits`)."""
    baseline_noise: tuple[ModelNoise | None] | None = None
    """The baseline revision's noise record once the store was read, in a 1-tuple (None
    inside: none kept); None until then (`runner.noise.baseline_noise`)."""
    comparison: ParityComparison | None = None
    """The comparison the drive feeds (`plan_limits`)."""
    stopped_early: str | None = None
    """Why fewer prompts than the suite's are measured (`plan_limits`)."""
    recorder: GoldenRecorder | None = None
    """Stages both sides' records for the golden store (`start_recording`)."""
    references: dict[str, list[int]] = field(default_factory=dict)
    """Each prompt's baseline sequence (token ids), for the layer probe (`drive`)."""
    kept: list[PromptRecord] = field(default_factory=list)
    """The baseline's records, without hidden states, for load and performance (`drive`)."""
    overhead: dict[str, Any] = field(default_factory=dict)
    """The status `overhead` field: the runner's time over the engines' (`drive`)."""
    result: ParityResult | None = None
    """The comparison's result (`judge`; `localise` adds its notes)."""
    verdict: Verdict | None = None
    """The core's verdict (`judge`; `localise` adds its reason)."""
    seconds: float = 0.0
    """Seconds from loading the suite to the verdict (`judge`)."""
    golden: dict[str, Any] | None = None
    """The status `golden` field (`record_golden`; None: the operator keeps no records)."""
    layers: LayerReport = field(default_factory=lambda: LayerReport(None, (), ""))
    """A failed check's first diverging layer (`localise`)."""
    load: LoadOutcome | None = None
    """Load levels' and performance's outcome (`run_load`; None: neither was asked)."""
    report: ConfigMapKeyReference | None = None
    """Where the report was written (`write`)."""


def need(value: _T | None, what: str) -> _T:
    """`value`, which an earlier step fills in; a mode whose steps are out of order fails
    here, naming what was missing (the Job retries and the log says which)."""
    if value is None:
        raise RuntimeError(f"the runner's steps ran out of order: {what} is not known yet")
    return value
