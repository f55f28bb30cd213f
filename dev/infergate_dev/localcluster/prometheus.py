"""A real Prometheus beside the local cluster, on loopback.

Its targets are the pods' `prometheus.io/scrape|port|path` annotations, as in a
real cluster's annotation-based scrape config; Debian's build has no Kubernetes
discovery, so `scrape_targets` (a second managed process) lists the pods through
the local API server every few seconds and writes file_sd files. Only pods on the
local executor's nodes are kept: they run for real and have loopback pod IPs;
KWOK's simulated pods have no process to scrape. Two jobs: `infergate-operator`
(the operator's pods; their metrics carry the InferenceDeployment's own
namespace/name labels, kept with honor_labels) and `infergate-engines` (engine
pods, labelled with the deployment's namespace, name and revision). The alerting
rules of manifests/monitoring are loaded.

The binaries are Debian's package unpacked into the cache
(hack/platform-tools.sh prometheus); the data lives in `.cluster/prometheus/`.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from infergate_dev.localcluster import processes, scrape_targets
from infergate_dev.localcluster.layout import ClusterLayout, cache_dir, repo_root

PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"
NAME = "prometheus"
TARGETS_NAME = "prometheus-targets"
RULES = Path("manifests") / "monitoring" / "infergate-alerts.rules.yaml"


class PrometheusError(RuntimeError):
    """Prometheus could not be started or reached."""


def prometheus_dir() -> Path:
    return cache_dir() / f"prometheus-{PROMETHEUS_VERSION}"


def binary(name: str = "prometheus") -> Path:
    """prometheus or promtool, from the cache."""
    return prometheus_dir() / "bin" / name


def _state(layout: ClusterLayout) -> Path:
    return layout.root / "prometheus" / "state.json"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def url(layout: ClusterLayout) -> str | None:
    """The running Prometheus' base URL, or None."""
    if processes.running(layout.run, NAME) is None or not _state(layout).exists():
        return None
    port = json.loads(_state(layout).read_text())["port"]
    return f"http://127.0.0.1:{port}"


def config(targets: Path, rules: Path, interval_seconds: float) -> dict[str, Any]:
    """prometheus.yml: the two jobs (file_sd files in `targets`) and the alerting rules."""
    interval = f"{interval_seconds:g}s"
    jobs = [
        {
            "job_name": job,
            # The operator's metrics carry the deployments' own namespace/name labels.
            "honor_labels": True,
            "file_sd_configs": [
                {"files": [str(targets / f"{job}.json")], "refresh_interval": interval}
            ],
        }
        for job in (scrape_targets.OPERATOR_JOB, scrape_targets.ENGINES_JOB)
    ]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }


def scrape_interval(layout: ClusterLayout) -> float:
    """Seconds between scrapes of the running Prometheus (from its config)."""
    loaded = yaml.safe_load((layout.root / "prometheus" / "prometheus.yml").read_text())
    return float(str(loaded["global"]["scrape_interval"]).removesuffix("s"))


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def up(layout: ClusterLayout, *, interval_seconds: float = 5.0, say: bool = True) -> str:
    """Start Prometheus if it is not running; its base URL."""
    running = url(layout)
    if running is not None and _ready(running):
        return running
    if not binary().exists():
        raise PrometheusError(
            f"no prometheus at {binary()} (hack/platform-tools.sh prometheus, or make setup)"
        )
    if not layout.kubeconfig.exists():
        raise PrometheusError("the local cluster is not set up (infergate-dev localcluster up)")
    home = layout.root / "prometheus"
    (home / "data").mkdir(parents=True, exist_ok=True)
    targets = home / "targets"
    port = _free_port()
    config_file = home / "prometheus.yml"
    config_file.write_text(
        yaml.safe_dump(config(targets, repo_root() / RULES, interval_seconds), sort_keys=False)
    )
    if processes.running(layout.run, TARGETS_NAME) is None:
        processes.start(
            layout.run,
            layout.logs,
            TARGETS_NAME,
            [sys.executable, "-m", "infergate_dev.localcluster.scrape_targets",
             f"--kubeconfig={layout.kubeconfig}", f"--out={targets}",
             f"--interval={min(interval_seconds, 2.0):g}"],
        )  # fmt: skip
    argv = [
        str(binary()),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--web.enable-lifecycle",
    ]
    processes.start(layout.run, layout.logs, NAME, argv, cwd=home)
    _state(layout).write_text(json.dumps({"port": port}))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _ready(base):
            if say:
                print(f"prometheus up at {base}")
            return base
        if processes.running(layout.run, NAME) is None:
            break
        time.sleep(0.25)
    log = layout.logs / f"{NAME}.log"
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise PrometheusError(f"prometheus did not become ready; end of {log}:\n{tail}")


def down(layout: ClusterLayout) -> bool:
    """Stop the Prometheus `up` started; True if one was running."""
    stopped = processes.stop(layout.run, NAME)
    processes.stop(layout.run, TARGETS_NAME)
    _state(layout).unlink(missing_ok=True)
    return stopped


def query(base: str, expression: str, **params: str) -> list[dict[str, Any]]:
    """The result vector/matrix of one PromQL query (`/api/v1/query`, or query_range with start)."""
    path = "query_range" if "start" in params else "query"
    answer = httpx.get(
        f"{base}/api/v1/{path}", params={"query": expression, **params}, timeout=30
    ).json()
    if answer.get("status") != "success":
        raise PrometheusError(f"{expression}: {answer.get('error')}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title [refId], PromQL) of every panel target of a Grafana dashboard."""
    return [
        (f"{panel['title']} [{target['refId']}]", target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def bind(expression: str, variables: dict[str, str]) -> str:
    """A dashboard query with its Grafana variables ($name, ${name}) replaced."""
    return re.sub(r"\$\{?(\w+)\}?", lambda match: variables[match.group(1)], expression)


def last_values(
    base: str, expression: str, start: float, end: float, step: float = 2.0
) -> list[tuple[dict[str, str], float]]:
    """Each series of a range query over [start, end] with its last value."""
    result = query(base, expression, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
    return [
        (dict(series["metric"]), float(series["values"][-1][1]))
        for series in result
        if series.get("values")
    ]
