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
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from infergate.api.common import ConfigMapKeyReference
from infergate.api.parity_check import ParityCheck, ParityCheckSpec
from infergate.errors import (
    ConflictError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    RetriableKubeError,
)
from infergate.kube.paritycheck_api import write_terminal_status
from infergate.parity.compare import ParityComparison
from infergate.parity.fingerprints import merge_fingerprints, run_fingerprints
from infergate.parity.metrics import ParityMetrics
from infergate.parity.profiles import ProfileChoiceError, plan_gate
from infergate.parity.record import ParityInputError, RecordMeta
from infergate.parity.report import render_report
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import VerdictStatus, decide
from infergate.plan import check_status as st
from infergate.plan import reasons
from infergate.plan.phases import is_check_terminal
from infergate.plan.revision_diff import revision_changes
from infergate.render.check_names import REPORT_HTML_KEY, SIDES, child_labels, report_name
from infergate.retry import retry_call
from infergate.runner.channels import HttpEngineInfo, open_channels, wait_healthy
from infergate.runner.drive import (
    Channels,
    DriveSettings,
    SideAnswerError,
    SideUnavailableError,
    drive_suite,
    measure_prompt,
)
from infergate.runner.report_store import ReportTooLargeError, build_report_data, read_report
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


@dataclass(frozen=True)
class Connector:
    """How the runner talks to engines: over HTTP, or (in unit tests) in process."""

    info: EngineInfo = field(default_factory=HttpEngineInfo)
    open: Callable[[SideTarget, ExitStack, float], Channels] = open_channels
    health: Callable[[list[str], float], None] = wait_healthy


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
        suite = self._suite(spec)
        started = time.monotonic()
        if not self._mark_running(len(suite.prompts)):
            return EXIT_DONE
        baseline, candidate = self._resolve(spec)
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
        meta_b, meta_c = _meta(baseline, suite, asked), _meta(candidate, suite, asked)
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
        self._drive(spec, suite, baseline, candidate, comparison)
        result = comparison.finalize()
        previous = self._previous_metrics(profile)
        verdict = decide(result, gate.warn, previous, spec.effective_regression())
        seconds = time.monotonic() - started
        _say(f"verdict {verdict.status.value} after {seconds:.1f}s")
        for reason in verdict.reasons:
            _say(f"  reason: {reason}")
        changes = _revision_changes(baseline, candidate)
        document = {
            "check": {"namespace": self.api.namespace, "name": self.name},
            "changes": changes,
            "status": verdict.status.value,
            "profile": profile.value,
            "profileReason": why,
            "sides": {s.side: _side_summary(s) for s in (baseline, candidate)},
            "seconds": round(seconds, 2),
            "verdict": verdict.model_dump(mode="json", by_alias=True),
            "result": result.model_dump(mode="json", by_alias=True),
        }
        html = render_report(result, verdict, f"{profile.value} ({why})", changes)
        report = self._write_report(document, html)
        binding = st.Binding(
            spec_digest=st.spec_digest(self.check.get("spec") or {}),
            generation=self.generation,
            baseline_revision=baseline.revision,
            candidate_revision=candidate.revision,
        )
        fields = st.verdict_status(
            judgement(result, verdict, profile.value),
            binding,
            status=self.check.get("status") or {},
            report=report,
            at=self.clock(),
        )
        fields["progress"] = {"done": result.metrics.prompts, "total": len(suite.prompts)}
        self._finish(fields)
        return EXIT_DONE

    # -- steps ----------------------------------------------------------------------------

    def _suite(self, spec: ParityCheckSpec) -> Suite:
        source = spec.suite
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

    def _resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]:
        status = self.check.get("status") or {}
        pinned = {
            "baseline": status.get("baselineRevision"),
            "candidate": status.get("candidateRevision"),
        }
        deadline = time.monotonic() + self.options.wait_for_sides
        while True:
            try:
                targets = [
                    resolve_side(
                        side, self.name, spec, reads=self.api, info=self.connector.info,
                        pinned_revision=pinned[side],
                    )
                    for side in SIDES
                ]  # fmt: skip
                return targets[0], targets[1]
            except SideResolutionError as err:
                if not err.transient:
                    raise CheckEndedError(reasons.CHECK_INVALID, str(err)) from err
                if time.monotonic() > deadline:
                    raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
                _say(f"waiting: {err}")
            except SideUnavailableError as err:
                if time.monotonic() > deadline:
                    raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
                _say(f"waiting: {err}")
            except KubeError as err:
                raise _api_failure(err) from err
            time.sleep(2.0)

    def _health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        urls = [baseline.url, candidate.url]
        urls += [
            t.probe_url for t in (baseline, candidate) if t.probe_url and t.probe_url not in urls
        ]
        try:
            self.connector.health(urls, min(60.0, self.options.wait_for_sides))
        except SideUnavailableError as err:
            raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err

    def _drive(
        self,
        spec: ParityCheckSpec,
        suite: Suite,
        baseline: SideTarget,
        candidate: SideTarget,
        comparison: ParityComparison,
    ) -> None:
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

        with ExitStack() as stack:
            base = self.connector.open(baseline, stack, self.options.request_timeout)
            cand = self.connector.open(candidate, stack, self.options.request_timeout)
            try:
                drive_suite(
                    suite.prompts,
                    lambda prompt: measure_prompt(prompt, base, cand, settings),
                    comparison.add,
                    concurrency=self.options.concurrency,
                    progress=progress,
                )
            except SideUnavailableError as err:
                raise RetryableRunError(reasons.CHECK_SIDE_UNREACHABLE, str(err)) from err
            except (SideAnswerError, ParityInputError) as err:
                raise CheckEndedError(reasons.CHECK_COULD_NOT_MEASURE, str(err)) from err

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
