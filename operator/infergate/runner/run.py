"""The runner: one ParityCheck from spec to verdict, written into its status and report.

`run_check` is what `infergate parity run --check NS/NAME` does inside the runner Job:

1. read the check; a check that already ended is left alone (a retried pod never
   overwrites a verdict);
2. load the suite and resolve both sides (endpoints from EndpointSlices, engines,
   probes), waiting a little for pods that are still starting;
3. drive both sides with bounded concurrency, feeding the parity core, and show
   progress in the status;
4. decide, write the report ConfigMap, then the terminal status — only if the check
   is still not terminal (conditional update on its resourceVersion).

Fail closed: anything that prevents measuring ends in `Error`, never `Passed`.
A failure a retry may fix (a side unreachable or failing, the API server away) is
recorded as the `RunnerError` condition and the process exits non-zero, so the Job
retries it within `runner.backoffLimit` and the controller ends the check in `Error`
with that reason if no attempt succeeds. A failure a retry cannot fix (a side that
does not exist, an unusable answer, an invalid suite) ends the check in `Error` at once.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from infergate.accounting import OverheadError, describe_overhead, overhead_fields
from infergate.api.check_status import VerdictReason
from infergate.api.common import ConfigMapKeyReference
from infergate.api.golden import GoldenSpec
from infergate.api.parity_check import ParityCheck, ParityCheckSpec
from infergate.api.shadow import CheckSource
from infergate.errors import (
    ConflictError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    RetriableKubeError,
)
from infergate.golden.retention import deployment_history
from infergate.kube.paritycheck_api import write_terminal_status
from infergate.parity.compare import ParityComparison
from infergate.parity.fingerprints import merge_fingerprints, run_fingerprints
from infergate.parity.metrics import ParityMetrics, ParityResult
from infergate.parity.profiles import Gate, ProfileChoiceError, plan_gate
from infergate.parity.record import ParityInputError, PromptRecord, RecordMeta
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import VerdictStatus, decide
from infergate.plan import check_status as st
from infergate.plan import reasons
from infergate.plan.check_status import Judgement
from infergate.plan.phases import is_check_terminal
from infergate.plan.revision_diff import revision_changes
from infergate.render.check_names import (
    REPORT_HTML_KEY,
    SIDES,
    SideName,
    child_labels,
    report_name,
)
from infergate.report.page import render_report
from infergate.retry import retry_call
from infergate.runner.channels import (
    HttpEngineInfo,
    open_channels,
    scrape_metrics,
    wait_healthy,
)
from infergate.runner.combine import combined
from infergate.runner.drive import (
    Channels,
    DriveSettings,
    SideAnswerError,
    SideUnavailableError,
    drive_suite,
    measure_against_record,
    measure_prompt,
)
from infergate.runner.golden import (
    GOLDEN_URL_PREFIX,
    GoldenBaseline,
    GoldenBaselineError,
    GoldenRecorder,
    golden_target,
    open_golden_baseline,
)
from infergate.runner.layers import LayerOpener, LayerReport, localise_failure, open_layer_probe
from infergate.runner.load import LoadOutcome, run_load
from infergate.runner.overhead import (
    Engine,
    RequestLog,
    Scrape,
    check_engines,
    scrape_all,
)
from infergate.runner.overhead import measure as measure_overhead
from infergate.runner.report_store import ReportTooLargeError, build_report_data, read_report
from infergate.runner.shadow import ShadowError, run_shadow
from infergate.runner.sides import (
    ClusterReads,
    EngineInfo,
    SideResolutionError,
    SideTarget,
    resolve_side,
)
from infergate.runner.summary import judgement
from infergate.suite import PromptSpec, Suite, SuiteError, parse_suite

EXIT_DONE = 0
_T = TypeVar("_T")
EXIT_RETRY = 3
ROLE_REPORT = "report"


class RunnerApi(ClusterReads, Protocol):
    """The API calls the runner makes (implemented by `infergate.kube.paritycheck_api`)."""

    namespace: str

    def get_check(self, name: str) -> dict[str, Any]: ...

    def patch_check_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]: ...

    def replace_check_status(self, check: Mapping[str, Any]) -> dict[str, Any]: ...

    def inference_deployments(self) -> list[dict[str, Any]]:
        """Every InferenceDeployment of the namespace (golden retention; needs `list`)."""
        ...

    def write_report(
        self,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, str],
        labels: Mapping[str, str],
        owner: Mapping[str, Any] | None,
    ) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """How the runner paces itself."""

    concurrency: int = 2
    """Prompts in flight at once (each holds one prompt pair in memory)."""
    request_timeout: float = 600.0
    """Seconds one engine request may take before the side counts as failing."""
    wait_for_sides: float = 120.0
    """Seconds to wait for sides' endpoints to be ready before giving up (a retry)."""
    progress_interval: float = 2.0
    """Least seconds between two progress writes to the status."""
    previous_report: str | None = None
    """Report ConfigMap of the last passing check, for the regression test."""
    golden: GoldenSpec | None = None
    """The operator's golden record store and size policy (None: no records are kept)."""
    environ: Mapping[str, str] | None = None
    """Where the S3 keys and the store's mount override are read (None: os.environ)."""


