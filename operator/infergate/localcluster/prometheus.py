"""A real Prometheus beside the local cluster, on loopback.

It finds its targets the way a Prometheus in a real cluster does: Kubernetes pod
discovery against the API server (here the local one, on 127.0.0.1, with the
admin client certificate) and the pods' `prometheus.io/scrape|port|path`
annotations. Only pods on the local executor's nodes are kept: they run for real
and have loopback pod IPs; KWOK's simulated pods have no process to scrape.
Two jobs: `infergate-operator` (the operator's pods; their metrics carry the
InferenceDeployment's own namespace/name labels, kept with honor_labels) and
`infergate-engines` (engine pods, labelled with the deployment's namespace, name
and revision). The alerting rules of manifests/monitoring are loaded.

The binaries are Debian's package unpacked into the cache
(hack/platform-tools.sh prometheus); the data lives in `.cluster/prometheus/`.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from infergate.localcluster import nodes, processes
from infergate.localcluster.layout import ClusterLayout, cache_dir, repo_root

PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"
NAME = "prometheus"
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


def _pod_job(
    name: str, kubeconfig: Path, keep: list[dict[str, Any]], labels: list[dict[str, Any]]
) -> dict[str, Any]:
    executor_nodes = "|".join(node.name for node in nodes.executor_nodes())
    return {
        "job_name": name,
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}],
        "relabel_configs": [
            *keep,
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "regex": "true",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_node_name"],
                "regex": executor_nodes,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Running",
                "action": "keep",
            },
            {
                "source_labels": [
                    "__meta_kubernetes_pod_ip",
                    "__meta_kubernetes_pod_annotation_prometheus_io_port",
                ],
                "regex": r"(.+);(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            *labels,
        ],
    }


def config(kubeconfig: Path, rules: Path, interval_seconds: float) -> dict[str, Any]:
    """prometheus.yml: pod discovery through `kubeconfig`, the two jobs, the rules."""
    interval = f"{interval_seconds:g}s"
    operator = _pod_job(
        "infergate-operator",
        kubeconfig,
        keep=[
            {
                "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                "regex": "infergate-operator",
                "action": "keep",
            }
        ],
        labels=[
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "pod_namespace"}
        ],
    )
    engines = _pod_job(
        "infergate-engines",
        kubeconfig,
        keep=[
            {
                "source_labels": ["__meta_kubernetes_pod_label_infergate_io_revision"],
                "regex": ".+",
                "action": "keep",
            }
        ],
        labels=[
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {
                "source_labels": ["__meta_kubernetes_pod_label_infergate_io_deployment"],
                "target_label": "name",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_label_infergate_io_revision"],
                "target_label": "revision",
            },
        ],
    )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [operator, engines],
    }


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
        raise PrometheusError("the local cluster is not set up (infergate localcluster up)")
    home = layout.root / "prometheus"
    (home / "data").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config_file = home / "prometheus.yml"
    config_file.write_text(
        yaml.safe_dump(
            config(layout.kubeconfig, repo_root() / RULES, interval_seconds), sort_keys=False
        )
    )
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
