"""The mirror's cost on the client: direct calls to a stable vLLM engine against the same
calls through the mirroring proxy, enough of them for a P99.

Two real vLLM engines of the fixture model run as local processes on loopback ports,
from the cached vLLM venv (INFERGATE_VLLM_VENV, else its pinned default) with the
environment the local executor gives vLLM pods (infergate_dev.localcluster.executor.images),
each engine's model threads bound to a core of its own (stable: core 0, canary: core 1).
The product's mirror (`Mirror`, its proxy and control apps, served as `infergate mirror
serve` serves them) runs in this process under uvicorn on loopback ports, its stable
upstream and its canary read from a small table of Services and EndpointSlices that
point at the two engines.

One client loop sends the same 64-token completions (half greedy, half sampled, as the
traffic e2e client does) alternately to the stable engine directly and through the
mirror, one request at a time, in two windows:

- `no_session`: no shadow session; the mirror only forwards;
- `session`: a shadow session is open (every exchange offered, under a rate and a
  bounded queue), so copies are scored on both engines while the client runs.

Before each window a few turns are sent and not counted (the engines' first generation,
and in the session window their first scoring calls, warm up once).

Per window and route it reports median, P90, P99 and mean latency, and the difference
mirror - direct of the median and of the P99 with a bootstrap 95% interval over the
client's turns (each turn calls both routes, so the pairs share the machine's moment);
for the session window also the session's counts (copies scored, refused and why).

    flock /tmp/heavy.lock .venv/bin/python bench/mirror_bench.py [--requests 200]

(`make bench-mirror`). The JSON goes to out/bench/mirror-overhead.json, the engines'
logs beside it. Engines are stopped at the end, on an error or Ctrl-C, and by a
`timeout` of their own if this process is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import numpy as np

from infergate.commands.mirror import mirror_servers, serve_mirror
from infergate.engines.venvs import engine_venv
from infergate.fixture.generate import default_model_dir, is_complete
from infergate.jsontypes import JSON
from infergate.mirror.app import Mirror
from infergate.mirror.session import SessionRequest
from infergate.mirror.upstream import Endpoints
from infergate.parity.record import RecordMeta
from infergate.render.labels import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, LABEL_REVISION, MANAGED_BY
from infergate.render.vllm import VllmServe, vllm_serve_args
from infergate.runner.endpoints import ENDPOINTSLICE_CONTROLLER
from infergate_dev.localcluster.executor.images import default_table

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "out" / "bench" / "mirror-overhead.json"
HOST = "127.0.0.1"
MODEL_NAME = "fixture"
DEPLOYMENT = "bench"
CANARY_REVISION = "0123456789"
CLIENT_TOKENS = 64
ROUTES = ("direct", "mirror")
WINDOWS = ("no_session", "session")
# The traffic e2e client's prompts (tests/e2e/traffic.py), English and Chinese.
PROMPTS = (
    "The weather today is",
    "Once upon a time there was",
    "The capital of France is",
    "In the beginning the universe was",
    "A recipe for bread needs flour,",
    "The quick brown fox jumps over",
    "My favourite colour is",
    "To be or not to be, that is",
    "The train leaves the station at",
    "Water boils at a temperature of",
    "The best way to learn a language is",
    "Yesterday I went to the market and bought",
    "今天早上",
    "我们明天去",
    "这本书讲的是",
    "北京的天气",
)
# As the traffic e2e engines: eager (no compile on CPU), up to 16 sequences, and a step
# timeout far past vLLM's 300 s, since a step may wait long for its core here.
ENGINE_ARGS = ("--enforce-eager", "--max-num-seqs", "16")
SLOW_MACHINE_ENV = {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3600"}
ENGINE_CORES = {"stable": "0", "canary": "1"}
BOOTSTRAP_RESAMPLES = 10_000


# -- figures (pure) ----------------------------------------------------------------------------


def summary(milliseconds: Sequence[float]) -> dict[str, float | int]:
    """Count, median, P90, P99 and mean of latencies in ms (numpy's linear percentiles)."""
    if not milliseconds:
        return {"count": 0}
    values = np.asarray(milliseconds, dtype=np.float64)
    return {
        "count": len(values),
        "median_ms": round(float(np.percentile(values, 50)), 1),
        "p90_ms": round(float(np.percentile(values, 90)), 1),
        "p99_ms": round(float(np.percentile(values, 99)), 1),
        "mean_ms": round(float(values.mean()), 1),
    }


def bootstrap_difference(
    direct: Sequence[float],
    mirror: Sequence[float],
    percentile: float,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, float | int]:
    """percentile(mirror) - percentile(direct), with a 95% percentile-bootstrap interval.

    `direct[i]` and `mirror[i]` are the two routes of one client turn: the turns are
    resampled as pairs, so what both routes shared in a turn (the machine's load at that
    moment) stays together. Needs at least two pairs.
    """
    if len(direct) != len(mirror):
        raise ValueError(f"unpaired: {len(direct)} direct and {len(mirror)} mirror latencies")
    if len(direct) < 2:
        raise ValueError(f"{len(direct)} pairs: a bootstrap needs at least two")
    a = np.asarray(direct, dtype=np.float64)
    b = np.asarray(mirror, dtype=np.float64)
    rng = np.random.default_rng(seed)
    turns = rng.integers(0, len(a), size=(resamples, len(a)))
    spread = np.percentile(b[turns], percentile, axis=1) - np.percentile(
        a[turns], percentile, axis=1
    )
    low, high = np.percentile(spread, [2.5, 97.5])
    return {
        "point_ms": round(float(np.percentile(b, percentile) - np.percentile(a, percentile)), 1),
        "low_ms": round(float(low), 1),
        "high_ms": round(float(high), 1),
        "pairs": len(a),
    }


@dataclass(frozen=True)
class Sample:
    """One client request."""

    turn: int
    route: str
    milliseconds: float
    ok: bool


def window_figures(samples: Sequence[Sample]) -> dict[str, Any]:
    """Per route the latencies of answered requests; the paired differences over the turns
    where both routes answered 200."""
    routes = {
        route: summary([s.milliseconds for s in samples if s.route == route and s.ok])
        for route in ROUTES
    }
    failed = {route: sum(1 for s in samples if s.route == route and not s.ok) for route in ROUTES}
    by_turn: dict[int, dict[str, float]] = {}
    for s in samples:
        if s.ok:
            by_turn.setdefault(s.turn, {})[s.route] = s.milliseconds
    paired = [t for t in sorted(by_turn) if set(by_turn[t]) == set(ROUTES)]
    direct = [by_turn[t]["direct"] for t in paired]
    mirror = [by_turn[t]["mirror"] for t in paired]
    figures: dict[str, Any] = {"routes": routes, "failed": failed}
    if len(paired) >= 2:
        figures["mirror_minus_direct"] = {
            "median": bootstrap_difference(direct, mirror, 50),
            "p99": bootstrap_difference(direct, mirror, 99),
        }
    return figures


def dropped(counts: JSON) -> int:
    """Copies the session refused, for any reason (not sampled, rate, queue, unusable...)."""
    return sum(int(n) for n in (counts.get("refused") or {}).values())


def unfinished(counts: JSON) -> int:
    """Admitted copies neither scored, failed nor found unusable yet: queued or being
    scored."""
    refused = counts.get("refused") or {}
    done = (
        int(counts.get("scored") or 0)
        + int(counts.get("stableFailures") or 0)
        + int(counts.get("canaryFailures") or 0)
        + int(refused.get("unusable") or 0)
    )
    return max(0, int(counts.get("sampled") or 0) - done)


def table(windows: dict[str, Any]) -> str:
    """The figures as a Markdown table (ms)."""
    lines = [
        "| window | route | requests | median | P90 | P99 | mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figures in windows.items():
        for route, s in figures["routes"].items():
            cells = [s.get(k, "-") for k in ("count", "median_ms", "p90_ms", "p99_ms", "mean_ms")]
            lines.append(f"| {name} | {route} | " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "| window | mirror - direct, median [95% CI] | mirror - direct, P99 [95% CI] |",
        "|---|---|---|",
    ]
    for name, figures in windows.items():
        delta = figures.get("mirror_minus_direct")
        if delta is None:
            lines.append(f"| {name} | - | - |")
            continue
        cells = [
            f"{d['point_ms']:+.1f} [{d['low_ms']:+.1f}, {d['high_ms']:+.1f}]"
            for d in (delta["median"], delta["p99"])
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


# -- engines -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def fixture_model() -> Path:
    model = default_model_dir()
    if not is_complete(model):
        raise SystemExit(f"fixture model missing at {model}: run `make engines`")
    return model


def vllm_environment(cores: str) -> dict[str, str]:
    """The environment the local executor gives a vLLM pod, with the engine's model
    threads bound to `cores` (VLLM_CPU_OMP_THREADS_BIND)."""
    entry = next(e for e in default_table() if e["pattern"] == "vllm/vllm-openai*")
    return {**os.environ, **entry["env"], **SLOW_MACHINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": cores}


@dataclass
class Engine:
    """One `vllm serve` of the fixture model on a loopback port."""

    name: str
    port: int
    log: Path
    lifetime_s: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        env = vllm_environment(ENGINE_CORES[self.name])
        vllm = engine_venv("vllm") / "bin" / "vllm"
        if not vllm.exists():
            raise SystemExit(f"no vLLM at {vllm}: run `make engines`")
        args = vllm_serve_args(
            VllmServe(
                model=str(fixture_model()),
                served_model_name=MODEL_NAME,
                dtype="bfloat16",
                max_model_len=512,
                seed=42,
                host=HOST,
                port=self.port,
                extra=ENGINE_ARGS,
            )
        )
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # `timeout` stops the engine (and, its process group's leader, vLLM's children)
        # even if this process is killed before it can.
        argv = ["timeout", "-k", "10", str(self.lifetime_s), str(vllm), *args]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} engine exited ({self.process.returncode}): {self.log}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise TimeoutError(f"{self.name} engine not ready in time: {self.log}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            return


# -- the mirror --------------------------------------------------------------------------------


def _service(name: str, labels: dict[str, str]) -> JSON:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 8000}]},
    }


