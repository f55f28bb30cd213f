"""Soak of the installed operator: a change every few seconds for half an hour, bounded in
time and count, with the operator's memory and the objects it leaves sampled throughout.

The operator is installed as in bench/scale_bench.py (its pod from manifests/, its memory
limit, both controllers on, its requests counted by bench/apiproxy.py). `--deployments`
InferenceDeployments (stable at 0 replicas, canaries at 1 simulated GPU on KWOK, a
revision history of `--history-limit`, so each goes past it many times) are changed one
at a time, round robin, every `--interval` seconds: a new engine seed, so
every change is a new revision. Each change makes a canary; once its ParityCheck
exists, this script writes the check's verdict in its runner's place, as the operator's
ServiceAccount (KWOK pods serve nothing, so no runner could): two of three pass and are
promoted, one of three fails and is rolled back. A deployment still rolling out when its
turn comes is skipped.

Every `--sample-seconds`: the operator's RSS and CPU seconds (its process, found through
its pod), the objects per kind in the namespace, and the operator's API requests. At the
end: RSS over the first and the last `--compare-minutes` (within 10%?), and for each
kind its count after the first window, its maximum and its last count, and its growth
per hour over the second half of the run (a kind that grows without bound shows a
steady slope; one held by a history limit shows none).

Stops by itself after `--minutes` or `--max-changes` changes, whichever comes first.

    make cluster-up && .venv/bin/python bench/soak.py --minutes 30
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from common import (
    DTYPES,
    OPERATOR_NAMESPACE,
    REPLICA_SETS,
    ApiProxy,
    Kubectl,
    OperatorInstall,
    Sampler,
    Watch,
    by_name,
    create_all,
    idep_manifest,
    nodes_for,
    request_rate,
    simulated_gpu_nodes,
)

from infergate.errors import KubeError
from infergate.jsontypes import JSON
from infergate.kube.client import (
    CONFIG_MAPS,
    DEPLOYMENTS,
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    PODS,
    SERVICES,
    KubeClient,
    Resource,
)
from infergate.plan.check.status import spec_digest
from infergate_dev.localcluster.layout import ClusterLayout

NODE_PREFIX = "soak-gpu"
TERMINAL = ("Passed", "Failed", "Inconclusive", "Error")
SETTLED = ("Stable", "RolledBack")
# The label the ParityCheck controller puts on a check's children, value "report" on its
# report ConfigMap.
ROLE_LABEL = "infergate.io/paritycheck-role"
COUNTED: dict[str, Resource] = {
    "inferencedeployments": INFERENCE_DEPLOYMENTS,
    "paritychecks": PARITY_CHECKS,
    "deployments": DEPLOYMENTS,
    "replicasets": REPLICA_SETS,
    "pods": PODS,
    "services": SERVICES,
    "configmaps": CONFIG_MAPS,
    "jobs": Resource("batch", "v1", "jobs", "Job"),
    "roles": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "rolebindings": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "serviceaccounts": Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "endpointslices": Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    "events": Resource("", "v1", "events", "Event"),
}


def _idep_summary(obj: JSON) -> dict[str, Any]:
    status = obj.get("status") or {}
    return {
        "phase": status.get("phase"),
        "observed": status.get("observedGeneration"),
        "generation": (obj.get("metadata") or {}).get("generation"),
    }


def _check_summary(obj: JSON) -> dict[str, Any]:
    return {"phase": (obj.get("status") or {}).get("phase")}


class Counts(threading.Thread):
    """Objects per kind in the namespace, every `interval` seconds."""

    def __init__(self, client: KubeClient, namespace: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.namespace = namespace
        self.interval = interval
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.stopped = threading.Event()

    def once(self) -> None:
        counts: dict[str, int] = {}
        for kind, resource in COUNTED.items():
            try:
                items = self.client.list(resource, self.namespace)
            except KubeError:
                continue
            if kind == "configmaps":
                reports = sum(
                    1
                    for i in items
                    if (i["metadata"].get("labels") or {}).get(ROLE_LABEL) == "report"
                )
                counts["configmaps (reports)"] = reports
                counts["configmaps (other)"] = len(items) - reports
            else:
                counts[kind] = len(items)
        self.samples.append((time.monotonic(), counts))

    def run(self) -> None:
        while not self.stopped.is_set():
            self.once()
            self.stopped.wait(self.interval)


def _window_mean(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    values = [v for t, v in samples if start <= t <= end]
    return float(np.mean(values)) if values else None


def _slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    times = np.array([t for t, _ in points])
    values = np.array([v for _, v in points])
    if np.ptp(times) == 0:
        return None
    slope = float(np.polyfit(times, values, 1)[0])
    return round(slope * 3600, 1)


def summarize(
    rss: list[tuple[float, float]],
    counts: list[tuple[float, dict[str, int]]],
    start: float,
    end: float,
    compare: float,
) -> dict[str, Any]:
    """RSS first vs last window; per kind: after the first window, max, last, slope."""
    first = _window_mean(rss, start, start + compare)
    last = _window_mean(rss, end - compare, end)
    change = (last - first) / first if first and last else None
    kinds = sorted({k for _, c in counts for k in c})
    half = start + (end - start) / 2
    objects = {}
    for kind in kinds:
        series = [(t, float(c.get(kind, 0))) for t, c in counts]
        after_first = [v for t, v in series if t >= start + compare]
        objects[kind] = {
            "after_first_window": int(after_first[0]) if after_first else None,
            "max": int(max(v for _, v in series)),
            "last": int(series[-1][1]),
            "growth_per_hour_second_half": _slope_per_hour([p for p in series if p[0] >= half]),
        }
    return {
        "rss_first_window_mib": round(first / 2**20, 1) if first else None,
        "rss_last_window_mib": round(last / 2**20, 1) if last else None,
        "rss_change": round(change, 3) if change is not None else None,
        "rss_within_10_percent": abs(change) <= 0.10 if change is not None else None,
        "objects": objects,
    }


class Soak:
    def __init__(self, layout: ClusterLayout, args: argparse.Namespace) -> None:
        session = uuid.uuid4().hex[:6]
        self.args = args
        self.namespace = f"soak-{session}"
        self.kubectl = Kubectl(layout, self.namespace)
        self.client = KubeClient.from_environment(str(layout.kubeconfig))
        self.proxy = ApiProxy(layout, layout.root / "bench" / session)
        self.operator = OperatorInstall(self.kubectl, self.namespace, self.proxy)
        self.extra_nodes = nodes_for(args.deployments)
        self.ideps = Watch(
            self.client, INFERENCE_DEPLOYMENTS, self.namespace, by_name,
            latest=_idep_summary, timeout_seconds=300,
        )  # fmt: skip
        self.checks = Watch(
            self.client, PARITY_CHECKS, self.namespace, by_name,
            latest=_check_summary, timeout_seconds=300,
        )  # fmt: skip
        self.counts = Counts(self.client, self.namespace, args.sample_seconds)
        self.sampler: Sampler | None = None
        self.judged: set[str] = set()
        self.verdicts: Counter[str] = Counter()
        self.manifests: dict[str, dict[str, Any]] = {}

    def setup(self) -> None:
        self.kubectl.run("create", "namespace", self.namespace)
        nodes = simulated_gpu_nodes(self.extra_nodes, NODE_PREFIX)
        self.kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(n) for n in nodes))
        self.proxy.start()
        self.operator.install()
        self.operator.wait_leader(240)
        self.sampler = Sampler(self.operator.pids, self.args.sample_seconds)
        if not self.sampler.pids:
            raise RuntimeError("no process of the operator pod found in /proc")
        self.ideps.start()
        self.checks.start()
        self.manifests = {
            f"model-{i:02d}": idep_manifest(
                f"model-{i:02d}",
                DTYPES[0],
                seed=0,
                progress_deadline_seconds=600,
                revision_history_limit=self.args.history_limit,
            )
            for i in range(self.args.deployments)
        }
        create_all(
            self.client, INFERENCE_DEPLOYMENTS, self.namespace, list(self.manifests.values())
        )
        self.ideps.wait_until(
            "every InferenceDeployment Stable",
            lambda latest: (
                sum(1 for s in latest.values() if s["phase"] == "Stable") >= len(self.manifests)
            ),
            600,
        )

    def teardown(self) -> None:
        self.ideps.stopped = self.checks.stopped = True
        self.counts.stopped.set()
        if self.sampler is not None:
            self.sampler.stopped.set()
        if self.args.keep:
            return
        self.operator.uninstall()
        self.proxy.stop()
        self.kubectl.run("delete", "namespace", self.namespace, "--wait=false", check=False)
        names = [f"node/{NODE_PREFIX}-{i:02d}" for i in range(self.extra_nodes)]
        self.kubectl.run("delete", "--ignore-not-found", "--wait=false", *names, check=False)
        self.client.close()

    def judge(self) -> None:
        """Write the verdict of every check that has waited `--verdict-delay` seconds."""
        now = time.monotonic()
        for name, check in self.checks.snapshot().items():
            if name in self.judged or check["phase"] in TERMINAL:
                continue
            if now - self.checks.seen.get(name, now) < self.args.verdict_delay:
                continue
            passed = len(self.judged) % 3 != 2
            try:
                self._write_verdict(name, passed)
            except (KubeError, RuntimeError, subprocess.TimeoutExpired) as error:
                sys.stderr.write(f"[soak] verdict of {name}: {error}\n")
                continue
            self.judged.add(name)
            self.verdicts["Passed" if passed else "Failed"] += 1

    def _write_verdict(self, name: str, passed: bool) -> None:
        """Write a verdict in the runner's place: bound to the spec, generation and revisions
        it judged, as a runner's is. The stable revisions run no pods here, so no check ever
        gets as far as a runner (it waits for its sides) and none has a runner
        ServiceAccount; the paritycheck-status admission policy lets only that account or
        the operator's write a verdict, so the soak writes it as the operator's (the admin
        impersonates it)."""
        body = self.client.get(PARITY_CHECKS, self.namespace, name)
        spec = body["spec"]
        phase = "Passed" if passed else "Failed"
        status = {
            "phase": phase,
            "baselineRevision": (spec.get("baseline") or {}).get("revision"),
            "candidateRevision": (spec.get("candidate") or {}).get("revision"),
            "verdict": {
                "passed": passed,
                "outcome": phase,
                "summary": f"{phase} (written by bench/soak.py in the runner's place)",
                "specDigest": spec_digest(spec),
                "generation": body["metadata"]["generation"],
            },
            "metrics": {"tokenMatchRate": 1.0 if passed else 0.5},
        }
        # A PUT of the status subresource: `kubectl patch` would GET paritychecks/status
        # first, which the operator's least-privilege role does not grant.
        body["status"] = (body.get("status") or {}) | status
        self.kubectl.run(
            "replace", "--raw", PARITY_CHECKS.path(self.namespace, name, "status"), "-f", "-",
            f"--as=system:serviceaccount:{OPERATOR_NAMESPACE}:infergate-operator",
            stdin=json.dumps(body),
        )  # fmt: skip

    def change(self, turn: int) -> bool:
        """Change the deployment whose turn it is, unless it is still rolling out."""
        names = list(self.manifests)
        name = names[turn % len(names)]
        state = self.ideps.snapshot().get(name) or {}
        if state.get("phase") not in SETTLED or state.get("observed") != state.get("generation"):
            return False
        changed = copy.deepcopy(self.manifests[name])
        changed["spec"]["engine"]["seed"] = turn + 1
        self.kubectl.apply([changed])
        self.manifests[name] = changed
        return True

    def run(self) -> dict[str, Any]:
        assert self.sampler is not None  # noqa: S101 - set in setup
        self.sampler.start()
        self.counts.start()
        start = time.monotonic()
        proxy_start = self.proxy.counts()
        end_by = start + self.args.minutes * 60
        changes = skipped = turn = 0
        next_change = start
        while time.monotonic() < end_by and changes < self.args.max_changes:
            self.judge()
            if time.monotonic() >= next_change:
                if self.change(turn):
                    changes += 1
                else:
                    skipped += 1
                turn += 1
                next_change += self.args.interval
            time.sleep(0.5)
        end = time.monotonic()
        self.counts.once()
        self.sampler.once()
        rss = [(s.at, float(s.rss_bytes)) for s in self.sampler.samples if s.at >= start]
        cpu = [s for s in self.sampler.samples if s.at >= start]
        compare = min(self.args.compare_minutes * 60, (end - start) / 3)
        phases = Counter(s["phase"] for s in self.ideps.snapshot().values())
        return {
            "deployments": self.args.deployments,
            "revision_history_limit": self.args.history_limit,
            "minutes": round((end - start) / 60, 1),
            "interval_seconds": self.args.interval,
            "changes": changes,
            "turns_skipped_while_rolling_out": skipped,
            "verdicts_written": dict(self.verdicts),
            "compare_window_minutes": round(compare / 60, 1),
            **summarize(rss, self.counts.samples, start, end, compare),
            "operator_cpu_seconds": round(cpu[-1].cpu_seconds - cpu[0].cpu_seconds, 1)
            if len(cpu) >= 2
            else None,
            "operator_restarts": self.operator.restarts(),
            # The Lease holder's requests (the replica that acts).
            "operator_api_requests": request_rate(
                proxy_start, self.proxy.counts(), pod=self.operator.leader()
            ),
            "phases_at_end": dict(phases),
            "rss_samples_mib": [round(v / 2**20, 1) for _, v in rss],
        }


def markdown(result: dict[str, Any]) -> str:
    window = result["compare_window_minutes"]
    head = (
        f"Soak: {result['minutes']} min, {result['deployments']} deployments (revision history "
        f"limit {result['revision_history_limit']}), a change every "
        f"{result['interval_seconds']} s: {result['changes']} changes "
        f"({result['turns_skipped_while_rolling_out']} turns skipped while rolling out), "
        f"verdicts {result['verdicts_written']}."
    )
    figures = [
        (f"RSS, first {window} min (mean)", f"{result['rss_first_window_mib']} MiB"),
        (f"RSS, last {window} min (mean)", f"{result['rss_last_window_mib']} MiB"),
        ("RSS change (within 10%?)", f"{result['rss_change']} ({result['rss_within_10_percent']})"),
        ("operator CPU seconds", result["operator_cpu_seconds"]),
        ("operator API requests/s", result["operator_api_requests"]["per_second"]),
        ("operator restarts", result["operator_restarts"]),
    ]
    lines = [head, "", "| figure | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in figures]
    lines += ["", "| kind | after first window | max | last | growth/hour, second half |"]
    lines.append("|---|---|---|---|---|")
    for kind, f in result["objects"].items():
        lines.append(
            f"| {kind} | {f['after_first_window']} | {f['max']} | {f['last']} | "
            f"{f['growth_per_hour_second_half']} |"
        )
    return "\n".join(lines) + "\n"


def _on_term(*_: Any) -> NoReturn:
    raise SystemExit(143)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=10)
    parser.add_argument(
        "--history-limit",
        type=int,
        default=2,
        help="spec.revisionHistoryLimit: small, so that each deployment goes past it many times",
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between changes")
    parser.add_argument("--max-changes", type=int, default=1000)
    parser.add_argument("--verdict-delay", type=float, default=3.0)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--compare-minutes", type=float, default=10.0)
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    parser.add_argument("--markdown", type=Path, help="write the markdown tables here")
    parser.add_argument("--keep", action="store_true", help="leave everything for a look")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    layout = ClusterLayout.default()
    crds = sorted((Path(__file__).resolve().parents[1] / "crds").glob("infergate.io_*.yaml"))
    soak = Soak(layout, args)
    soak.kubectl.run("apply", *(f"--filename={path}" for path in crds))
    try:
        soak.setup()
        result = soak.run()
    finally:
        soak.teardown()
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
