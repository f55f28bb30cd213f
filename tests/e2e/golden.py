"""Golden records on the local cluster: an operator that keeps them on a claim, and test
namespaces where that claim exists and is bound (tests/harness.py `golden_claim`). A
runner Job that mounts a claim its namespace lacks is never scheduled, so only namespaces
made here may hold checks of a golden operator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.e2e.support import Operator, install_operator
from tests.harness import GOLDEN_CLAIM, Cluster, golden_claim, namespace_for, release_namespace

GOLDEN_CONFIG: dict[str, Any] = {"store": {"pvc": {"claimName": GOLDEN_CLAIM}}}


def install_golden_operator(
    cluster: Cluster, config: dict[str, Any] | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Operator]:
    """An operator of its own session keeping golden records as `config` says (default: on
    the claim, the store's default policy)."""
    yield from install_operator(
        cluster,
        extra_args=[f"--golden-config={json.dumps(config or GOLDEN_CONFIG)}", *extra_args],
    )


def golden_namespace(
    operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace of `operator` with the claim its runner Jobs mount, bound."""
    name = namespace_for(request.node.name, f"e2e-{operator.session}", 24)
    cluster.kubectl("create", "namespace", name)
    try:
        with golden_claim(cluster, name):
            yield name
    finally:
        release_namespace(cluster, name)