def _endpoint_slice(service: str, port: int) -> JSON:
    """The slice the cluster publishes for `service` (the mirror reads no other)."""
    owner = {"apiVersion": "v1", "kind": "Service", "name": service, "uid": f"uid-{service}",
             "controller": True}  # fmt: skip
    return {
        "metadata": {
            "name": f"{service}-bench",
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": ENDPOINTSLICE_CONTROLLER,
            },
            "ownerReferences": [owner],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port}],
        "endpoints": [{"addresses": [HOST], "conditions": {"ready": True}}],
    }


@dataclass(frozen=True)
class LocalReads:
    """The mirror's API reads, answered from a table: the deployment's stable Service and
    the canary's revision Service, each with one ready endpoint, a local engine."""

    stable_port: int
    canary_port: int

    def service(self, name: str) -> JSON | None:
        if name == DEPLOYMENT:
            return _service(name, {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT: DEPLOYMENT})
        if name == f"{DEPLOYMENT}-{CANARY_REVISION}":
            labels = {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_DEPLOYMENT: DEPLOYMENT,
                LABEL_REVISION: CANARY_REVISION,
            }
            return _service(name, labels)
        return None

    def endpoint_slices(self, service: str) -> list[JSON]:
        if service == DEPLOYMENT:
            return [_endpoint_slice(service, self.stable_port)]
        if service == f"{DEPLOYMENT}-{CANARY_REVISION}":
            return [_endpoint_slice(service, self.canary_port)]
        return []


