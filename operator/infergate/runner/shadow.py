"""A `source: shadow` check: judge the canary on live requests copied by the mirror.

The runner resolves both sides as for a suite (their revisions pinned, their record
metadata for the hygiene checks), opens a session on every ready pod of the
deployment's mirror (`<name>-mirror`, port `control`), shows the scored count (summed
over the pods) as the check's progress, and at `minRequests` scored copies (or when
`windowSeconds` ran out) takes each pod's scored pairs. The pairs of every pod are
compared in one comparison (`runner.shadow_pool`): every copy teacher-forced on the
stable's answer, and the greedy copies token by token too, so the profile's evidence
floor is met by all mirror pods together, and judged with the check's thresholds
(hidden-state limits left out: nothing here has hidden states) as
`runner.shadow_judge` says.

The mirror's Service must be controlled by the candidate's InferenceDeployment (the uid
read when the sides were resolved), and only EndpointSlices the cluster published for it
are read: a Service or slice someone else made could point the runner at a "mirror"
that reports whatever its maker likes. A Service not ours ends the check in Error
(`SideObjectNotOurs`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from infergate.api.base import INFERENCE_DEPLOYMENT_KIND
from infergate.api.common import ConfigMapKeyReference
from infergate.api.parity_check import HiddenStates, ParityCheckSpec
from infergate.api.shadow import ShadowSettings, ShadowStatus
from infergate.parity.calibrated import DerivedLimits
from infergate.parity.fingerprints import run_fingerprints
from infergate.parity.gate_limits import with_limits
from infergate.parity.metrics import ParityResult
from infergate.parity.profiles import Gate, ProfileChoiceError, plan_gate
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import Thresholds
from infergate.plan import reasons
from infergate.plan.check.status import Judgement
from infergate.plan.ownership import Controller, not_controlled_by
from infergate.render.mirror import mirror_name
from infergate.runner.endpoints import (
    EndpointResolutionError,
    ignored_note,
    ready_endpoints,
    trusted_slices,
)
from infergate.runner.report_page import shadow_page
from infergate.runner.shadow_judge import judge_results
from infergate.runner.shadow_pool import PoolSpec, pair_budget, response_limit
from infergate.runner.sides import SideTarget
from infergate.suite import Suite

SHADOW_SUITE = "shadow"
POLL_SECONDS = 2.0
_TIMEOUT = 30.0


class ShadowError(RuntimeError):
    """The mirror cannot be used for this check; `retry` says whether another attempt may help."""

    def __init__(self, reason: str, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.reason, self.retry = reason, retry


class RunnerSteps(Protocol):
    """What the shadow flow uses of the runner's own steps (`runner.modes`)."""

    name: str
    check: dict[str, Any]

    @property
    def namespace(self) -> str: ...

    def mark_running(self, total: int) -> bool: ...

    def resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]: ...

    def health(self, baseline: SideTarget, candidate: SideTarget) -> None: ...

    def meta(self, target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta: ...

    def limits(
        self, gate: Gate, metas: tuple[RecordMeta, RecordMeta], baseline: SideTarget,
        explicit: Thresholds,
    ) -> DerivedLimits: ...  # fmt: skip

    def progress(self, done: int, total: int) -> None: ...

    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]: ...

    def write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference: ...

    def finish(
        self, verdict: Judgement, baseline: SideTarget, candidate: SideTarget,
        report: ConfigMapKeyReference, extra: Mapping[str, Any],
    ) -> None: ...  # fmt: skip


def without_hidden(thresholds: Thresholds) -> Thresholds:
    """The thresholds less every hidden-state limit (served answers have none)."""
    return thresholds.model_copy(
        update={name: None for name in type(thresholds).model_fields if "hidden" in name}
    )


