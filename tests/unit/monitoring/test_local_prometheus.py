"""The local Prometheus' targets and config: only pods that run for real (executor
nodes, loopback IPs), Running and annotated for scraping; operator and engines apart."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from infergate_dev.localcluster import prometheus
from infergate_dev.localcluster.scrape_targets import target_groups, write_targets
from tests.tools import REPO, tool

EXECUTOR = {"executor"}


def _pod(name: str, *, node: str = "executor", phase: str = "Running", scrape: str = "true",
         labels: dict[str, str] | None = None, ip: str = "127.67.0.9") -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {
            "name": name, "namespace": "llm", "labels": labels or {},
            "annotations": {"prometheus.io/scrape": scrape, "prometheus.io/port": "8000",
                            "prometheus.io/path": "/metrics"},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "podIP": ip},
    }  # fmt: skip


ENGINE = {"infergate.io/revision": "abc123", "infergate.io/deployment": "qwen"}
OPERATOR = {"app.kubernetes.io/name": "infergate-operator"}


def test_only_running_annotated_pods_on_executor_nodes_are_scraped() -> None:
    jobs = target_groups(
        [
            _pod("qwen-abc123-1", labels=ENGINE),
            _pod("on-kwok", node="kwok-gpu-0", labels=ENGINE, ip="127.128.0.4"),
            _pod("pending", phase="Pending", labels=ENGINE),
            _pod("not-annotated", scrape="false", labels=ENGINE),
            _pod("infergate-operator-x", labels=OPERATOR, ip="127.67.0.2"),
            _pod("unrelated"),
        ],
        EXECUTOR,
    )
    assert jobs["infergate-engines"] == [
        {
            "targets": ["127.67.0.9:8000"],
            "labels": {"__metrics_path__": "/metrics", "pod": "qwen-abc123-1", "namespace": "llm",
                       "name": "qwen", "revision": "abc123"},
        }
    ]  # fmt: skip
    assert [g["targets"] for g in jobs["infergate-operator"]] == [["127.67.0.2:8000"]]
    # The operator's own metrics carry namespace/name: the target adds neither.
    assert "namespace" not in jobs["infergate-operator"][0]["labels"]


def test_the_config_is_valid_for_promtool(tmp_path: Path) -> None:
    write_targets(tmp_path / "targets", target_groups([_pod("e", labels=ENGINE)], EXECUTOR))
    config = prometheus.config(tmp_path / "targets", REPO / prometheus.RULES, 2.0)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [str(tool("promtool")), "check", "config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout
    assert {job["job_name"] for job in config["scrape_configs"]} == {
        "infergate-operator",
        "infergate-engines",
    }
