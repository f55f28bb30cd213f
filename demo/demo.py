"""infergate, end to end on the local cluster: install, deploy, migrate, catch a bad change.

    make demo            (sets up, brings the cluster up, then runs this)
    .venv/bin/python demo/demo.py [--out out/demo] [--keep]

What it does, as a user would, with kubectl against the local cluster (real control
plane, engines running as real processes on the executor nodes):

  0. install the CRDs and the operator from manifests/ (the operator runs as a pod
     under its own ServiceAccount; the ParityCheck controller's role from
     manifests/runner);
  1. deploy the fixture model on vLLM / NVIDIA GPU in bfloat16 and wait until stable;
     then calibrate: `infergate parity calibrate` against the running stable (self vs
     self again and with 8 requests in flight) measures the revision's own A/A noise and
     keeps it in the operator's golden store, beside the golden records, where every
     later check whose baseline is that revision reads it for its limits;
  2. migrate it to MindFormers / Ascend. MindSpore has no bfloat16 CPU kernels, so
     float16 is MindFormers' low-precision case here: the check compares vLLM bf16
     with MindFormers fp16 under the dtype-change profile (bf16-class limits; a
     change of dtype is expected). The canary runs, its parity check runs (with a
     vLLM pooling probe for the GPU side's hidden states), it passes, it is promoted;
  3. apply a harmful change (RMSNorm epsilon 1e-6 -> 1e-4): the check fails with
     reasons a person can read, the canary is rolled back, stable keeps serving;
  4. print what happened: wall time per step, the parity figures, the reports;
  5. run every query of the Grafana dashboard against the Prometheus that scraped the
     operator and the engines all along (started on loopback beside the cluster; `make
     cluster-down` stops it), and end with where Prometheus and the reports are.

Every manifest applied is written to OUT/step-N.yaml, every report to OUT/*.html.
"""

# ruff: noqa: T201 - the demo talks to the terminal

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
# This checkout's product and development package, whatever the venv has installed.
sys.path[:0] = [str(REPO / "operator"), str(REPO / "dev")]

from infergate.accounting import describe_overhead  # noqa: E402  # noqa: E402
from infergate.fixture.generate import default_model_dir, is_complete  # noqa: E402
from infergate.suite import inline, medium_prompts  # noqa: E402
from infergate_dev.localcluster import prometheus  # noqa: E402
from infergate_dev.localcluster.layout import ClusterLayout, cache_dir  # noqa: E402

NAMESPACE = "infergate-demo"
OPERATOR_NAMESPACE = "infergate-system"
NAME = "qwen"
TERMINAL = ("Passed", "Failed", "Inconclusive", "Error")

# Enough evidence for a verdict (the profiles' 32 prompts and 4096 scored positions) from
# prompts of about a hundred tokens; the engines run with maxModelLen 512 on CPU, so no
# 8K-token prompt fits, and the check states that long prompts are not required.
SUITE = inline(medium_prompts())
# vLLM bf16 against MindFormers fp16 is judged under the dtype-change profile as it
# stands (bf16-class limits on 95% bounds: mean KL <= 1e-4, same-top >= 98.5%, hidden
# cosine P1 >= 0.9995, relL2 P99 <= 3e-2; the dtype itself may differ). Measured on the
# fixture model (18 prompts x 64 tokens, engine experiment): identical greedy outputs,
# mean KL 1.2e-5, hidden cosine P1 0.99995, relL2 P99 0.0096 - it passes on its merits,
# no limit relaxed.
PARITY = {
    "suite": {"inline": SUITE},
    "sampling": {"maxTokens": 16, "topLogprobs": 5, "seed": 42},
    "profile": "dtype-change",
    "thresholds": {"minLongPrompts": 0},
    "runner": {"activeDeadlineSeconds": 900, "backoffLimit": 1},
    "deadlineSeconds": 1500,
    # The stable revision is re-checked against its golden record once a day; the first
    # run is a day after promotion, so none runs during the demo, and the dashboard's
    # drift panel shows the watched revision as not drifted (0).
    "watch": {"intervalSeconds": 86400},
}
# The operator keeps golden records (and the noise the calibration step measures) on a
# claim in its own namespace, where its runner Jobs mount it; the local executor backs the
# claim with this directory.
GOLDEN_CLAIM = "golden-records"
GOLDEN_DIR = cache_dir() / "pvc" / OPERATOR_NAMESPACE / GOLDEN_CLAIM
GOLDEN_VOLUME = f"{OPERATOR_NAMESPACE}-demo-{GOLDEN_CLAIM}"
CALIBRATION_CONCURRENCY = 8
CALIBRATION_PROMPTS = 12
"""Prompts the demo's calibration records (three times: base, again, 8 in flight). The
check's 36 took ~5.5 minutes of the demo on a loaded 2-core machine (the step did not
finish under a heavier load); a third of the prompts is a third of the recording. A real
calibration runs the check's whole suite (its bounds are then tighter)."""


