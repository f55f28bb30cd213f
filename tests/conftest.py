"""Shared fixtures: the local cluster (session-wide, reused if already up) and
a fresh namespace per test, torn down with finalizers stripped."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from infergate.localcluster import controlplane, processes
from infergate.localcluster.layout import ClusterLayout
from tests.harness import FINALIZED_KINDS, Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    layout = ClusterLayout.default()
    # A cluster that is up (or partly up) belongs to someone else: reuse it, and
    # leave it running afterwards.
    started_here = not any(processes.running(layout.run, n) for n in controlplane.COMPONENTS)
    controlplane.up(layout, say=False)
    yield Cluster(layout)
    if started_here:
        controlplane.down(layout)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.lower().replace("_", "-")
    name = "".join(ch for ch in base if ch.isalnum() or ch == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    for kind in FINALIZED_KINDS:
        listed = cluster.kubectl("get", kind, "-n", name, "-o", "name", check=False)
        for ref in listed.stdout.split() if listed.returncode == 0 else []:
            with contextlib.suppress(AssertionError):
                cluster.kubectl(
                    "patch", ref, "-n", name, "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}',
                )  # fmt: skip
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