@dataclass(frozen=True)
class Connector:
    """How the runner talks to engines: over HTTP, or (in unit tests) in process."""

    info: EngineInfo = field(default_factory=HttpEngineInfo)
    open: Callable[[SideTarget, ExitStack, float, RequestLog], Channels] = open_channels
    health: Callable[[list[str], float], None] = wait_healthy
    layers: LayerOpener = open_layer_probe
    scrape: Scrape = scrape_metrics
    """An engine's /metrics text, for the runner's overhead."""


class RetryableRunError(RuntimeError):
    """This attempt failed in a way another attempt may not; exit for the Job to retry."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CheckEndedError(RuntimeError):
    """The check cannot be measured; it ends in Error with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


SETTLED_PROMPTS = 4
"""Prompts measured when the fingerprints already fail a check: no prompt can make it
pass (a failure needs no minimum evidence), and a few give the report figures. A demo
check of two MindFormers CPU sides spent ~10 minutes on a suite whose answer was known at
its first request."""


def settled_suite(comparison: ParityComparison, suite: Suite) -> tuple[Suite, str | None]:
    """The prompts to measure, and why fewer than the suite's when the runs' config or
    fingerprints already fail the check (a few short prompts then, for the report)."""
    settled = comparison.failed_before_prompts()
    if not settled or len(suite.prompts) <= SETTLED_PROMPTS:
        return suite, None
    short = suite.select(long=False, limit=SETTLED_PROMPTS)
    chosen = short if short.prompts else suite.select(limit=SETTLED_PROMPTS)
    why = (
        f"the runs' config or fingerprints already fail the check ({settled[0].check.value}: "
        f"{settled[0].detail}); {len(chosen.prompts)} of {len(suite.prompts)} prompts "
        "measured, for the report's figures only"
    )
    _say(why)
    return chosen, why


def _with_notes(result: ParityResult, *notes: str | None) -> ParityResult:
    """The result with `notes` (those given) ahead of its own."""
    return result.model_copy(update={"notes": [n for n in notes if n] + result.notes})


def _say(message: str) -> None:
    print(f"[parity-runner] {message}", flush=True)  # noqa: T201 - the pod log is the user's view


def run_check(
    api: RunnerApi,
    name: str,
    options: RunOptions,
    *,
    connector: Connector | None = None,
    clock: Callable[[], datetime] = st.now,
) -> int:
    """Run one check to its verdict; the exit code the runner process returns."""
    runner = _Runner(api, name, options, connector or Connector(), clock)
    try:
        return runner.run()
    except CheckEndedError as err:
        _say(f"Error ({err.reason}): {err}")
        return runner.end_in_error(err.reason, str(err))
    except RetryableRunError as err:
        _say(f"attempt failed ({err.reason}): {err}")
        runner.record_attempt_failure(err.reason, str(err))
        return EXIT_RETRY