@dataclass
class MirrorSessions:
    """The control API of every mirror pod, one session each."""

    urls: Sequence[str]
    session: str
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=_TIMEOUT))

    def open(self, body: Mapping[str, Any]) -> None:
        for url in self.urls:
            answer = self.http.post(f"{url}/mirror/sessions", json=dict(body))
            if answer.status_code not in (200, 201):
                raise ShadowError(
                    reasons.CHECK_SIDE_UNREACHABLE,
                    f"mirror {url} refused the session: HTTP {answer.status_code}: "
                    f"{answer.text[:300]}",
                    retry=answer.status_code >= 500,
                )

    def counts(self) -> list[dict[str, Any]]:
        found = []
        for url in self.urls:
            answer = self.http.get(f"{url}/mirror/sessions/{self.session}")
            if answer.status_code != 200:
                raise ShadowError(
                    reasons.CHECK_SIDE_UNREACHABLE,
                    f"mirror {url} lost the session (HTTP {answer.status_code}): restarted?",
                    retry=True,
                )
            found.append(answer.json())
        return found

    def results(self, limit: int) -> list[Any]:
        """Every pod's result document, each read up to `limit` bytes."""
        out = []
        for url in self.urls:
            path = f"{url}/mirror/sessions/{self.session}/result"
            with self.http.stream("GET", path, timeout=_TIMEOUT * 10) as answer:
                if answer.status_code != 200:
                    raise ShadowError(
                        reasons.CHECK_SIDE_UNREACHABLE,
                        f"mirror {url} gave no result (HTTP {answer.status_code}): restarted?",
                        retry=True,
                    )
                body = bytearray()
                for chunk in answer.iter_bytes():
                    body.extend(chunk)
                    if len(body) > limit:
                        raise ShadowError(
                            reasons.CHECK_SIDE_UNREACHABLE,
                            f"mirror {url}: its result is larger than {limit} bytes",
                            retry=False,
                        )
            try:
                out.append(json.loads(body))
            except ValueError as err:
                raise ShadowError(
                    reasons.CHECK_SIDE_UNREACHABLE,
                    f"mirror {url}: its result is not JSON: {err}",
                    retry=True,
                ) from err
        return out

    def close(self) -> None:
        for url in self.urls:
            # A session left behind is closed by the mirror once nobody asks about it.
            with contextlib.suppress(httpx.HTTPError):
                self.http.delete(f"{url}/mirror/sessions/{self.session}")
        self.http.close()


def mirror_urls(
    service: Mapping[str, Any] | None,
    slices: list[dict[str, Any]],
    name: str,
    *,
    owner: Controller,
) -> list[str]:
    """Control URLs of every ready mirror pod, read from the trusted slices of a Service
    `owner` controls."""
    if service is None:
        raise ShadowError(
            reasons.CHECK_SIDE_UNREACHABLE,
            f"Service {name} does not exist: set spec.rollout.mirror on the deployment",
            retry=True,
        )
    refused = not_controlled_by(service, owner, kind="Service")
    if refused is not None:
        raise ShadowError(
            reasons.CHECK_SIDE_OBJECT_NOT_OURS,
            f"mirror: {refused}; it is not read",
            retry=False,
        )
    trusted, ignored = trusted_slices(service, slices)
    try:
        urls = [e.url for e in ready_endpoints(service, trusted, "control")]
    except EndpointResolutionError as err:
        raise ShadowError(reasons.CHECK_SIDE_UNREACHABLE, str(err), retry=True) from err
    if not urls:
        message = f"Service {name} has no ready mirror pod{ignored_note(ignored)}"
        raise ShadowError(reasons.CHECK_SIDE_UNREACHABLE, message, retry=True)
    return urls


