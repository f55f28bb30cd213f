"""Golden records on the local cluster: an operator that keeps them on a claim, bound in
its own namespace (tests/harness.py `golden_claim`), where its runner Jobs run and mount
it; the checks' namespaces hold no claim. One claim serves every namespace of the
operator, its records kept apart by namespace: each test reads its own namespace's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import Operator, install_operator
from tests.harness import (
    GOLDEN_CLAIM,
    Cluster,
    golden_claim,
    golden_store_dir,
    namespace_for,
    release_namespace,
)

GOLDEN_CONFIG: dict[str, Any] = {"store": {"pvc": {"claimName": GOLDEN_CLAIM}}}


def install_golden_operator(
    cluster: Cluster, config: dict[str, Any] | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Operator]:
    """An operator of its own session keeping golden records as `config` says (default: on
    the claim, the store's default policy), the claim bound in its namespace (the runner
    namespace) before any check starts."""
    installed = install_operator(
        cluster,
        extra_args=[f"--golden-config={json.dumps(config or GOLDEN_CONFIG)}", *extra_args],
    )
    operator = next(installed)
    try:
        with golden_claim(cluster, operator.namespace):
            yield operator
    finally:
        installed.close()  # the operator's namespace, with the claim, goes after the volume


def golden_store(operator: Operator) -> Path:
    """The directory of `operator`'s claim on this machine, as an admin reads it."""
    return golden_store_dir(operator.namespace)


def golden_namespace(
    operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace of `operator` for one test: its checks' runners mount the claim of the
    operator's namespace."""
    name = namespace_for(request.node.name, f"e2e-{operator.session}", 24)
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        release_namespace(cluster, name)
