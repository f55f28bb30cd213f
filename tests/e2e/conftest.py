"""Fixtures of the end-to-end tests: one operator per session, a namespace per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.support import Operator, install_operator
from tests.harness import Cluster, namespace_for, release_namespace


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def model_variants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tests put changed copies of the fixture model (a corrupted layer, say): a
    directory the session's operator allows file:// models from, beside the fixture's."""
    return tmp_path_factory.mktemp("model-variants")


@pytest.fixture(scope="session")
def operator(cluster: Cluster, model_variants: Path) -> Iterator[Operator]:
    """The operator of this session, installed from manifests/ and Ready."""
    yield from install_operator(cluster, extra_args=[f"--allow-host-path={model_variants}"])


@pytest.fixture
def e2e_namespace(
    operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace the session's operator watches; deleted afterwards."""
    name = namespace_for(request.node.name, f"e2e-{operator.session}", 28)
    cluster.kubectl("create", "namespace", name)
    yield name
    release_namespace(cluster, name)