@dataclass
class MirrorProcess:
    """The product's mirror on an event loop of its own thread, as in a mirror pod."""

    reads: LocalReads
    port: int
    control_port: int
    servers: list[Any] = field(default_factory=list)
    thread: threading.Thread | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="mirror", daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            raise TimeoutError("the mirror did not start")

    def _run(self) -> None:
        async def serve() -> None:
            mirror = Mirror(DEPLOYMENT, self.reads, Endpoints(self.reads, DEPLOYMENT))
            self.servers = mirror_servers(mirror, HOST, self.port, self.control_port)
            self.ready.set()
            await serve_mirror(mirror, self.servers)

        try:
            asyncio.run(serve())
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            self.error = err
            self.ready.set()

    @property
    def proxy_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{HOST}:{self.control_port}"

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.error is not None:
                raise RuntimeError(f"the mirror failed: {self.error!r}")
            try:
                health = httpx.get(f"{self.control_url}/mirror/health", timeout=5.0).json()
                if health.get("upstream") == 1:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError("the mirror found no stable endpoint in time")

    def stop(self) -> None:
        for server in self.servers:
            server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=30)


def session_request(args: argparse.Namespace) -> SessionRequest:
    def meta(side: str) -> RecordMeta:
        return RecordMeta(
            engine="vllm",
            engine_version="0.32.0",
            dtype="bfloat16",
            config_hash=CANARY_REVISION if side == "canary" else "stable0000",
            model=MODEL_NAME,
            suite="live",
        )

    return SessionRequest(
        id="bench/mirror-overhead",
        candidate_revision=CANARY_REVISION,
        model=MODEL_NAME,
        sample_rate=args.sample_rate,
        max_requests_per_second=args.max_copies_per_second,
        max_queue=args.max_queue,
        window_seconds=3600,
        baseline=meta("stable"),
        candidate=meta("canary"),
    )


