"""Shared fixtures: the local cluster (session-wide, reused if already up) and
a fresh namespace per test, torn down with finalizers stripped."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from infergate_dev.localcluster import controlplane, processes
from infergate_dev.localcluster.layout import (
    K8S_VERSION,
    K8S_VERSION_ENV,
    MATRIX_K8S_VERSIONS,
    ClusterLayout,
)
from tests.harness import Cluster, namespace_for, release_namespace


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kubernetes-version",
        choices=(K8S_VERSION, *MATRIX_K8S_VERSIONS),
        default=None,
        help=(
            f"run the cluster tests on this control-plane version (default {K8S_VERSION}), in "
            "a cluster of its own (.cluster-VERSION/); `make test-matrix` runs the tests "
            "marked `matrix` on each other supported version"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    version = config.getoption("--kubernetes-version")
    if version:
        # Read by the layout and inherited by every process the tests start.
        os.environ[K8S_VERSION_ENV] = version


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


@pytest.fixture(scope="session")
def session_cleanups(cluster: Cluster) -> Iterator[list[Callable[[], None]]]:
    """Undo steps of session-wide installs (an operator and its cluster roles), run in
    reverse order before the `cluster` fixture stops a cluster it started.

    Config cleanups would run after that, when kubectl no longer reaches the API server:
    the installs would stay in etcd and come back, running, with the cluster's next start.
    """
    cleanups: list[Callable[[], None]] = []
    yield cleanups
    for cleanup in reversed(cleanups):
        cleanup()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_for(request.node.name, "test", 40)
    cluster.kubectl("create", "namespace", name)
    yield name
    release_namespace(cluster, name)
