"""The executor's stand-in for cluster DNS: the names a group's pods resolve each other by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infergate.api import InferenceDeploymentSpec
from infergate.render import render_revision
from infergate_dev.localcluster.executor import dns
from infergate_dev.localcluster.executor.pod import PodRunner, Site
from infergate_dev.localcluster.executor.volumes import Mount


def pod(
    name: str,
    ip: str | None,
    *,
    subdomain: str | None = "qwen-abc",
    hostname: str | None = None,
    ready: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    spec: dict[str, Any] = {}
    if subdomain:
        spec["subdomain"] = subdomain
    if hostname:
        spec["hostname"] = hostname
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": spec, "status": status}


def service(name: str, *, headless: bool = True, not_ready: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterIP": "None" if headless else "10.96.0.7"}
    if not_ready:
        spec["publishNotReadyAddresses"] = True
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec}


def test_a_group_leader_resolves_by_the_lws_leader_address_and_its_full_names() -> None:
    text = dns.hosts_file([pod("qwen-abc-0", "127.0.1.5")], [service("qwen-abc")])
    assert text.startswith(dns.BASE)
    assert text.splitlines()[-1] == (
        "127.0.1.5\tqwen-abc-0.qwen-abc.team qwen-abc-0.qwen-abc.team.svc "
        "qwen-abc-0.qwen-abc.team.svc.cluster.local"
    )


def test_the_pod_hostname_names_it_where_set() -> None:
    text = dns.hosts_file(
        [pod("qwen-abc-0-1", "127.0.1.6", hostname="qwen-abc-0-1")], [service("qwen-abc")]
    )
    assert "127.0.1.6\tqwen-abc-0-1.qwen-abc.team " in text


@pytest.mark.parametrize(
    ("the_pod", "the_service", "why"),
    [
        (pod("a", None), service("qwen-abc"), "no IP yet"),
        (pod("a", "127.0.1.5", subdomain=None), service("qwen-abc"), "no subdomain"),
        (pod("a", "127.0.1.5"), service("other"), "no Service named after the subdomain"),
        (pod("a", "127.0.1.5"), service("qwen-abc", headless=False), "Service not headless"),
        (pod("a", "127.0.1.5"), service("qwen-abc", not_ready=False), "not ready, not published"),
        (pod("a", "127.0.1.5", deleting=True), service("qwen-abc"), "terminating"),
    ],
)
def test_no_record_where_cluster_dns_would_give_none(
    the_pod: dict[str, Any], the_service: dict[str, Any], why: str
) -> None:
    assert dns.hosts_file([the_pod], [the_service]) == dns.BASE, why


def test_a_rendered_groups_leader_resolves_beside_the_revision_service() -> None:
    """A group as infergate renders it: the revision Service and the LWS controller's
    headless Service (named after the LeaderWorkerSet, as the webhook names the pods'
    subdomain) both exist, and the leader resolves by LWS_LEADER_ADDRESS."""
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "tiny", "uri": "pvc://models/tiny"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096},
            "accelerator": {"kind": "nvidia-gpu"},
            "topology": {"nodes": 2, "acceleratorsPerNode": 1, "pipelineParallelSize": 2},
            "rollout": {"autoPromote": False},
        }
    )
    objects = render_revision("qwen", "team", spec)
    group = objects.deployment["metadata"]["name"]
    leader = pod(f"{group}-0", "127.0.1.5", subdomain=group, hostname=f"{group}-0")
    services = [objects.service, objects.stable_service, service(group)]
    text = dns.hosts_file([leader], services)
    assert f"127.0.1.5\t{group}-0.{group}.team " in text


def test_a_ready_pod_behind_a_headless_service_is_published() -> None:
    text = dns.hosts_file(
        [pod("a", "127.0.1.5", ready=True)], [service("qwen-abc", not_ready=False)]
    )
    assert "127.0.1.5\ta.qwen-abc.team" in text


def test_a_group_pod_gets_a_private_tmp_first_then_the_hosts_file(tmp_path: Path) -> None:
    site = Site(tmp_path, tmp_path, tmp_path, "127.0.0.1", 6443, [], tmp_path / "hosts")
    pod = {"metadata": {"name": "qwen-abc-0", "namespace": "team", "uid": "u-1"},
           "spec": {"subdomain": "qwen-abc", "containers": []}}  # fmt: skip
    runner = PodRunner(pod, "127.0.0.9", None, site)  # type: ignore[arg-type]
    runner.pod_dir.mkdir()
    (tmp_path / "cache").mkdir()
    volumes = [Mount(tmp_path / "cache", "/tmp/cache", False), Mount(tmp_path, "/data", True)]
    mounts = runner._group_mounts(volumes)
    private = runner.pod_dir / "tmp"
    assert [(m.source, m.target) for m in mounts] == [
        (private, "/tmp"),
        (tmp_path / "hosts", "/etc/hosts"),
        (tmp_path / "cache", "/tmp/cache"),
        (tmp_path, "/data"),
    ]
    assert mounts[1].read_only
    # The volume under /tmp still has its mount point once the private /tmp is in place.
    assert (private / "cache").is_dir()
