"""Scale benchmark of the installed operator, side by side with kube-controller-manager.

One run on the local cluster, every figure from it:

- the operator installed as `kubectl apply -k manifests/` installs it (its two replicas
  on the local executor, one acting while it holds the Lease, its ServiceAccount and
  ClusterRoles, its 512Mi memory limit, the default 300 s safety resync, both
  controllers on), watching only this run's namespace; the one change to the install is
  that its pods' in-cluster client dials a counting proxy on loopback
  (bench/apiproxy.py) that forwards every request to the API server, so the operator's
  own requests are counted by verb and resource, and by the pod that sent them: every
  request figure is the Lease holder's (the replica that acts), RSS and CPU too;
- `--deployments` InferenceDeployments (stable at 0 replicas, like the rollout benchmark:
  any number fits; canaries at 1 replica of 1 simulated GPU on KWOK's nodes), and as many
  plain Deployments at 0 replicas in a second namespace as kube-controller-manager's
  reference (pod-template change -> new ReplicaSet);
- enough simulated GPU nodes for `--checks` canaries besides the cluster's own 16 GPUs;
- sequential round: for every `--deployments/--checks`-th deployment (so `--checks` of
  them), change its engine dtype and time apply -> canary Deployment seen by a watch;
  then change the matching plain Deployment's pod template and time apply -> new
  ReplicaSet. Each canary becomes available on KWOK and gets its ParityCheck, whose
  runner cannot start (KWOK pods serve nothing, so the sides never become ready): after
  the round `--checks` checks are active and wait, as the controllers see them;
- idle windows of `--idle-seconds`: before the round (no check) and after it (`--checks`
  checks): the operator's requests per second, per active check per minute, its RSS;
- burst: every plain Deployment changed at once (merge PATCHes, 16 in flight: `kubectl
  apply` sends one object after another and spends seconds on each on a busy machine,
  which would spread a burst of hundreds over many minutes), then every
  InferenceDeployment; timed from the watch seeing each change (and from the first PATCH);
- after the burst, the phases: canaries beyond the simulated GPUs wait Unschedulable;
  the count of deployments each phase shows;
- beside them, as on a shared cluster, `--unrelated` ConfigMaps in the watched namespace
  that infergate does not manage (no infergate label, 2 KiB of data each), created
  before the operator starts, and `--unrelated-churn` updates per second to them for the
  whole run (other controllers' writes): what the operator's watches of built-in kinds
  stream and hold is what its RSS and idle CPU pay for.

Writes JSON (`--out`) and a markdown table (`--markdown`); prints the JSON.

    make cluster-up && .venv/bin/python bench/scale_bench.py --deployments 500 --checks 100
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

from common import (
    DTYPES,
    GPUS_PER_NODE,
    REPLICA_SETS,
    ApiProxy,
    Kubectl,
    OperatorInstall,
    Sampler,
    Timings,
    Watch,
    by_generation,
    by_name,
    canary_name,
    create_all,
    histogram_means,
    histogram_totals,
    host_busy_cores,
    host_cpu,
    idep_manifest,
    metric_sum,
    nodes_for,
    patch_all,
    request_rate,
    rss_summary,
    simulated_gpu_nodes,
)

from infergate.jsontypes import JSON
from infergate.kube.client import (
    CONFIG_MAPS,
    DEPLOYMENTS,
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    KubeClient,
)
from infergate_dev.localcluster.layout import ClusterLayout

CLUSTER_GPUS = 16  # the local cluster's own two simulated GPU nodes
NODE_PREFIX = "bench-gpu"
REF_LABEL = "bench.infergate.io/rev"
UNRELATED_LABEL = "bench.infergate.io/unrelated"
UNRELATED_BYTES = 2048


def unrelated_config_map(index: int) -> dict[str, Any]:
    """A ConfigMap someone else owns: no infergate label, some data."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"unrelated-{index:05d}", "labels": {UNRELATED_LABEL: "yes"}},
        "data": {"payload": f"{index:05d}" * (UNRELATED_BYTES // 5)},
    }


class Churn(threading.Thread):
    """`rate` merge-patches per second to the unrelated ConfigMaps, round robin, until
    stopped: writes by other controllers to objects the operator does not manage."""

    def __init__(self, client: KubeClient, namespace: str, count: int, rate: float) -> None:
        super().__init__(daemon=True, name="churn")
        self.client, self.namespace, self.count, self.rate = client, namespace, count, rate
        self.stopped = threading.Event()
        self.sent = 0

    def run(self) -> None:
        if self.count <= 0 or self.rate <= 0:
            return
        for step in itertools.cycle(range(self.count)):
            if self.stopped.wait(1.0 / self.rate):
                return
            body: JSON = {"metadata": {"annotations": {"bench.infergate.io/touched": str(step)}}}
            with contextlib.suppress(Exception):  # a busy API server: the next one goes on
                self.client.merge_patch(CONFIG_MAPS, self.namespace, f"unrelated-{step:05d}", body)
                self.sent += 1


def reference_deployment(name: str, rev: int) -> dict[str, Any]:
    """A plain Deployment at 0 replicas whose pod template carries `rev`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, REF_LABEL: str(rev)}},
                "spec": {
                    "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.32.0"}],
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [
                        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }


def _by_owner_and_rev(obj: JSON) -> str:
    """A ReplicaSet by its Deployment and the template revision it was made from."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or [{}]
    labels = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    return f"{owners[0].get('name')}@{labels.get(REF_LABEL)}"


def _idep_summary(obj: JSON) -> dict[str, Any]:
    status = obj.get("status") or {}
    progressing: JSON = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
    )
    return {
        "phase": status.get("phase"),
        "reason": progressing.get("reason"),
        "observed": status.get("observedGeneration"),
        "canary": status.get("canaryRevision"),
    }