# -- the client --------------------------------------------------------------------------------


def completion(turn: int) -> JSON:
    """The turn's request, exactly CLIENT_TOKENS tokens as the traffic e2e client asks:
    two turns sampled (0.7), two greedy, and so on."""
    return {
        "model": MODEL_NAME,
        "prompt": PROMPTS[turn % len(PROMPTS)],
        "max_tokens": CLIENT_TOKENS,
        "min_tokens": CLIENT_TOKENS,
        "temperature": 0 if (turn // 2) % 2 else 0.7,
        "ignore_eos": True,
    }


def route_order(turn: int) -> tuple[str, ...]:
    """Which route goes first in a turn: alternating every turn, so each route follows
    each route equally often (a copy is scored right after its proxied request, so
    what follows a proxied request meets the scoring), and, with `completion`'s two-turn
    rhythm, each route goes first for greedy and for sampled requests alike."""
    return ROUTES if turn % 2 == 0 else ROUTES[::-1]


def run_window(
    http: httpx.Client,
    urls: dict[str, str],
    turns: int,
    deadline: float,
    *,
    first_turn: int = 0,
    pause: float = 0.05,
    progress: Callable[[int], None] | None = None,
) -> list[Sample]:
    """`turns` turns, each both routes one after the other; stops early at `deadline`."""
    samples: list[Sample] = []
    for turn in range(first_turn, first_turn + turns):
        if time.monotonic() > deadline:
            break
        body = completion(turn)
        for route in route_order(turn):
            started = time.perf_counter()
            try:
                ok = http.post(f"{urls[route]}/v1/completions", json=body).status_code == 200
            except httpx.HTTPError:
                ok = False
            samples.append(Sample(turn, route, 1000 * (time.perf_counter() - started), ok))
        if progress is not None:
            progress(turn - first_turn + 1)
        time.sleep(pause)
    return samples


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def _progress(window: str, turns: int) -> Callable[[int], None]:
    started = time.monotonic()

    def show(done: int) -> None:
        if done % 25 == 0 or done == turns:
            elapsed = time.monotonic() - started
            say(f"  {window}: {done}/{turns} turns, {elapsed:.0f}s")

    return show


@contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT end the run as Ctrl-C does: through the `finally`s that stop the
    engines (SIGINT too, since a shell starts background commands with it ignored)."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def session_counts(http: httpx.Client, url: str) -> JSON:
    counts: JSON = http.get(url).json()
    return counts


def wait_scored(http: httpx.Client, url: str, until: float) -> JSON:
    """The session's counts once every copy it admitted is done (or at `until`)."""
    counts = session_counts(http, url)
    while unfinished(counts) and time.monotonic() < until:
        time.sleep(1.0)
        counts = session_counts(http, url)
    return counts


def close_session(http: httpx.Client, url: str, before: JSON, drain_until: float) -> dict[str, Any]:
    """The session's counts before the window, at its end and once what it admitted is
    scored (off the client's path; or at `drain_until`); then the session is closed."""
    at_end = session_counts(http, url)
    began = time.monotonic()
    drained = wait_scored(http, url, drain_until)
    http.delete(url)
    return {
        "session_before_window": before,
        "session_at_window_end": at_end,
        "session_drained": drained,
        "drain_seconds": round(time.monotonic() - began, 1),
        "scored_in_window": int(drained.get("scored") or 0) - int(before.get("scored") or 0),
        "dropped_in_window": dropped(drained) - dropped(before),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    deadline = began + args.max_minutes * 60
    logs = args.out.parent / "mirror-engines"
    lifetime = int(args.max_minutes * 60) + 60
    engines = {
        name: Engine(name, free_port(), logs / f"{name}.log", lifetime) for name in ENGINE_CORES
    }
    mirror = MirrorProcess(
        LocalReads(engines["stable"].port, engines["canary"].port), free_port(), free_port()
    )
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(sys.argv),
        "machine": {"cpus": os.cpu_count(), "load_at_start": _load()},
        "settings": {
            "requests_per_route_per_window": args.requests,
            "tokens": CLIENT_TOKENS,
            "engine_cores": ENGINE_CORES,
            "engine_args": list(ENGINE_ARGS),
            "session": {
                "sample_rate": args.sample_rate,
                "max_copies_per_second": args.max_copies_per_second,
                "max_queue": args.max_queue,
            },
            "warmup_turns": args.warmup,
            "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
        },
        "windows": {},
    }
    with ExitStack() as stack, _terminated_as_interrupt():
        for engine in engines.values():
            stack.callback(engine.stop)
            engine.start()
        say(f"engines starting (logs in {logs})")
        for engine in engines.values():
            engine.wait_ready(min(deadline, time.monotonic() + args.engine_start_s))
        result["engines_ready_s"] = round(time.monotonic() - began, 1)
        say(f"engines ready after {result['engines_ready_s']}s")
        stack.callback(mirror.stop)
        mirror.start()
        mirror.wait_ready(time.monotonic() + 30)
        urls = {"direct": engines["stable"].url, "mirror": mirror.proxy_url}
        counts_url = f"{mirror.control_url}/mirror/sessions/{session_request(args).id}"
        # Every engine generates once before the figures count (the first call warms up).
        with httpx.Client(timeout=120.0) as http:
            httpx.post(f"{engines['canary'].url}/v1/completions", json=completion(1), timeout=120)
            run_window(http, urls, args.warmup, deadline, first_turn=0)
            turn = args.warmup
            for window in WINDOWS:
                before: JSON = {}
                if window == "session":
                    body = session_request(args).model_dump(mode="json", by_alias=True)
                    opened = http.post(f"{mirror.control_url}/mirror/sessions", json=body)
                    opened.raise_for_status()
                    # The engines' first scoring calls warm up once: a few turns, not
                    # counted, and their copies scored before the window begins.
                    run_window(http, urls, args.warmup, deadline, first_turn=turn)
                    turn += args.warmup
                    before = wait_scored(http, counts_url, time.monotonic() + args.drain_s)
                started = time.monotonic()
                samples = run_window(
                    http, urls, args.requests, deadline - 30, first_turn=turn,
                    progress=_progress(window, args.requests),
                )  # fmt: skip
                figures = window_figures(samples)
                figures["seconds"] = round(time.monotonic() - started, 1)
                figures["turns"] = len({s.turn for s in samples})
                figures["cut_by_deadline"] = figures["turns"] < args.requests
                figures["load_at_end"] = _load()
                if window == "session":
                    figures.update(
                        close_session(
                            http, counts_url, before,
                            min(deadline, time.monotonic() + args.drain_s),
                        )
                    )  # fmt: skip
                result["windows"][window] = figures
                turn += args.requests
    result["machine"]["load_at_end"] = _load()
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="per route per window")
    parser.add_argument("--warmup", type=int, default=4, help="turns not counted")
    parser.add_argument("--sample-rate", type=float, default=1.0)
    parser.add_argument("--max-copies-per-second", type=float, default=10.0)
    parser.add_argument("--max-queue", type=int, default=32)
    parser.add_argument("--max-minutes", type=float, default=15.0, help="the whole run")
    parser.add_argument("--engine-start-s", type=float, default=420.0)
    parser.add_argument("--drain-s", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        result = measure(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: engines stopped\n")
        return 130
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    say(table(result["windows"]))
    window = result["windows"].get("session", {})
    session = window.get("session_drained") or {}
    say(
        f"session window: {window.get('scored_in_window')} copies scored, "
        f"{window.get('dropped_in_window')} dropped; whole session (warm-up included): "
        f"{session.get('sampled')} sampled, {session.get('scored')} scored "
        f"({session.get('greedy')} greedy), refused {session.get('refused')}, "
        f"failures stable {session.get('stableFailures')} canary {session.get('canaryFailures')}"
    )
    say(f"written: {args.out} ({result['seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