def base_manifest(model_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "model": {"name": "fixture", "uri": f"file://{model_dir}"},
            "engine": {
                "kind": "vllm",
                "image": "vllm/vllm-openai:v0.32.0",
                "dtype": "bfloat16",
                "maxModelLen": 512,
                "seed": 42,
                # vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1) fail on the CPU
                # build's first request (batch_invariant.mean_dim); on GPUs keep it on.
                "deterministic": False,
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "replicas": 1,
            "rollout": {
                "canaryReplicas": 1,
                "autoPromote": True,
                "autoRollback": True,
                "progressDeadlineSeconds": 1200,
                "parity": copy.deepcopy(PARITY),
            },
        },
    }


def migrated(manifest: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    out["spec"]["engine"] = {
        "kind": "mindformers",
        "image": "ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0",
        "dtype": "float16",
        "maxModelLen": 512,
        "seed": 42,
    }
    out["spec"]["accelerator"] = {"kind": "ascend-npu"}
    return out


def harmful(manifest: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    # The fixture's RMSNorm epsilon is 1e-6; 1e-4 is the kind of slip a copied config
    # makes. Most greedy outputs stay identical, so only the parity figures catch it.
    out["spec"]["engine"]["config"] = {"rms_norm_eps": 1e-4}
    return out


class Demo:
    def __init__(self, out: Path) -> None:
        self.layout = ClusterLayout.default()
        self.out = out
        self.rows: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.began = time.time()
        self.prometheus: str | None = None

    # -- plumbing ---------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.layout.bin / "kubectl"), f"--kubeconfig={self.layout.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def get(self, *args: str) -> dict[str, Any]:
        text = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(text) if text.strip() else {}

    def status(self) -> dict[str, Any]:
        return (
            self.get("inferencedeployments.infergate.io", NAME, "-n", NAMESPACE).get("status") or {}
        )

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {text}", flush=True)

    def wait(self, probe: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            self.stop_on_crash_loop()
            time.sleep(2)
        raise SystemExit(
            f"timed out after {timeout:.0f}s waiting for {what}; status: {self.status()}"
        )

    def stop_on_crash_loop(self) -> None:
        """Stop with the pod's log when an engine pod keeps crashing (rather than waiting on)."""
        pods = self.get("pods", "-n", NAMESPACE).get("items", [])
        for pod in pods:
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                if int(container.get("restartCount") or 0) >= 3:
                    name = pod["metadata"]["name"]
                    log = self.layout.logs / "pods" / f"{NAMESPACE}_{name}_{container['name']}.log"
                    tail = (
                        log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
                    )
                    raise SystemExit(
                        f"pod {NAMESPACE}/{name} keeps crashing ({container['restartCount']} "
                        f"restarts); the last lines of {log}:\n" + "\n".join(tail)
                    )

    def apply(self, manifest: dict[str, Any], step: int) -> None:
        path = self.out / f"step-{step}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True))
        self.kubectl("apply", "-f", str(path))
        self.say(f"applied {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")

    # -- steps ------------------------------------------------------------------------

    def install(self) -> None:
        self.kubectl("apply", "-k", str(REPO / "crds"))
        crds = ("crd/inferencedeployments.infergate.io", "crd/paritychecks.infergate.io")
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds)
        self.kubectl("apply", "-k", str(REPO / "manifests" / "operator"))
        self.kubectl("apply", "-k", str(REPO / "manifests" / "runner"))
        operator = ("deployment/infergate-operator", "-n", OPERATOR_NAMESPACE)
        # The demo's model is a file:// model in the cache: allow that one directory.
        allow = {
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": f"--allow-host-path={default_model_dir().parent}",
        }
        golden = {
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": "--golden-config="
            + json.dumps({"store": {"pvc": {"claimName": GOLDEN_CLAIM}}}),
        }
        self.golden_claim()
        self.kubectl("patch", *operator, "--type=json", "-p", json.dumps([allow, golden]))
        self.kubectl("rollout", "status", *operator, "--timeout=300s")
        self.kubectl(
            "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s"
        )
        self.kubectl("create", "namespace", NAMESPACE)
        self.say("CRDs and operator installed (operator pod Ready in infergate-system)")
        try:
            self.prometheus = prometheus.up(self.layout, interval_seconds=SCRAPE_SECONDS, say=False)
            self.say(f"Prometheus scraping the operator and engine pods at {self.prometheus}")
        except prometheus.PrometheusError as error:
            self.say(f"no Prometheus ({error}); the dashboard check is skipped")

    def golden_claim(self) -> None:
        """The operator's golden claim, bound to a fresh directory of the executor's."""
        self.kubectl("delete", "pv", GOLDEN_VOLUME, "--ignore-not-found", "--wait=false")
        shutil.rmtree(GOLDEN_DIR, ignore_errors=True)
        GOLDEN_DIR.mkdir(parents=True)
        volume = {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": GOLDEN_VOLUME},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                "hostPath": {"path": str(GOLDEN_DIR), "type": "DirectoryOrCreate"},
                "claimRef": {"namespace": OPERATOR_NAMESPACE, "name": GOLDEN_CLAIM},
            },
        }  # fmt: skip
        claim = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": GOLDEN_CLAIM, "namespace": OPERATOR_NAMESPACE},
            "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                "volumeName": GOLDEN_VOLUME, "resources": {"requests": {"storage": "1Gi"}},
            },
        }  # fmt: skip
        self.kubectl("apply", "-f", "-", stdin=json.dumps(volume))
        self.kubectl("apply", "-f", "-", stdin=json.dumps(claim))

    def calibrate(self, revision: str, model_dir: Path) -> None:
        """`infergate parity calibrate` against the running stable: its A/A noise, kept in
        the golden store beside its records (noise/<namespace>/<name>/<revision>.json)."""
        url = self.pod_url(revision)
        suite = self.out / "suite.jsonl"
        suite.write_text(
            "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in SUITE[:CALIBRATION_PROMPTS]),
            encoding="utf-8",
        )
        work = self.out / "calibrate"
        shutil.rmtree(work, ignore_errors=True)
        # The engine serves the model as "fixture" (spec.model.name); the command names
        # the served model after the model directory.
        served = work / "model" / "fixture"
        served.parent.mkdir(parents=True)
        served.symlink_to(model_dir, target_is_directory=True)
        command = [
            sys.executable, "-m", "infergate.cli", "parity", "calibrate",
            "--engine", "vllm", "--model", str(served), "--dtype", "bfloat16",
            "--suite", str(suite), "--url", url, "--work", str(work),
            "--concurrency", str(CALIBRATION_CONCURRENCY),
            "--max-tokens", str(PARITY["sampling"]["maxTokens"]),  # type: ignore[index]
            "--store", str(GOLDEN_DIR), "--namespace", NAMESPACE, "--deployment", NAME,
            "--revision", revision, "--noise-out", str(self.out / "noise.json"),
            "--markdown", str(self.out / "calibration.md"),
        ]  # fmt: skip
        self.say("$ infergate parity calibrate --engine vllm --url " + url + " --dtype bfloat16 "
                 f"--concurrency {CALIBRATION_CONCURRENCY} --store {GOLDEN_DIR} "
                 f"--namespace {NAMESPACE} --deployment {NAME} --revision {revision}")  # fmt: skip
        path = os.pathsep.join([str(REPO / "operator"), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=900, check=False, cwd=REPO,
            env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"infergate parity calibrate failed:\n{done.stderr[-3000:]}")
        for line in done.stderr.splitlines():
            if line.startswith("noise record kept"):
                self.say(f"    {line}")
        noise = json.loads((self.out / "noise.json").read_text(encoding="utf-8"))
        for family, measured in (noise.get("selfNoise") or {}).items():
            self.say(f"    self noise {family}: <= {measured['upper']:.3g} "
                     f"({', '.join(measured['pairs'])})")  # fmt: skip
        self.say(f"    tables: {self.out / 'calibration.md'}")

    def pod_url(self, revision: str) -> str:
        """The serving URL of a Ready pod of `revision` (pod IP: the demo runs beside it)."""
        pods = self.get("pods", "-n", NAMESPACE, "-l", f"infergate.io/revision={revision}")
        for pod in pods.get("items", []):
            ip = (pod.get("status") or {}).get("podIP")
            if ip and not pod["metadata"].get("deletionTimestamp"):
                return f"http://{ip}:8000"
        raise SystemExit(f"no pod of revision {revision} to calibrate against")

    def wait_stable(self, timeout: float = 900) -> str:
        def stable() -> dict[str, Any] | None:
            status = self.status()
            settled = status.get("phase") == "Stable" and not status.get("canaryRevision")
            return status if settled else None

        status = self.wait(stable, timeout, "a stable revision")
        return str(status["stableRevision"])

    def follow_canary(self, step: int, what: str, expect: str) -> dict[str, Any]:
        begun = time.monotonic()
        before = self.status().get("stableRevision")
        canary = self.wait(lambda: self.status().get("canaryRevision"), 300, "the canary")
        self.say(f"canary revision {canary} rolling out next to stable {before}")
        check_name = f"{NAME}-{canary}"
        served = 0
        shown = ""
        # A terminal gets one line rewritten in place; a log gets a line per change.
        live = sys.stdout.isatty()

        def ended() -> dict[str, Any] | None:
            nonlocal served, shown
            served += self.stable_answers(before)
            check = self.get("paritychecks.infergate.io", check_name, "-n", NAMESPACE)
            status = check.get("status") or {}
            if status.get("phase") in TERMINAL:
                return status
            progress = status.get("progress") or {}
            done, total = progress.get("done"), progress.get("total")
            line = f"    check {status.get('phase')}: {done}/{total} prompts"
            if progress and line != shown:
                shown = line
                print(f"\r{line}" if live else line, end="" if live else "\n", flush=True)
            return None

        check: dict[str, Any] = self.wait(ended, 1800, f"ParityCheck {check_name}")
        if live and shown:
            print()
        self.say(
            f"ParityCheck {check_name}: {check['phase']} - {check['verdict'].get('summary', '')}"
        )
        for reason in check["verdict"].get("reasons", [])[:6]:
            self.say(f"    reason: {reason.get('message', reason.get('metric'))[:300]}")
        overhead = check.get("overhead") or {}
        self.say(f"    {_overhead_line(overhead)}")
        final = self.wait(
            lambda: not (s := self.status()).get("canaryRevision") and s,
            600,
            "the rollout to settle",
        )
        self.say(f"rollout {final.get('phase')}: stable revision {final.get('stableRevision')}")
        report = self.out / f"{check_name}.html"
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "infergate"), "parity", "report", "--check",
             f"{NAMESPACE}/{check_name}", "--kubeconfig", str(self.layout.kubeconfig),
             "--out", str(report), "--json", str(report.with_suffix(".json"))],
            check=False, capture_output=True, timeout=120,
        )  # fmt: skip
        metrics = check.get("metrics") or {}
        self.rows.append(
            {
                "step": step,
                "what": what,
                "expected": expect,
                "check": check["phase"],
                "rollout": final.get("phase"),
                "stable": final.get("stableRevision"),
                "seconds": time.monotonic() - begun,
                "tokenMatch": metrics.get("tokenMatchRate"),
                "meanKl": metrics.get("meanKl"),
                "cosineP1": metrics.get("hiddenCosineP1"),
                "relL2P99": metrics.get("hiddenRelL2P99"),
                "report": report,
                "stableAnswers": served,
                "overhead": overhead,
            }
        )
        return check

    def stable_answers(self, revision: str | None) -> int:
        """1 when a pod of the stable revision answers a completion now (pod IP, not ClusterIP)."""
        if revision is None:
            return 0
        pods = self.get("pods", "-n", NAMESPACE, "-l", f"infergate.io/revision={revision}").get(
            "items", []
        )
        body = {"model": "fixture", "prompt": "Hello", "max_tokens": 2, "temperature": 0}
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                answer = httpx.post(f"http://{ip}:8000/v1/completions", timeout=30, json=body)
            except httpx.HTTPError:
                return 0
            return 1 if answer.status_code == 200 else 0
        return 0

    def table(self) -> None:
        line = "=" * 104
        print(f"\n{line}")
        print(
            f"{'step':<4} {'what':<40} {'check':<7} {'rollout':<11} {'s':>6} "
            f"{'match':>6} {'meanKL':>9} {'cosP1':>9} {'relL2P99':>9}"
        )
        for row in self.rows:
            print(
                f"{row['step']:<4} {row['what']:<40} {row.get('check') or '-':<7} "
                f"{row.get('rollout') or '-':<11} {row['seconds']:6.0f} "
                f"{_num(row, 'tokenMatch', '.3f'):>6} {_num(row, 'meanKl', '.2e'):>9} "
                f"{_num(row, 'cosineP1', '.6f'):>9} {_num(row, 'relL2P99', '.2e'):>9}"
            )
        print(line)
        for row in self.rows:
            if row.get("report"):
                ok = "as expected" if row.get("check") == row.get("expected") else "NOT as expected"
                print(
                    f"step {row['step']}: check {row.get('check')} ({ok}); the stable revision "
                    f"answered {row.get('stableAnswers', 0)} requests during the check; "
                    f"HTML report: {row['report']}"
                )
                overhead = row.get("overhead") or {}
                print(f"  {_overhead_line(overhead)}")
        print(f"total wall time: {time.monotonic() - self.started:.0f}s")

    def dashboard(self) -> bool:
        """Run every panel query of the dashboard over the demo's window; True if all have data."""
        if self.prometheus is None:
            return False
        time.sleep(3 * SCRAPE_SECONDS)  # the last changes scraped
        variables = {
            "namespace": NAMESPACE,
            "name": NAME,
            "job": "infergate-operator",
            "__rate_interval": f"{int(4 * SCRAPE_SECONDS)}s",
            "__range": f"{int(time.time() - self.began)}s",
        }
        loaded = json.loads((REPO / "dashboards" / "infergate.json").read_text(encoding="utf-8"))
        print("\nDashboard queries against Prometheus (last value of each series):")
        empty = 0
        for where, expression in prometheus.panel_queries(loaded):
            bound = prometheus.bind(expression, variables)
            values = prometheus.last_values(self.prometheus, bound, self.began, time.time(), 5)
            if not values:
                empty += 1
            shown = "; ".join(
                ",".join(f"{k}={v}" for k, v in sorted(m.items()) if k in _SHOWN_LABELS)
                + f" {value:.6g}"
                for m, value in values[:4]
            )
            print(f"  {where}: {shown or 'NO DATA'}")
        engines = prometheus.query(self.prometheus, 'count(up{job="infergate-engines"} == 1)')
        print(f"  engine pods scraped now: {engines[0]['value'][1] if engines else 0}")
        firing = prometheus.query(self.prometheus, 'ALERTS{alertstate="firing"}')
        names = sorted({a["metric"]["alertname"] for a in firing})
        print(f"  alerts firing: {', '.join(names) or 'none'}")
        return empty == 0