class _Runner:
    def __init__(
        self,
        api: RunnerApi,
        name: str,
        options: RunOptions,
        connector: Connector,
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.name, self.options, self.clock = api, name, options, clock
        self.connector = connector
        self.generation: int | None = None
        self.check: dict[str, Any] = {}
        self.overhead: dict[str, Any] = {}
        self.references: dict[str, list[int]] = {}
        """Each prompt's baseline sequence (token ids), for the layer probe."""

    # -- the run --------------------------------------------------------------------------

    def run(self) -> int:
        self.check = self._get()
        phase = (self.check.get("status") or {}).get("phase")
        if is_check_terminal(phase):
            _say(f"check {self.api.namespace}/{self.name} already ended ({phase}); nothing to do")
            return EXIT_DONE
        self.generation = self.check["metadata"].get("generation")
        try:
            spec = ParityCheck.model_validate(self.check).spec
        except ValidationError as err:
            raise CheckEndedError(reasons.CHECK_INVALID, f"spec is invalid: {err}") from err
        if spec.source is CheckSource.SHADOW:
            return self._shadow(spec)
        suite = self._suite(spec)
        started = time.monotonic()
        if not self._mark_running(len(suite.prompts)):
            return EXIT_DONE
        with ExitStack() as held:
            golden_base = None
            if spec.baseline.golden is not None:
                [candidate] = self._resolve(spec, ("candidate",))
                golden_base = self._golden_baseline(spec, suite, candidate)
                held.callback(golden_base.close)
                baseline = golden_target(golden_base)
            else:
                baseline, candidate = self._resolve(spec, SIDES)
            return self._measure(spec, suite, started, (baseline, candidate), golden_base)

    def _measure(
        self,
        spec: ParityCheckSpec,
        suite: Suite,
        started: float,
        sides: tuple[SideTarget, SideTarget],
        golden_base: GoldenBaseline | None,
    ) -> int:
        baseline, candidate = sides
        _say(f"baseline: {baseline.description} at {baseline.url}")
        _say(f"candidate: {candidate.description} at {candidate.url}")
        self._health(baseline, candidate)
        asked = run_fingerprints(
            suite_digest=suite.digest(),
            max_tokens=spec.sampling.max_tokens,
            temperature=spec.sampling.temperature,
            top_logprobs=spec.sampling.top_logprobs,
            seed=spec.sampling.seed,
        )
        meta_c = _meta(candidate, suite, asked)
        meta_b = golden_base.meta if golden_base is not None else _meta(baseline, suite, asked)
        try:
            gate = plan_gate(
                meta_b,
                meta_c,
                profile=spec.profile,
                explicit=spec.effective_thresholds(),
                hidden_states=spec.hidden_states.enabled,
            )
        except ProfileChoiceError as err:
            raise CheckEndedError(reasons.CHECK_INVALID, str(err)) from err
        profile, why = gate.profile, gate.reason
        comparison = ParityComparison(
            meta_b, meta_c, gate.thresholds, gate.expected_differences, disabled=gate.disabled
        )
        _say(f"profile {profile.value} ({why}); {len(suite.prompts)} prompts")
        suite, stopped_early = settled_suite(comparison, suite)
        recorder = (
            None
            if golden_base is not None
            else GoldenRecorder.start(
                self.options.golden,
                namespace=self.api.namespace,
                check=self.name,
                spec=spec,
                suite=suite,
                baseline=(baseline, meta_b),
                candidate=(candidate, meta_c),
                environ=self.options.environ,
            )
        )
        kept = self._drive(
            spec, suite, (baseline, candidate), comparison, recorder=recorder, golden=golden_base
        )
        result = _with_notes(
            comparison.finalize(),
            golden_base.note() if golden_base is not None else None,
            stopped_early,
        )
        previous = self._previous_metrics(profile)
        verdict = decide(result, gate.warn, previous, spec.effective_regression())
        seconds = time.monotonic() - started
        _say(f"verdict {verdict.status.value} after {seconds:.1f}s")
        for reason in verdict.reasons:
            _say(f"  reason: {reason}")
        golden = self._finish_golden(recorder, verdict.status, profile)
        layers = self._layers(verdict.status, result, (baseline, candidate), golden_base)
        if layers.notes:
            result = result.model_copy(update={"notes": [*result.notes, *layers.notes]})
        if layers.reason is not None:
            _say(f"  {layers.reason}")
            verdict = verdict.model_copy(update={"reasons": [*verdict.reasons, layers.reason]})
        changes = _revision_changes(baseline, candidate)
        document = {
            "check": {"namespace": self.api.namespace, "name": self.name},
            "changes": changes,
            "status": verdict.status.value,
            "profile": profile.value,
            "profileReason": why,
            "sides": {s.side: _side_summary(s) for s in (baseline, candidate)},
            "seconds": round(seconds, 2),
            "overhead": self.overhead,
            "verdict": verdict.model_dump(mode="json", by_alias=True),
            "result": result.model_dump(mode="json", by_alias=True),
        }
        judged, load = _with_load(
            judgement(result, verdict, profile.value),
            self._load(spec, baseline, candidate, kept=kept, metas=(meta_b, meta_c), gate=gate),
            document,
        )
        if golden is not None:
            document["golden"] = golden
        if golden_base is not None:
            document["goldenBaseline"] = golden_base.status()
        html = render_report(
            result,
            verdict,
            f"{profile.value} ({why})",
            changes,
            sections=[layers.html] if layers.html else [],
            overhead=self.overhead,
        )
        report = self._write_report(document, html)
        binding = st.Binding(
            spec_digest=st.spec_digest(self.check.get("spec") or {}),
            generation=self.generation,
            baseline_revision=baseline.revision,
            candidate_revision=candidate.revision,
        )
        if layers.reason is not None:
            judged = replace(
                judged,
                reasons=[
                    *judged.reasons,
                    VerdictReason(metric="layers.firstDiverging", message=layers.reason),
                ],
            )
        fields = st.verdict_status(
            judged,
            binding,
            status=self.check.get("status") or {},
            report=report,
            at=self.clock(),
        )
        fields |= {
            "progress": {"done": result.metrics.prompts, "total": len(suite.prompts)},
            "overhead": self.overhead,
            **(load.status if load is not None else {}),
        }
        if golden is not None:
            fields["golden"] = golden
        if golden_base is not None:
            fields["goldenBaseline"] = golden_base.status()
        self._finish(fields)
        return EXIT_DONE

    # -- steps ----------------------------------------------------------------------------

    def _suite(self, spec: ParityCheckSpec) -> Suite:
        source = spec.suite
        if source is None:
            raise CheckEndedError(reasons.CHECK_INVALID, "spec.suite is unset")
        if source.inline is not None:
            prompts = tuple(
                PromptSpec.model_validate(
                    p.model_dump(mode="json", by_alias=True, exclude_none=True)
                )
                for p in source.inline
            )
            return Suite("inline", prompts)
        ref = source.config_map_ref
        assert ref is not None  # noqa: S101 - PromptSuite guarantees exactly one source
        where = f"suite.configMapRef {ref.name}/{ref.key}"
        config_map = self._api_call(lambda: self.api.config_map(ref.name))
        if config_map is None:
            raise CheckEndedError("SuiteNotFound", f"{where}: ConfigMap {ref.name} does not exist")
        text = (config_map.get("data") or {}).get(ref.key)
        if text is None:
            keys = ", ".join(sorted((config_map.get("data") or {}).keys())) or "none"
            raise CheckEndedError(
                "SuiteNotFound", f"{where}: ConfigMap {ref.name} has no key {ref.key} ({keys})"
            )
        try:
            return parse_suite(text.splitlines(), name=f"{ref.name}/{ref.key}", source=where)
        except SuiteError as err:
            raise CheckEndedError("InvalidSuite", str(err)) from err

    def _finish_golden(
        self, recorder: GoldenRecorder | None, status: VerdictStatus, profile: ProfileName
    ) -> dict[str, Any] | None:
        """Commit the golden records on Passed and apply retention; the status `golden`
        field (None: the operator keeps no records)."""
        if recorder is None:
            return None
        history = None
        where = recorder.where
        if status is VerdictStatus.PASSED and where is not None:
            deployment = self._api_call(lambda: self.api.inference_deployment(where[1]))
            history = deployment_history(deployment)
        golden = recorder.finish(
            status is VerdictStatus.PASSED,
            outcome=status.value,
            profile=profile.value,
            history=history,
            list_deployments=self.api.inference_deployments,
        )
        _say(f"golden records: {golden.get('entries') or golden.get('message')}")
        return golden

    def _layers(
        self,
        status: VerdictStatus,
        result: ParityResult,
        sides: tuple[SideTarget, SideTarget],
        golden: GoldenBaseline | None,
    ) -> LayerReport:
        """A failed check's first diverging layer (nothing for any other verdict)."""
        if status is not VerdictStatus.FAILED:
            return LayerReport(None, (), "")
        if golden is not None:
            return LayerReport.skipped(
                "the baseline is a golden record, which keeps no per-layer states"
            )
        _say("failed: asking both sides for every layer's states on the worst prompts")
        return localise_failure(
            result,
            sides,
            self.references,
            self.connector.layers,
            timeout=self.options.request_timeout,
        )

    def _golden_baseline(
        self, spec: ParityCheckSpec, suite: Suite, candidate: SideTarget
    ) -> GoldenBaseline:
        try:
            found = open_golden_baseline(
                self.options.golden,
                namespace=self.api.namespace,
                spec=spec,
                suite=suite,
                candidate_revision=candidate.revision,
                environ=self.options.environ,
            )
        except GoldenBaselineError as err:
            if err.retry:
                raise RetryableRunError(err.reason, str(err)) from err
            raise CheckEndedError(err.reason, str(err)) from err
        _say(f"golden baseline: {found.note()}")
        return found

    def _resolve(self, spec: ParityCheckSpec, sides: tuple[SideName, ...]) -> list[SideTarget]:
        """Every side resolved, waiting a while for those whose pods are not ready yet.

        Each round tries every side, so a side that can never be measured (an object
        someone else made, a revision that does not exist) ends the check at once, even
        while the other side is still starting.
        """
        status = self.check.get("status") or {}
        pinned = {
            "baseline": status.get("baselineRevision"),
            "candidate": status.get("candidateRevision"),
        }
        uid = str(self.check["metadata"]["uid"])
        deadline = time.monotonic() + self.options.wait_for_sides
        while True:
            resolved: list[SideTarget] = []
            waiting: Exception | None = None
            for side in sides:
                try:
                    resolved.append(
                        resolve_side(
                            side, self.name, spec, reads=self.api, info=self.connector.info,
                            check_uid=uid, pinned_revision=pinned[side],
                        )
                    )  # fmt: skip
                except SideResolutionError as err:
                    if not err.transient:
                        reason = err.reason or reasons.CHECK_INVALID
                        raise CheckEndedError(reason, str(err)) from err
                    waiting = waiting or err
                except SideUnavailableError as err:
                    waiting = waiting or err
                except KubeError as err:
                    raise _api_failure(err) from err
            if waiting is None:
                return resolved
            if time.monotonic() > deadline:
                raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(waiting)) from waiting
            _say(f"waiting: {waiting}")
            time.sleep(2.0)

    def _health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        live = [t for t in (baseline, candidate) if not t.url.startswith(GOLDEN_URL_PREFIX)]
        urls = [t.url for t in live]
        urls += [t.probe_url for t in live if t.probe_url and t.probe_url not in urls]
        try:
            self.connector.health(urls, min(60.0, self.options.wait_for_sides))
        except SideUnavailableError as err:
            raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err

    def _drive(
        self,
        spec: ParityCheckSpec,
        suite: Suite,
        sides: tuple[SideTarget, SideTarget],
        comparison: ParityComparison,
        *,
        recorder: GoldenRecorder | None = None,
        golden: GoldenBaseline | None = None,
    ) -> list[PromptRecord]:
        """Measure the suite into the comparison (and the golden recorder, if any); what
        the recorder staged is dropped when the run ends without measuring everything. The
        baseline's records (without hidden states) when spec.load or spec.performance will
        compare with them."""
        try:
            return self._drive_sides(spec, suite, sides, comparison, (recorder, golden))
        except BaseException:
            if recorder is not None:
                recorder.discard()
            raise

    def _drive_sides(
        self,
        spec: ParityCheckSpec,
        suite: Suite,
        sides: tuple[SideTarget, SideTarget],
        comparison: ParityComparison,
        golden: tuple[GoldenRecorder | None, GoldenBaseline | None],
    ) -> list[PromptRecord]:
        baseline, candidate = sides
        recorder, record = golden
        kept: list[PromptRecord] = []
        keep = spec.load is not None or spec.performance is not None
        settings = DriveSettings(
            max_tokens=spec.sampling.max_tokens,
            top_logprobs=spec.sampling.top_logprobs,
            seed=spec.sampling.seed,
            max_hidden_positions=spec.hidden_states.max_positions_per_prompt,
        )
        total = len(suite.prompts)
        last_write = 0.0

        def progress(done: int) -> None:
            nonlocal last_write
            if done == total or time.monotonic() - last_write >= self.options.progress_interval:
                last_write = time.monotonic()
                _say(f"progress {done}/{total}")
                self._patch({"progress": {"done": done, "total": total}})

        def feed(base: PromptRecord, cand: PromptRecord) -> None:
            self.references[base.prompt_id] = [
                *base.prompt_token_ids.tolist(),
                *base.output_token_ids.tolist(),
            ][: settings.max_hidden_positions]
            comparison.add(base, cand)
            if recorder is not None:
                recorder.add(base, cand)
            if keep:
                kept.append(replace(base, hidden_states=None))

        log = RequestLog()
        engines = check_engines((candidate,) if record is not None else (baseline, candidate))
        concurrency = max(1, min(self.options.concurrency, total))
        timeout = self.options.request_timeout
        with ExitStack() as stack:
            cand = self.connector.open(candidate, stack, timeout, log)
            if record is not None:

                def measure(prompt: PromptSpec) -> tuple[PromptRecord, PromptRecord]:
                    return measure_against_record(prompt, record.prompt(prompt.id), cand, settings)

            else:
                base = self.connector.open(baseline, stack, timeout, log)

                def measure(prompt: PromptSpec) -> tuple[PromptRecord, PromptRecord]:
                    return measure_prompt(prompt, base, cand, settings)

            before: dict[str, str] | None = None
            try:
                before = scrape_all(engines, self.connector.scrape)
            except OverheadError as err:
                self.overhead = overhead_fields(err)
            started = time.monotonic()
            try:
                drive_suite(
                    suite.prompts,
                    measure,
                    feed,
                    concurrency=self.options.concurrency,
                    progress=progress,
                )
            except SideUnavailableError as err:
                raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
            except (SideAnswerError, ParityInputError) as err:
                raise CheckEndedError(reasons.CHECK_COULD_NOT_MEASURE, str(err)) from err
            wall = time.monotonic() - started
            if before is not None:
                self.overhead = self._overhead(engines, before, log, wall, concurrency)
        _say(describe_overhead(self.overhead))
        return kept

    def _overhead(
        self,
        engines: list[Engine],
        before: dict[str, str],
        log: RequestLog,
        wall: float,
        concurrency: int,
    ) -> dict[str, Any]:
        """The overhead of the drive that just ended (its second scrape now), or why not."""
        try:
            after = scrape_all(engines, self.connector.scrape)
            found = measure_overhead(
                engines, before, after, log, wall_seconds=wall, concurrency=concurrency
            )
        except OverheadError as err:
            return overhead_fields(err)
        return overhead_fields(found)

    def _previous_metrics(self, profile: ProfileName) -> ParityMetrics | None:
        """Metrics of the last passing check, when it judged the same kind of change.

        A regression is a worsening against a comparable check: a previous check under
        another profile (a migration, say, against a kernel update) measured a different
        change, and its figures are no baseline for this one.
        """
        name = self.options.previous_report
        if name is None:
            return None
        config_map = self._api_call(lambda: self.api.config_map(name))
        if config_map is None:
            _say(f"previous report {name} not found; no regression test")
            return None
        documents = read_report(config_map.get("data"), config_map.get("binaryData"))
        try:
            document = json.loads(documents["result.json"])
            if document.get("status") != VerdictStatus.PASSED.value:
                return None
            if document.get("profile") != profile.value:
                _say(
                    f"previous passing check ran under profile {document.get('profile')}, this one "
                    f"under {profile.value}; no regression test"
                )
                return None
            metrics = ParityMetrics.model_validate(document["result"]["metrics"])
        except (KeyError, ValueError, ValidationError) as err:
            _say(f"previous report {name} unreadable ({err}); no regression test")
            return None
        _say(f"regression test against the last passing check ({name})")
        return metrics

    def _write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference:
        try:
            data = build_report_data(document, html)
        except ReportTooLargeError as err:
            raise CheckEndedError("ReportTooLarge", str(err)) from err
        name = report_name(self.name)
        owner = {
            "apiVersion": self.check["apiVersion"],
            "kind": self.check["kind"],
            "name": self.name,
            "uid": self.check["metadata"]["uid"],
            "controller": True,
        }
        self._api_call(
            lambda: self.api.write_report(
                name,
                data=data.data,
                binary_data=data.binary_data,
                labels=child_labels(self.name, ROLE_REPORT),
                owner=owner,
            )
        )
        for note in data.trimmed:
            _say(f"report: {note}")
        key = (
            REPORT_HTML_KEY
            if REPORT_HTML_KEY in data.data
            else next(iter([*data.data, *data.binary_data]))
        )
        return ConfigMapKeyReference(name=name, key=key)

    # -- load, performance and shadow (runner/load.py, runner/shadow.py) ------------------

    def _load(
        self,
        spec: ParityCheckSpec,
        baseline: SideTarget,
        candidate: SideTarget,
        *,
        kept: list[PromptRecord],
        metas: tuple[RecordMeta, RecordMeta],
        gate: Gate,
    ) -> LoadOutcome | None:
        if spec.load is None and spec.performance is None:
            return None
        try:
            return run_load(spec, baseline, candidate, kept=kept, metas=metas, gate=gate, say=_say)
        except SideUnavailableError as err:
            raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
        except (SideAnswerError, ParityInputError) as err:
            raise CheckEndedError(reasons.CHECK_COULD_NOT_MEASURE, str(err)) from err

    def _shadow(self, spec: ParityCheckSpec) -> int:
        try:
            run_shadow(_ShadowSteps(self), spec)
        except ShadowError as err:
            if err.retry:
                raise RetryableRunError(err.reason, str(err)) from err
            raise CheckEndedError(err.reason, str(err)) from err
        return EXIT_DONE

    # -- status writes --------------------------------------------------------------------

    def _start_time(self) -> dict[str, str]:
        if (self.check.get("status") or {}).get("startTime"):
            return {}
        return {"startTime": self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")}

    def _mark_running(self, total: int) -> bool:
        """Phase Running, unless the check ended meanwhile (then False: nothing to do)."""

        def mark() -> bool:
            phase = (self.check.get("status") or {}).get("phase")
            if is_check_terminal(phase):
                _say(f"check ended ({phase}) before the runner started; nothing to do")
                return False
            fields = {
                "phase": "Running",
                "observedGeneration": self.generation,
                "progress": {"done": 0, "total": total},
                **self._start_time(),
            }
            version = self.check["metadata"].get("resourceVersion")
            self.check = self.api.patch_check_status(self.name, fields, resource_version=version)
            return True

        def reread() -> None:
            self.check = self.api.get_check(self.name)

        try:
            return retry_call(mark, on_conflict=reread)
        except ConflictError as err:
            raise RetryableRunError("ApiConflict", f"status kept changing: {err}") from err
        except KubeError as err:
            raise _api_failure(err) from err

    def _patch(self, fields: Mapping[str, Any]) -> None:
        updated = self._api_call(lambda: self.api.patch_check_status(self.name, fields))
        if updated:
            self.check = updated

    def _finish(self, fields: Mapping[str, Any]) -> bool:
        """Write a terminal status unless the check already ended; False if it had."""
        written = self._api_call(lambda: write_terminal_status(self.api, self.name, fields))
        if not written:
            _say("check already ended; result not written")
        return written

    def end_in_error(self, reason: str, message: str) -> int:
        try:
            if not self.check:
                self.check = self._get()
            fields = st.error_status(
                message,
                reason,
                status=self.check.get("status") or {},
                generation=self.check.get("metadata", {}).get("generation"),
                at=self.clock(),
            )
            self._finish(fields)
        except RetryableRunError as err:
            _say(f"could not write the Error status: {err}")
            return EXIT_RETRY
        return EXIT_DONE

    def record_attempt_failure(self, reason: str, message: str) -> None:
        current: dict[str, Any] = {}

        def record() -> None:
            nonlocal current
            current = self.api.get_check(self.name)
            conditions = st.runner_error_conditions(
                current.get("status") or {},
                reason,
                message,
                generation=current["metadata"].get("generation"),
                at=self.clock(),
            )
            self.api.patch_check_status(
                self.name,
                {"conditions": conditions},
                resource_version=current["metadata"].get("resourceVersion"),
            )

        try:
            retry_call(record)
        except KubeError as err:
            _say(f"could not record the failure in the status: {err}")

    # -- API plumbing ---------------------------------------------------------------------

    def _get(self) -> dict[str, Any]:
        return self._api_call(lambda: self.api.get_check(self.name))

    def _api_call(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except KubeError as err:
            raise _api_failure(err) from err


class _ShadowSteps:
    """What runner/shadow.py uses of a runner (`runner.shadow.RunnerSteps`)."""

    def __init__(self, runner: _Runner) -> None:
        self._runner = runner
        self.name = runner.name
        self.check = runner.check

    @property
    def namespace(self) -> str:
        return self._runner.api.namespace

    def mark_running(self, total: int) -> bool:
        return self._runner._mark_running(total)

    def resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]:
        baseline, candidate = self._runner._resolve(spec, ("baseline", "candidate"))
        return baseline, candidate

    def health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        self._runner._health(baseline, candidate)

    def meta(self, target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
        return _meta(target, suite, asked)

    def progress(self, done: int, total: int) -> None:
        _say(f"progress {done}/{total}")
        self._runner._patch({"progress": {"done": done, "total": total}})

    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        api = self._runner.api
        service = self._runner._api_call(lambda: api.service(name))
        slices = self._runner._api_call(lambda: api.endpoint_slices(name))
        return service, slices

    def write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference:
        return self._runner._write_report(document, html)

    def finish(
        self,
        verdict: Judgement,
        baseline: SideTarget,
        candidate: SideTarget,
        report: ConfigMapKeyReference,
        extra: Mapping[str, Any],
    ) -> None:
        runner = self._runner
        _say(f"verdict {verdict.phase.value}: {verdict.summary}")
        binding = st.Binding(
            spec_digest=st.spec_digest(runner.check.get("spec") or {}),
            generation=runner.generation,
            baseline_revision=baseline.revision,
            candidate_revision=candidate.revision,
        )
        fields = st.verdict_status(
            verdict, binding, status=runner.check.get("status") or {}, report=report,
            at=runner.clock(),
        )  # fmt: skip
        runner._finish({**fields, **extra})


def _with_load(
    judged: Judgement, load: LoadOutcome | None, document: dict[str, Any]
) -> tuple[Judgement, LoadOutcome | None]:
    """The suite's judgement with the load levels' and performance's folded in (the worst
    wins), and the report document with their figures."""
    if load is None:
        return judged, None
    judged = combined(judged, load.judgements, metrics=load.metrics)
    document["status"] = judged.phase.value
    document |= load.document
    _say(f"with load and performance: {judged.phase.value}")
    return judged, load


def _api_failure(err: KubeError) -> Exception:
    """The fail-closed class of an API error: refused requests end the check, the rest retry."""
    if isinstance(err, RetriableKubeError):
        return RetryableRunError("ApiUnavailable", str(err))
    if isinstance(err, ForbiddenError) or err.status == 401:
        return CheckEndedError("Forbidden", f"the runner's ServiceAccount may not: {err}")
    if isinstance(err, NotFoundError):
        return CheckEndedError("NotFound", str(err))
    return CheckEndedError("ApiRefused", str(err))


def _meta(target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
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


def _revision_changes(baseline: SideTarget, candidate: SideTarget) -> list[str] | None:
    """What the candidate revision changes, one line each; None unless both are revisions.

    Environment values are not shown: a report is read more widely than the spec.
    """
    if baseline.revision_spec is None or candidate.revision_spec is None:
        return None
    lines = []
    for change in revision_changes(baseline.revision_spec, candidate.revision_spec):
        if change.path.startswith("engine.env."):
            lines.append(f"{change.path}: changed")
        else:
            lines.append(change.describe())
    return lines


def _side_summary(target: SideTarget) -> dict[str, Any]:
    summary = asdict(target)
    summary.pop("effective_config", None)
    summary.pop("deployment_uid", None)
    return {to_camel(k): v for k, v in summary.items() if v is not None}


def main_entry(
    api: RunnerApi, name: str, options: RunOptions, connector: Connector | None = None
) -> int:
    """For the CLI: run, and turn an unexpected crash into a retry (the traceback is logged)."""
    try:
        return run_check(api, name, options, connector=connector)
    except Exception:  # noqa: BLE001 - a crash must never pass for a verdict; the Job retries
        import traceback

        traceback.print_exc(file=sys.stdout)
        _Runner(api, name, options, connector or Connector(), st.now).record_attempt_failure(
            "RunnerCrashed", f"runner crashed: {traceback.format_exc(limit=3)[-2000:]}"
        )
        return EXIT_RETRY
