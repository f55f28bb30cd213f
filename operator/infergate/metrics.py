"""Prometheus metrics of the operator, served on `/metrics`, and its readiness on `/readyz`.

One registry per process (prometheus_client's default). Label values are
object names and closed sets of reasons, so cardinality grows with the number
of InferenceDeployments, not with time.
"""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import Counter, Gauge, Histogram, Info, make_wsgi_app

from infergate import __version__
from infergate.api.enums import DeploymentPhase, VerdictOutcome
from infergate.plan import reasons

# One series at 1 whatever the scrape job is called: alerts find the operator by this
# metric's name, not by a job label that fullnameOverride or annotation scraping changes.
BUILD_INFO = Info(
    "infergate_build",
    "1, labelled with the operator's version and the Python it runs on.",
)
BUILD_INFO.info({"version": __version__, "python": platform.python_version()})

ROLLOUT_PHASE = Gauge(
    "infergate_rollout_phase",
    "1 for the rollout phase an InferenceDeployment is in, 0 for the others.",
    ["namespace", "name", "phase"],
)
REVISIONS = Gauge(
    "infergate_revisions",
    "Revisions an InferenceDeployment keeps in its history.",
    ["namespace", "name"],
)
CONDITION = Gauge(
    "infergate_deployment_condition",
    "1 for each condition of an InferenceDeployment in its current status (True, False or "
    "Unknown), 0 for the other two; alerts read ConfigDrifted, Degraded and the like from it.",
    ["namespace", "name", "type", "status"],
)
PROMOTIONS = Counter(
    "infergate_promotions_total",
    "Canary revisions promoted to stable, by reason (ParityPassed, ByHand, RollbackByHand).",
    ["namespace", "name", "reason"],
)
ROLLBACKS = Counter(
    "infergate_rollbacks_total",
    "Canary revisions rolled back, by reason (ParityFailed, ParityError, "
    "ProgressDeadlineExceeded, Aborted, RollbackByHand).",
    ["namespace", "name", "reason"],
)
PARITY_VERDICTS = Counter(
    "infergate_parity_verdicts_total",
    "Parity verdicts observed for canaries, by outcome (Passed, Failed, Error, Inconclusive).",
    ["namespace", "name", "outcome"],
)
PARITY_METRIC = Gauge(
    "infergate_parity_metric",
    "Headline figures of the latest parity verdict of an InferenceDeployment's canary "
    "(the ParityCheck's status.metrics: tokenMatchRate, meanKl, hiddenCosineP1, ...), by metric.",
    ["namespace", "name", "metric"],
)
DRIFT_DETECTED = Gauge(
    "infergate_drift_detected",
    "1 while an InferenceDeployment's drift watch finds its stable revision drifted from its "
    "golden record (Drifted=True), 0 otherwise; absent without rollout.parity.watch.",
    ["namespace", "name"],
)
DRIFT_RUNS = Counter(
    "infergate_drift_runs_total",
    "Drift runs of stable revisions that ended, by outcome (Passed: no drift, Failed: drift, "
    "Inconclusive, Error).",
    ["namespace", "name", "outcome"],
)
RECONCILE_DURATION = Histogram(
    "infergate_reconcile_duration_seconds",
    "Time of one reconcile of an InferenceDeployment (gather, decide, write), by result.",
    ["result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_STEP = Histogram(
    "infergate_reconcile_step_seconds",
    "Where an InferenceDeployment reconcile's time goes, by step: queued (due until started: "
    "the cap on reconciles at once), lock (waiting for the same deployment's reconcile in "
    "flight), read (the object from the API), write (decide, write status, children, checks).",
    ["step"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LEADER = Gauge(
    "infergate_leader",
    "1 while this operator replica holds the leader Lease and acts, 0 while it follows.",
)
API_REQUESTS = Counter(
    "infergate_api_requests_total",
    "Requests the operator's reconciles made to the Kubernetes API server (kopf's watches "
    "not included), by verb and resource: near zero while nothing changes.",
    ["verb", "resource"],
)
API_REQUEST_DURATION = Histogram(
    "infergate_api_request_duration_seconds",
    "Time of one request of the operator's reconciles to the API server, answer read, by verb "
    "and resource.",
    ["verb", "resource"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
API_ERRORS = Counter(
    "infergate_api_errors_total",
    "Failed requests to the Kubernetes API server, by verb, resource and HTTP status "
    "(0: no answer).",
    ["verb", "resource", "code"],
)


# The metric labels each deployment's parity gauge carries now (to drop them on replace).
_PARITY_SHOWN: dict[tuple[str, str], set[str]] = {}
_CONDITIONS_SHOWN: dict[tuple[str, str], set[str]] = {}

# Every label value a deployment's counters can take, created at 0 when the deployment is
# first seen. A counter series that appears at 1 shows no increase() in Prometheus, so the
# first verdict, promotion or rollback of a deployment would be missing from the
# dashboard's rate panels and from the alerts.
_PROMOTION_REASONS = (
    reasons.PROMOTION_AUTOMATIC,
    reasons.PROMOTION_BY_HAND,
    reasons.ROLLBACK_BY_HAND,
)
_ROLLBACK_REASONS = (
    reasons.ROLLBACK_PARITY_FAILED,
    reasons.ROLLBACK_PARITY_ERROR,
    reasons.ROLLBACK_DEADLINE,
    reasons.ROLLBACK_ABORTED,
    reasons.ROLLBACK_BY_HAND,
    reasons.ROLLBACK_DRIFT,
)
_VERDICT_OUTCOMES = tuple(o.value for o in VerdictOutcome if o is not VerdictOutcome.PENDING)
_COUNTED: set[tuple[str, str]] = set()


def _initialise_counters(namespace: str, name: str) -> None:
    if (namespace, name) in _COUNTED:
        return
    for reason in _PROMOTION_REASONS:
        PROMOTIONS.labels(namespace, name, reason)
    for reason in _ROLLBACK_REASONS:
        ROLLBACKS.labels(namespace, name, reason)
    for outcome in _VERDICT_OUTCOMES:
        PARITY_VERDICTS.labels(namespace, name, outcome)
        DRIFT_RUNS.labels(namespace, name, outcome)
    _COUNTED.add((namespace, name))


def record_phase(namespace: str, name: str, phase: DeploymentPhase, revisions: int) -> None:
    """Set the phase gauges (one 1, the rest 0) and the revision count of a deployment.

    The first time a deployment is seen, its counters start at 0 for every reason.
    """
    _initialise_counters(namespace, name)
    for candidate in DeploymentPhase:
        ROLLOUT_PHASE.labels(namespace, name, candidate.value).set(
            1.0 if candidate is phase else 0.0
        )
    REVISIONS.labels(namespace, name).set(revisions)


def record_conditions(namespace: str, name: str, conditions: Iterable[tuple[str, str]]) -> None:
    """Set the condition gauges from (type, status) pairs: one 1 per type, the rest 0.

    A condition type the status no longer has is dropped, so no stale True lingers.
    """
    current = dict(conditions)
    for kind in _CONDITIONS_SHOWN.get((namespace, name), set()) - set(current):
        _forget_condition(namespace, name, kind)
    for kind, status in current.items():
        for candidate in ("True", "False", "Unknown"):
            CONDITION.labels(namespace, name, kind, candidate).set(
                1.0 if candidate == status else 0.0
            )
    _CONDITIONS_SHOWN[namespace, name] = set(current)


def _forget_condition(namespace: str, name: str, kind: str) -> None:
    for candidate in ("True", "False", "Unknown"):
        with contextlib.suppress(KeyError):
            CONDITION.remove(namespace, name, kind, candidate)


def record_outcomes(namespace: str, name: str, outcomes: Iterable[tuple[str, str]]) -> None:
    """Count promotions, rollbacks and verdicts given as (kind, reason) pairs."""
    _initialise_counters(namespace, name)
    counters = {
        "promotion": PROMOTIONS,
        "rollback": ROLLBACKS,
        "verdict": PARITY_VERDICTS,
        "drift": DRIFT_RUNS,
    }
    for kind, reason in outcomes:
        counters[kind].labels(namespace, name, reason).inc()


def record_drift(namespace: str, name: str, drifted: bool | None) -> None:
    """Set the drift gauge (1 drifted, 0 not or not known), or drop it (None: no watch)."""
    if drifted is None:
        with contextlib.suppress(KeyError):
            DRIFT_DETECTED.remove(namespace, name)
        return
    DRIFT_DETECTED.labels(namespace, name).set(1.0 if drifted else 0.0)


def record_parity(namespace: str, name: str, figures: Mapping[str, float]) -> None:
    """Replace a deployment's parity gauges with the figures of its latest verdict.

    Nothing changes while no check has finished with figures. Figures the new verdict
    lacks (no hidden states measured this time, say) are dropped rather than left showing
    an older check's value.
    """
    if not figures:
        return
    for metric in _PARITY_SHOWN.get((namespace, name), set()) - set(figures):
        with contextlib.suppress(KeyError):
            PARITY_METRIC.remove(namespace, name, metric)
    for metric, value in figures.items():
        PARITY_METRIC.labels(namespace, name, metric).set(value)
    _PARITY_SHOWN[namespace, name] = set(figures)


def _forget_parity(namespace: str, name: str) -> None:
    for metric in _PARITY_SHOWN.pop((namespace, name), set()):
        with contextlib.suppress(KeyError):
            PARITY_METRIC.remove(namespace, name, metric)


def forget(namespace: str, name: str) -> None:
    """Drop the gauges of a deleted deployment (counters stay: they are history)."""
    _forget_parity(namespace, name)
    for kind in _CONDITIONS_SHOWN.pop((namespace, name), set()):
        _forget_condition(namespace, name, kind)
    with contextlib.suppress(KeyError):
        for phase in DeploymentPhase:
            ROLLOUT_PHASE.remove(namespace, name, phase.value)
    with contextlib.suppress(KeyError):
        REVISIONS.remove(namespace, name)
    record_drift(namespace, name, None)


READY = threading.Event()
"""Set once kopf has run the startup handlers (settings, the API client's login, leader
election started) and its watches begin; cleared when the process begins to stop."""
READY_PATH = "/readyz"


def readiness(environ: Mapping[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """`/readyz`: 200 while `READY` is set, else 503. Readiness, not liveness: a replica
    starting or stopping is not ready but alive (kopf's `/healthz` on the health port says
    whether its event loop still answers, which is what a restart could fix)."""
    del environ
    if READY.is_set():
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ready\n"]
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"not ready\n"]


def _routes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
    if environ.get("PATH_INFO") == READY_PATH:
        return readiness(environ, start_response)
    return _METRICS_APP(environ, start_response)


_METRICS_APP = make_wsgi_app()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        del format, args


def serve(address: str, port: int) -> None:
    """Serve `/metrics` and `/readyz` on address:port from a background thread."""
    server = make_server(address, port, _routes, _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="infergate-metrics", daemon=True).start()