_SHOWN_LABELS = ("phase", "reason", "outcome", "result", "verb", "resource", "code", "le")
SCRAPE_SECONDS = 5.0


def _overhead_line(overhead: dict[str, Any]) -> str:
    """The check's runner overhead (its status), or that the runner reported none.

    A check whose baseline is the stable revision shares that engine with the demo's own
    requests to the stable (it shows the stable serving during the check): the runner then
    reports why the engine's time is not the check's alone rather than a figure.
    """
    return describe_overhead(overhead) if overhead else "runner overhead: not reported"


def _num(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return format(value, fmt) if isinstance(value, int | float) else "-"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "out" / "demo")
    parser.add_argument(
        "--keep", action="store_true", help="leave the operator and the demo namespace"
    )
    args = parser.parse_args()
    model_dir = default_model_dir()
    if not is_complete(model_dir):
        raise SystemExit(f"fixture model missing at {model_dir}: run `make engines` first")
    args.out.mkdir(parents=True, exist_ok=True)
    demo = Demo(args.out)
    step_start = time.monotonic()
    demo.install()
    demo.rows.append(
        {"step": 0, "what": "install CRDs + operator", "seconds": time.monotonic() - step_start}
    )

    step_start = time.monotonic()
    first = base_manifest(model_dir)
    demo.apply(first, 1)
    stable = demo.wait_stable()
    demo.say(f"step 1: vLLM bfloat16 on GPU stable at revision {stable}")
    demo.rows.append({"step": 1, "what": "vLLM bf16 on GPU: deploy", "rollout": "Stable",
                      "stable": stable, "seconds": time.monotonic() - step_start})  # fmt: skip

    step_start = time.monotonic()
    demo.say(f"step 1b: calibrate the stable revision {stable}: its own A/A noise, kept")
    demo.calibrate(stable, model_dir)
    demo.rows.append({"step": 1, "what": "calibrate stable: A/A noise kept",
                      "seconds": time.monotonic() - step_start})  # fmt: skip

    second = migrated(first)
    demo.apply(second, 2)
    demo.say("step 2: migrate to MindFormers on Ascend (fp16: MindSpore has no CPU bf16); "
             "checked under profile dtype-change")  # fmt: skip
    demo.follow_canary(2, "migrate to MindFormers fp16 on Ascend", "Passed")

    third = harmful(second)
    demo.apply(third, 3)
    demo.say("step 3: a harmful change, RMSNorm epsilon 1e-6 -> 1e-4")
    demo.follow_canary(3, "harmful change: rms_norm_eps 1e-4", "Failed")
    demo.table()
    dashboard_ok = demo.dashboard()
    if not args.keep:
        # While the operator still runs, so that it clears kopf's finalizers.
        kinds = "inferencedeployments.infergate.io,paritychecks.infergate.io"
        demo.kubectl("delete", kinds, "--all", "-n", NAMESPACE, "--timeout=120s", check=False)
        demo.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        demo.kubectl(
            "delete", "-k", str(REPO / "manifests" / "runner"), "--ignore-not-found", check=False
        )
        demo.kubectl(
            "delete", "-k", str(REPO / "manifests" / "operator"), "--ignore-not-found", check=False
        )
        demo.kubectl("delete", "pv", GOLDEN_VOLUME, "--ignore-not-found", check=False)
        shutil.rmtree(GOLDEN_DIR, ignore_errors=True)
    expected = [row.get("check") == row.get("expected") for row in demo.rows if "expected" in row]
    # The last lines: where to look next.
    reports = [str(row["report"]) for row in demo.rows if row.get("report")]
    print(f"\nPrometheus: {demo.prometheus or 'not running'} (stopped by make cluster-down)")
    print(f"Reports: {', '.join(reports)}")
    return 0 if all(expected) and dashboard_ok else 1


if __name__ == "__main__":
    sys.exit(main())
