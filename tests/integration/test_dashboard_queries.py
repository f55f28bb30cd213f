"""Every query of the Grafana dashboard returns data from a real Prometheus that scraped a
real operator while it rolled out, promoted and rolled back.

A Prometheus (Debian's, from the version cache) runs beside the local cluster and finds
the operator pod by Kubernetes pod discovery and its prometheus.io annotations, as in a
real cluster. The session's operator then deploys a revision, promotes a canary whose
check passed, rolls back one whose check failed, and meets an API error (a
ResourceQuota refuses a ConfigMap). Each panel's query, with the dashboard's variables
set to this test's namespace, is run as a range query over the test's window; each must
return at least one series with values. The values are printed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from infergate_dev.localcluster import prometheus
from tests.harness import REPO, Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    idep_namespace,
    operator,
)
from tests.tools import tool

pytestmark = pytest.mark.cluster

__all__ = ["idep_namespace", "operator"]

DASHBOARD = REPO / "dashboards" / "infergate.json"
SCRAPE_SECONDS = 1.0


@pytest.fixture(scope="module")
def prometheus_url(cluster: Cluster) -> Iterator[str]:
    tool("prometheus")  # fails naming make platform-tools when missing
    started_here = prometheus.url(cluster.layout) is None
    base = prometheus.up(cluster.layout, interval_seconds=SCRAPE_SECONDS, say=False)
    yield base
    if started_here:
        prometheus.down(cluster.layout)


def _has(base: str, expression: str) -> bool:
    return bool(prometheus.query(base, expression))


def test_every_dashboard_query_returns_data_after_rollouts(
    cluster: Cluster, operator: OperatorInstall, idep_namespace: str, prometheus_url: str
) -> None:
    # Grafana's $__rate_interval: at least four scrape intervals (of a Prometheus that may
    # have been running before this test, with its own interval).
    scrape = prometheus.scrape_interval(cluster.layout)
    begin = time.time()
    pod = operator.wait_ready()["metadata"]["name"]
    wait_for(
        lambda: _has(prometheus_url, f'up{{job="infergate-operator", pod="{pod}"}} == 1'),
        120, "Prometheus to scrape the operator pod",
    )  # fmt: skip

    # A drift watch whose first run is an hour away: the drift gauge shows 0 (not drifted)
    # for a watched stable revision; without a watch it is absent by design.
    manifest = deployment_manifest(replicas=1)
    manifest["spec"]["rollout"]["parity"]["watch"] = {"intervalSeconds": 3600}
    idep = Idep(cluster, idep_namespace, manifest)
    idep.apply()
    idep.wait_stable()
    # A canary whose check passes is promoted.
    idep.apply(dtype="float16")
    canary, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Passed", passed=True,
                 metrics={"tokenMatchRate": 1.0, "meanKl": 1.2e-5, "hiddenCosineP1": 0.99995})  # fmt: skip
    idep.wait(
        "promotion", lambda s: s.get("stableRevision") == canary and s.get("phase") == "Stable"
    )
    # A canary whose check fails is rolled back.
    idep.apply(dtype="float32")
    _, check = idep.wait_check()
    idep.verdict(check["metadata"]["name"], "Failed", passed=False,
                 metrics={"tokenMatchRate": 0.5, "meanKl": 3.4e-3, "hiddenCosineP1": 0.97})  # fmt: skip
    idep.wait_phase("RolledBack")
    # An API error: a quota that refuses the next revision's pinned ConfigMap.
    configmaps = len(cluster.get_json("configmaps", "-n", idep_namespace)["items"])
    cluster.apply(
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-more-configmaps"},
         "spec": {"hard": {"count/configmaps": str(configmaps)}}},
        idep_namespace,
    )  # fmt: skip
    idep.apply(dtype="bfloat16", maxModelLen=1024)
    errors = 'infergate_api_errors_total{resource="configmaps", code="403"}'
    wait_for(lambda: _has(prometheus_url, errors), 120, "the refused ConfigMap in Prometheus")
    # Some scrapes after the last change, so every rate window holds two samples.
    time.sleep(8 * scrape)

    end = time.time()
    variables = {
        "namespace": idep_namespace,  # DNS labels: nothing a regex needs escaped
        "name": ".*",
        "job": "infergate-operator",
        "__rate_interval": f"{int(max(20, 4 * scrape))}s",
        "__range": f"{int(end - begin)}s",
    }
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    failures, shown = [], []
    for where, expression in prometheus.panel_queries(dashboard):
        bound = prometheus.bind(expression, variables)
        values = prometheus.last_values(prometheus_url, bound, begin, end)
        if not values:
            failures.append(f"{where}: no data for {bound}")
            continue
        last = "; ".join(
            f"{','.join(f'{k}={v}' for k, v in sorted(m.items()) if k not in ('job', 'instance', 'pod', 'pod_namespace'))}"
            f" -> {v:.6g}"
            for m, v in values[:4]
        )
        shown.append(f"{where}: {len(values)} series; last {last}")
    print("\n" + "\n".join(shown))  # noqa: T201 - the values each panel showed
    assert failures == []