def _check_summary(obj: JSON) -> dict[str, Any]:
    return {"phase": (obj.get("status") or {}).get("phase")}


def _active_checks(latest: dict[str, Any]) -> int:
    return sum(
        1
        for s in latest.values()
        if s["phase"] not in ("Passed", "Failed", "Inconclusive", "Error")
    )


class Run:
    """One benchmark run: the cluster objects, the watches, the operator and its meters."""

    def __init__(self, layout: ClusterLayout, args: argparse.Namespace) -> None:
        session = uuid.uuid4().hex[:6]
        self.args = args
        self.layout = layout
        self.namespace = f"scale-{session}"
        self.ref_namespace = f"scale-ref-{session}"
        self.kubectl = Kubectl(layout, self.namespace)
        self.ref = Kubectl(layout, self.ref_namespace)
        self.client = KubeClient.from_environment(str(layout.kubeconfig))
        self.proxy = ApiProxy(layout, layout.root / "bench" / session)
        self.operator = OperatorInstall(self.kubectl, self.namespace, self.proxy)
        self.extra_nodes = nodes_for(args.checks)
        watch = 300  # seconds per watch request (a restart re-lists every object)
        self.canaries = Watch(
            self.client, DEPLOYMENTS, self.namespace, by_name, timeout_seconds=watch
        )
        self.ideps = Watch(
            self.client, INFERENCE_DEPLOYMENTS, self.namespace, by_generation,
            latest=_idep_summary, timeout_seconds=watch,
        )  # fmt: skip
        self.checks = Watch(
            self.client,
            PARITY_CHECKS,
            self.namespace,
            by_name,
            latest=_check_summary,
            timeout_seconds=watch,
        )
        self.ref_changes = Watch(self.client, DEPLOYMENTS, self.ref_namespace, by_generation)
        self.ref_sets = Watch(
            self.client, REPLICA_SETS, self.ref_namespace, _by_owner_and_rev, timeout_seconds=watch
        )
        self.churn = Churn(self.client, self.namespace, args.unrelated, args.unrelated_churn)
        self.sampler: Sampler | None = None
        self.started = time.monotonic()
        self.operator_ready_at = 0.0
        self.cpu_start = 0.0
        self.generation: dict[str, int] = {}
        self.ref_generation: dict[str, int] = {}

    # -- setup and teardown -----------------------------------------------------------------

    def setup(self) -> dict[str, Any]:
        self.kubectl.run("create", "namespace", self.namespace)
        self.ref.run("create", "namespace", self.ref_namespace)
        nodes = simulated_gpu_nodes(self.extra_nodes, NODE_PREFIX)
        self.kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(n) for n in nodes))
        unrelated = [unrelated_config_map(i) for i in range(self.args.unrelated)]
        create_all(self.client, CONFIG_MAPS, self.namespace, unrelated)
        self.churn.start()
        self.proxy.start()
        self.operator.install()
        leader = self.operator.wait_leader(240)
        pod = self.operator.pod()
        if pod is None or pod["metadata"]["name"] != leader:
            raise RuntimeError(f"the Lease holder {leader} is not a ready operator pod")
        self.operator_ready_at = time.monotonic()
        self.sampler = Sampler(self.operator.pids, self.args.sample_seconds)
        if not self.sampler.pids:
            raise RuntimeError(f"no process of pod {pod['metadata']['name']} found in /proc")
        first = self.sampler.once()
        self.cpu_start = first.cpu_seconds if first else 0.0
        self.sampler.start()
        for watch in (self.canaries, self.ideps, self.checks, self.ref_changes, self.ref_sets):
            watch.start()
        return {"operator_pod": pod["metadata"]["name"], "operator_pids": self.sampler.pids}

    def teardown(self) -> None:
        for watch in (self.canaries, self.ideps, self.checks, self.ref_changes, self.ref_sets):
            watch.stopped = True
        self.churn.stopped.set()
        if self.sampler is not None:
            self.sampler.stopped.set()
        if self.args.keep:
            return
        self.operator.uninstall()
        self.proxy.stop()
        for namespace in (self.namespace, self.ref_namespace):
            self.kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)
        names = [f"node/{NODE_PREFIX}-{i:02d}" for i in range(self.extra_nodes)]
        self.kubectl.run("delete", "--ignore-not-found", "--wait=false", *names, check=False)
        self.client.close()

    # -- meters -----------------------------------------------------------------------------

    def meter(self) -> dict[str, Any]:
        """What the meters show now: proxy counts, reconciles by result, CPU seconds."""
        try:
            text = self.operator.metrics()
        except OSError as error:  # a starved operator may not answer in time
            sys.stderr.write(f"[scale] operator metrics: {error}\n")
            text = ""
        results = {"ok", "quiet", "gone", "error"}
        assert self.sampler is not None  # noqa: S101 - started in setup
        sample = self.sampler.once()
        return {
            "at": time.monotonic(),
            "leader": self.operator.leader(),
            "proxy": self.proxy.counts(),
            "reconciles": {
                r: metric_sum(text, "infergate_reconcile_duration_seconds_count", result=r)
                for r in results
            }
            if text
            else None,
            "steps": histogram_totals(text, "infergate_reconcile_step_seconds", "step")
            if text
            else None,
            "request_seconds": histogram_totals(
                text, "infergate_api_request_duration_seconds", "verb", "resource"
            )
            if text
            else None,
            "cpu": sample.cpu_seconds if sample else None,
            "host": host_cpu(),
            "load": os.getloadavg()[0],
        }

    def between(self, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        # The requests of the replica that holds the Lease (the one that acts); the other
        # replica only watches and reads the Lease.
        leader = after["leader"] or before["leader"]
        rate = request_rate(before["proxy"], after["proxy"], pod=leader)
        every = request_rate(before["proxy"], after["proxy"])
        reconciles = (
            {r: int(after["reconciles"][r] - before["reconciles"][r]) for r in before["reconciles"]}
            if before["reconciles"] is not None and after["reconciles"] is not None
            else {}
        )
        total = sum(reconciles.values())
        acting = total - reconciles.get("quiet", 0)
        seconds = after["at"] - before["at"]
        cpu = (after["cpu"] or 0.0) - (before["cpu"] or 0.0)
        assert self.sampler is not None  # noqa: S101 - started in setup
        return {
            "api_requests": rate,
            "leader": leader,
            "leader_changed": before["leader"] != after["leader"],
            "api_requests_all_replicas": {
                k: every[k] for k in ("requests", "per_second", "by_verb")
            },
            "inferencedeployment_reconciles": reconciles,
            "requests_per_reconcile": round(rate["requests"] / total, 3) if total else None,
            "requests_per_non_quiet_reconcile": (
                round(rate["requests"] / acting, 2) if acting else None
            ),
            # Where a reconcile's time went: queued behind the cap, the read, the writes; and
            # each kind of request's mean time under this load.
            "reconcile_steps": histogram_means(before["steps"], after["steps"]),
            "api_request_seconds": histogram_means(
                before["request_seconds"], after["request_seconds"]
            ),
            "operator_cpu_seconds": round(cpu, 1),
            "operator_cpu_share_of_one_core": round(cpu / seconds, 3) if seconds else None,
            "operator_rss": rss_summary(self.sampler.between(before["at"], after["at"])),
            "machine_busy_cores": host_busy_cores(before["host"], after["host"]),
            "machine_load_1min_at_end": round(after["load"], 1),
        }

    def idle(self, label: str) -> dict[str, Any]:
        """A window in which nothing is changed by anyone but the controllers."""
        sys.stderr.write(f"[scale] idle window {label}: {self.args.idle_seconds}s\n")
        before = self.meter()
        time.sleep(self.args.idle_seconds)
        return self.between(before, self.meter())

    # -- rounds -----------------------------------------------------------------------------

    def create(self) -> dict[str, dict[str, Any]]:
        manifests = {
            name: idep_manifest(name, DTYPES[0])
            for name in (f"model-{i:03d}" for i in range(self.args.deployments))
        }
        t0 = time.monotonic()
        create_all(self.client, INFERENCE_DEPLOYMENTS, self.namespace, list(manifests.values()))
        references = [reference_deployment(n, 1) for n in manifests]
        create_all(self.client, DEPLOYMENTS, self.ref_namespace, references)
        self.ideps.wait_until(
            "every InferenceDeployment Stable",
            lambda latest: (
                sum(1 for s in latest.values() if s["phase"] == "Stable") >= len(manifests)
            ),
            self.args.setup_timeout,
        )
        self.ref_sets.wait_for({f"{n}@1" for n in manifests}, self.args.setup_timeout)
        sys.stderr.write(f"[scale] {len(manifests)} stable in {time.monotonic() - t0:.0f}s\n")
        self.generation = dict.fromkeys(manifests, 1)
        self.ref_generation = dict.fromkeys(manifests, 1)
        return manifests

    def sequential(self, manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
        step = max(1, len(manifests) // self.args.checks)
        sample = list(manifests)[::step][: self.args.checks]
        operator, reference = Timings(), Timings()
        missed = {"operator": 0, "kube_controller_manager": 0}
        wait = self.args.change_timeout
        for index, name in enumerate(sample):
            changed = copy.deepcopy(manifests[name])
            changed["spec"]["engine"]["dtype"] = DTYPES[1]
            canary = canary_name(changed)
            t0 = time.monotonic()
            self.kubectl.apply([changed])
            t_return = time.monotonic()
            appeared = self.canaries.seen_by({canary}, wait)
            seen = self.ideps.seen_by({f"{name}@2"}, 60)
            if canary in appeared and f"{name}@2" in seen:
                operator.add(t0, seen[f"{name}@2"], appeared[canary], t_return)
            else:
                missed["operator"] += 1
            manifests[name] = changed
            self.generation[name] = 2

            t0 = time.monotonic()
            self.ref.apply([reference_deployment(name, 2)])
            t_return = time.monotonic()
            created = self.ref_sets.seen_by({f"{name}@2"}, wait)
            seen = self.ref_changes.seen_by({f"{name}@2"}, 60)
            if f"{name}@2" in created and f"{name}@2" in seen:
                reference.add(t0, seen[f"{name}@2"], created[f"{name}@2"], t_return)
            else:
                missed["kube_controller_manager"] += 1
            self.ref_generation[name] = 2
            if index % 10 == 9:
                active = _active_checks(self.checks.snapshot())
                sys.stderr.write(
                    f"[scale] sequential: {index + 1}/{len(sample)} at "
                    f"{time.monotonic() - self.started:.0f}s, {active} active checks\n"
                )
        return {
            "sample": len(sample),
            "operator": {**operator.stats(), "not_seen_within_timeout": missed["operator"]},
            "kube_controller_manager": {
                **reference.stats(),
                "not_seen_within_timeout": missed["kube_controller_manager"],
            },
        }

    def burst(self, manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
        names = list(manifests)
        sys.stderr.write(f"[scale] burst at {time.monotonic() - self.started:.0f}s\n")
        # The reference first: kube-controller-manager under the same background (the
        # active checks) before the operator's burst changes what is running.
        template = {"spec": {"template": {"metadata": {"labels": {REF_LABEL: "3"}}}}}
        t0 = time.monotonic()
        ref_answered = patch_all(
            self.client, DEPLOYMENTS, self.ref_namespace, dict.fromkeys(names, template)
        )
        ref_patch_s = time.monotonic() - t0
        created = self.ref_sets.seen_by({f"{n}@3" for n in names}, self.args.burst_timeout)
        ref_keys = {n: f"{n}@{self.ref_generation[n] + 1}" for n in names}
        seen = self.ref_changes.seen_by(set(ref_keys.values()), 60)
        reference = Timings()
        for n in names:
            if f"{n}@3" in created and ref_keys[n] in seen:
                reference.add(t0, seen[ref_keys[n]], created[f"{n}@3"], ref_answered[n])

        changed = {}
        for name, manifest in manifests.items():
            changed[name] = copy.deepcopy(manifest)
            changed[name]["spec"]["engine"]["dtype"] = DTYPES[2]
        canaries = {name: canary_name(m) for name, m in changed.items()}
        dtype = {"spec": {"engine": {"dtype": DTYPES[2]}}}
        before = self.meter()
        t0 = time.monotonic()
        answered = patch_all(
            self.client, INFERENCE_DEPLOYMENTS, self.namespace, dict.fromkeys(names, dtype)
        )
        patch_s = time.monotonic() - t0
        appeared = self.canaries.seen_by(set(canaries.values()), self.args.burst_timeout)
        after = self.meter()
        keys = {n: f"{n}@{self.generation[n] + 1}" for n in names}
        changed_at = self.ideps.seen_by(set(keys.values()), 60)
        operator = Timings()
        for name, canary in canaries.items():
            if canary in appeared and keys[name] in changed_at:
                operator.add(t0, changed_at[keys[name]], appeared[canary], answered[name])
        manifests.update(changed)
        self.generation = {n: g + 1 for n, g in self.generation.items()}
        return {
            "operator": {
                **_from_burst_start(operator.stats()),
                "patches_of_all_s": round(patch_s, 2),
                "canaries_not_seen": len(set(canaries.values()) - set(appeared)),
            },
            "kube_controller_manager": {
                **_from_burst_start(reference.stats()),
                "patches_of_all_s": round(ref_patch_s, 2),
                "replicasets_not_seen": len(names) - len(created),
            },
            "while_the_operator_burst_ran": self.between(before, after),
        }

    def census(self) -> dict[str, Any]:
        """Phases and Progressing reasons once every deployment observed its last change."""
        sys.stderr.write(f"[scale] census at {time.monotonic() - self.started:.0f}s\n")
        self.ideps.wait_until(
            "every InferenceDeployment observed the burst",
            lambda latest: all(
                (s["observed"] or 0) >= self.generation.get(name, 0) for name, s in latest.items()
            ),
            self.args.burst_timeout,
        )
        time.sleep(self.args.settle_seconds)
        with contextlib.suppress(TimeoutError):
            # Canaries whose pods run but whose availability no reconcile has seen yet.
            self.ideps.wait_until(
                "no canary still starting",
                lambda latest: all(s["reason"] != "CanaryStarted" for s in latest.values()),
                120,
            )
        latest = self.ideps.snapshot()
        phases = Counter(s["phase"] for s in latest.values())
        reasons = Counter(f"{s['phase']}/{s['reason']}" for s in latest.values())
        pods = json.loads(self.kubectl.run("get", "pods", "-n", self.namespace, "-o", "json"))
        pod_phases = Counter((p.get("status") or {}).get("phase") for p in pods["items"])
        return {
            "phases": dict(phases),
            "phase_and_progressing_reason": dict(reasons),
            "failed_while_waiting_for_accelerators": reasons.get("Failed/Unschedulable", 0),
            "canary_pods": dict(pod_phases),
            "active_checks": _active_checks(self.checks.snapshot()),
        }


def _from_burst_start(figures: dict[str, Any]) -> dict[str, Any]:
    """A burst starts with its first PATCH, not with a `kubectl apply`; each object's change
    is committed when its PATCH is answered (a bound that holds however far behind the
    bench's own watch falls in a burst: that watch sees every status write too)."""
    renamed = dict(figures)
    renamed["from_burst_start"] = renamed.pop("from_kubectl_apply")
    renamed["from_its_patch_answer"] = renamed.pop("from_kubectl_apply_return")
    return renamed


def _ratio(ours: dict[str, Any], theirs: dict[str, Any], key: str) -> float | None:
    a, b = ours.get(key, {}).get("p99_s"), theirs.get(key, {}).get("p99_s")
    return round(a / b, 2) if a is not None and b else None


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value}{unit}"


def _pair(a: Any, b: Any) -> str:
    return f"{_fmt(a)} / {_fmt(b)}"


def markdown(result: dict[str, Any]) -> str:
    seq, burst = result["sequential"], result["burst"]
    idle0, idle1 = result["idle_without_checks"], result["idle_with_checks"]
    rows = [
        "| figure | operator | kube-controller-manager | ratio (p99) |",
        "|---|---|---|---|",
    ]

    def latency(title: str, ours: dict[str, Any], theirs: dict[str, Any], key: str) -> None:
        a, b = ours.get(key) or {}, theirs.get(key) or {}
        rows.append(
            f"| {title} | median {_fmt(a.get('median_s'), ' s')}, p99 {_fmt(a.get('p99_s'), ' s')}"
            f" | median {_fmt(b.get('median_s'), ' s')}, p99 {_fmt(b.get('p99_s'), ' s')}"
            f" | {_fmt(_ratio(ours, theirs, key))} |"
        )

    n = seq["sample"]
    latency(f"sequential ({n}), from `kubectl apply` start", seq["operator"],
            seq["kube_controller_manager"], "from_kubectl_apply")  # fmt: skip
    latency(f"sequential ({n}), from `kubectl apply` return", seq["operator"],
            seq["kube_controller_manager"], "from_kubectl_apply_return")  # fmt: skip
    latency(f"sequential ({n}), from the watch seeing the change", seq["operator"],
            seq["kube_controller_manager"], "from_change_seen_by_a_watch")  # fmt: skip
    d = result["deployments"]
    latency(f"burst ({d}), from the watch seeing the change", burst["operator"],
            burst["kube_controller_manager"], "from_change_seen_by_a_watch")  # fmt: skip
    latency(f"burst ({d}), from the start of the burst", burst["operator"],
            burst["kube_controller_manager"], "from_burst_start")  # fmt: skip
    latency(f"burst ({d}), from each object's PATCH answered", burst["operator"],
            burst["kube_controller_manager"], "from_its_patch_answer")  # fmt: skip
    census = result["after_burst"]
    seq_w, burst_w = result["during_sequential"], burst["while_the_operator_burst_ran"]
    active = idle1["active_checks"]
    rss = result["operator_rss_run"]
    figures = [
        (f"operator RSS, {d} deployments, 0 checks (mean over the idle window)",
         _fmt(idle0["operator_rss"].get("mean_mib"), " MiB")),
        (f"operator RSS, {d} deployments + {active} active checks",
         _fmt(idle1["operator_rss"].get("mean_mib"), " MiB")
         + " (limit 512Mi: declared, not enforced by the local executor)"),
        ("operator RSS, peak over the run", _fmt(rss.get("max_mib"), " MiB")),
        ("operator API requests/s, idle, 0 checks", _fmt(idle0["api_requests"]["per_second"])),
        (f"operator API requests/s, idle, {active} checks",
         _fmt(idle1["api_requests"]["per_second"])),
        ("API requests per active ParityCheck per minute (idle)",
         _fmt(result["requests_per_active_check_per_minute"])),
        ("API requests per reconcile, sequential round (all / non-quiet)",
         _pair(seq_w["requests_per_reconcile"], seq_w["requests_per_non_quiet_reconcile"])),
        ("API requests per reconcile, burst (all / non-quiet)",
         _pair(burst_w["requests_per_reconcile"], burst_w["requests_per_non_quiet_reconcile"])),
        (f"operator CPU seconds over the run ({result['run_seconds']} s)",
         _fmt(result["operator_cpu_seconds_run"])),
        (f"operator CPU while idle with {active} checks (share of one core)",
         _fmt(idle1["operator_cpu_share_of_one_core"])),
        ("phases after the burst", str(census["phases"])),
        ("phase Failed while the canary only waits for accelerators (Unschedulable)",
         f"{census['failed_while_waiting_for_accelerators']} of {d}"),
        ("simulated GPUs", _fmt(result["simulated_gpus"])),
        ("unrelated ConfigMaps in the watched namespace; their updates per second",
         _pair(result["unrelated_config_maps"], result["unrelated_churn_per_second"])),
        ("operator restarts during the run", _fmt(result["operator_restarts"])),
    ]  # fmt: skip
    lines = [*rows, "", "| figure | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in figures]
    return "\n".join(lines) + "\n"


def _save(result: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def _measure(run: Run, result: dict[str, Any]) -> None:
    """Every step of one run, each figure into `result` (and `--out`) once it is known."""
    args = run.args
    result.update(run.setup())
    manifests = run.create()
    time.sleep(args.settle_seconds)
    idle0 = result["idle_without_checks"] = {**run.idle("without checks"), "active_checks": 0}
    _save(result, args.out)
    before = run.meter()
    result["sequential"] = run.sequential(manifests)
    result["during_sequential"] = run.between(before, run.meter())
    _save(result, args.out)
    run.checks.wait_until(
        f"{args.checks} active ParityChecks",
        lambda latest: _active_checks(latest) >= args.checks,
        300,
    )
    time.sleep(args.settle_seconds)
    active = _active_checks(run.checks.snapshot())
    idle1 = result["idle_with_checks"] = {**run.idle("with checks"), "active_checks": active}
    if active:
        extra = (idle1["api_requests"]["per_second"] or 0) - (
            idle0["api_requests"]["per_second"] or 0
        )
        result["requests_per_active_check_per_minute"] = round(extra * 60 / active, 1)
    _save(result, args.out)
    result["burst"] = run.burst(manifests)
    _save(result, args.out)
    result["after_burst"] = run.census()


def _on_term(*_: Any) -> NoReturn:
    raise SystemExit(143)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--checks", type=int, default=100, help="sequential sample = checks")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="RSS/CPU sampling")
    parser.add_argument("--setup-timeout", type=float, default=900.0)
    parser.add_argument(
        "--change-timeout", type=float, default=300.0, help="longest wait for one change's result"
    )
    parser.add_argument("--burst-timeout", type=float, default=900.0)
    parser.add_argument(
        "--unrelated", type=int, default=3000, help="ConfigMaps infergate does not manage"
    )
    parser.add_argument(
        "--unrelated-churn", type=float, default=5.0, help="updates/s to those ConfigMaps"
    )
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    parser.add_argument("--keep", action="store_true", help="leave everything for a look")
    args = parser.parse_args()
    if not 0 < args.checks <= args.deployments:
        parser.error("--checks must be between 1 and --deployments")
    signal.signal(signal.SIGTERM, _on_term)

    layout = ClusterLayout.default()
    crds = sorted((Path(__file__).resolve().parents[1] / "crds").glob("infergate.io_*.yaml"))
    run = Run(layout, args)
    run.kubectl.run("apply", *(f"--filename={path}" for path in crds))
    result: dict[str, Any] = {
        "deployments": args.deployments,
        "checks": args.checks,
        "stable_replicas": 0,
        "canary_replicas": 1,
        "simulated_gpus": CLUSTER_GPUS + GPUS_PER_NODE * run.extra_nodes,
        "resync_seconds": 300,
        "unrelated_config_maps": args.unrelated,
        "unrelated_churn_per_second": args.unrelated_churn,
        "api_requests_counted_by": "bench/apiproxy.py in front of the API server, for the "
        "operator's in-cluster clients, split by pod: the figures are the Lease holder's",
    }
    try:
        _measure(run, result)
    except BaseException as error:
        result["error"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        if run.sampler is not None:
            last = run.sampler.once()
            result["run_seconds"] = round(time.monotonic() - run.operator_ready_at)
            if last is not None:
                result["operator_cpu_seconds_run"] = round(last.cpu_seconds - run.cpu_start, 1)
            result["operator_rss_run"] = rss_summary(run.sampler.samples)
            result["operator_restarts"] = run.operator.restarts()
            result["proxy_cpu_seconds"] = run.proxy.cpu_seconds()
            result["unrelated_updates_sent"] = run.churn.sent
        run.teardown()
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        _save(result, args.out)
        if args.markdown and "error" not in result:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