def run_shadow(
    runner: RunnerSteps,
    spec: ParityCheckSpec,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Collect, judge and write a shadow check (errors are `ShadowError`).

    The runner's own steps mark the check running, resolve and health-check both
    sides; then the gate is planned on their metadata, the mirror pods are found and
    asked for a session, their scored copies collected and judged pooled, and the
    report and the verdict written.
    """
    settings = spec.shadow or ShadowSettings()
    if not runner.mark_running(settings.min_requests):
        return
    served = spec.model_copy(update={"hidden_states": HiddenStates(enabled=False)})
    baseline, candidate = runner.resolve(served)
    runner.health(baseline, candidate)
    gate, metas = _plan_gate(runner, spec, baseline, candidate)
    # The baseline revision's kept noise sets the limits here as in a suite check, and a
    # model that needs its own calibration and has none is Inconclusive here too.
    derived = runner.limits(gate, metas, baseline, spec.effective_thresholds())
    gate = with_limits(gate, derived)
    deployment = candidate.deployment
    if deployment is None or candidate.revision is None or candidate.deployment_uid is None:
        raise ShadowError(
            reasons.CHECK_INVALID,
            "a shadow check's candidate must be a revision of an InferenceDeployment with a mirror",
            retry=False,
        )
    service_name = mirror_name(deployment)
    service, slices = runner.mirror_service(service_name)
    session_id = f"{runner.namespace}/{runner.name}"
    owner = Controller(INFERENCE_DEPLOYMENT_KIND, deployment, candidate.deployment_uid)
    urls = mirror_urls(service, slices, service_name, owner=owner)
    sessions = MirrorSessions(urls, session_id)
    pool = PoolSpec(
        session=session_id,
        candidate_revision=candidate.revision,
        baseline=metas[0],
        candidate=metas[1],
        thresholds=without_hidden(gate.thresholds),
        pair_bytes_per_pod=pair_budget(len(urls)),
        allowed_config_differences=tuple(sorted(gate.expected_differences)),
        disabled=dict(gate.disabled),
        store_prompts=settings.store_prompts,
        fingerprints=spec.fingerprints,
        limits=gate.limits,
        calibration=derived,
    )
    body = {
        "id": session_id,
        "candidateRevision": candidate.revision,
        "model": candidate.model,
        "sampleRate": settings.sample_rate,
        "maxRequestsPerSecond": settings.max_requests_per_second,
        "maxQueue": settings.max_queue,
        "windowSeconds": settings.window_seconds,
        "storePrompts": settings.store_prompts,
        "topLogprobs": spec.sampling.top_logprobs,
        "baseline": metas[0].model_dump(mode="json"),
        "candidate": metas[1].model_dump(mode="json"),
        "maxPairBytes": pool.pair_bytes_per_pod,
    }
    results = _collect(runner, sessions, body, settings, pool, clock=clock, sleep=sleep)
    verdict, shown, totals = judge_results(
        results, settings, pool, profile=gate.profile.value, warn=gate.warn
    )
    _write(runner, (baseline, candidate), gate, settings, (verdict, shown, totals))


def _plan_gate(
    runner: RunnerSteps, spec: ParityCheckSpec, baseline: SideTarget, candidate: SideTarget
) -> tuple[Gate, tuple[RecordMeta, RecordMeta]]:
    """The gate the copies are judged under, and both sides' record metadata."""
    suite = Suite(SHADOW_SUITE, ())
    # What the runner asks of both sides: the live requests' own sampling is theirs, the
    # scoring's (top-k) is the check's.
    asked = run_fingerprints(
        suite_digest=suite.digest(),
        max_tokens=spec.sampling.max_tokens,
        temperature=spec.sampling.temperature,
        top_logprobs=spec.sampling.top_logprobs,
        seed=spec.sampling.seed,
    )
    meta_b, meta_c = runner.meta(baseline, suite, asked), runner.meta(candidate, suite, asked)
    try:
        gate = plan_gate(
            meta_b,
            meta_c,
            profile=spec.profile,
            explicit=spec.effective_thresholds(),
            hidden_states=False,
        )
    except ProfileChoiceError as err:
        raise ShadowError(reasons.CHECK_INVALID, str(err), retry=False) from err
    return gate, (meta_b, meta_c)


def _collect(
    runner: RunnerSteps,
    sessions: MirrorSessions,
    body: Mapping[str, Any],
    settings: ShadowSettings,
    pool: PoolSpec,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> list[Any]:
    """Every mirror pod's result, taken at `minRequests` scored copies or at the window's
    end; the sessions are closed whatever happens."""
    try:
        try:
            sessions.open(body)
            end = clock() + settings.window_seconds
            scored = 0
            while True:
                counts = sessions.counts()
                scored = sum(int(c.get("scored") or 0) for c in counts)
                runner.progress(min(scored, settings.min_requests), settings.min_requests)
                if scored >= settings.min_requests or clock() >= end:
                    break
                sleep(POLL_SECONDS)
            return sessions.results(response_limit(pool.pair_bytes_per_pod))
        except httpx.HTTPError as err:
            raise ShadowError(
                reasons.CHECK_SIDE_UNREACHABLE, f"mirror: {type(err).__name__}: {err}", retry=True
            ) from err
    finally:
        sessions.close()


def _write(
    runner: RunnerSteps,
    sides: tuple[SideTarget, SideTarget],
    gate: Gate,
    settings: ShadowSettings,
    judged: tuple[Judgement, ParityResult | None, ShadowStatus],
) -> None:
    """The report, then the verdict with the copies' counts."""
    verdict, shown, totals = judged
    profile, why = gate.profile, gate.reason
    document: dict[str, Any] = {
        "check": {"namespace": runner.namespace, "name": runner.name},
        "status": verdict.phase.value,
        "source": "shadow",
        "profile": profile.value,
        "profileReason": why,
        "shadow": totals.model_dump(mode="json", by_alias=True),
        "summary": verdict.summary,
        "result": shown.model_dump(mode="json", by_alias=True) if shown is not None else None,
    }
    html = shadow_page(shown, f"{profile.value} ({why})", verdict.summary)
    report = runner.write_report(document, html)
    runner.finish(
        verdict,
        *sides,
        report,
        {
            "shadow": totals.to_kube(),
            "progress": {
                "done": min(totals.scored, settings.min_requests),
                "total": settings.min_requests,
            },
        },
    )
