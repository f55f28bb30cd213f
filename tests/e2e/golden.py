"""Golden records on the local cluster: an operator that keeps them on a claim, and test
namespaces where that claim exists and is bound (the modules that need records share these).

On the local executor a claim is a directory under the cache, `pvc/<namespace>/<claim>`
when that directory exists (else `pvc/<claim>`, shared by every namespace): made here,
each namespace's records stay its own and go with it. A runner Job that mounts a claim
its namespace lacks is never scheduled, so only namespaces made here may hold checks of
a golden operator.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from infergate.localcluster.layout import cache_dir
from tests.e2e.support import Operator, install_operator
from tests.harness import Cluster, namespace_for, release_namespace, wait_for

CLAIM = "golden-records"
GOLDEN_CONFIG: dict[str, Any] = {"store": {"pvc": {"claimName": CLAIM}}}


def install_golden_operator(
    cluster: Cluster, config: dict[str, Any] | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Operator]:
    """An operator of its own session keeping golden records as `config` says (default: on
    the claim, the store's default policy)."""
    yield from install_operator(
        cluster,
        extra_args=[f"--golden-config={json.dumps(config or GOLDEN_CONFIG)}", *extra_args],
    )


def store_dir(namespace: str) -> Path:
    """The directory of `namespace`'s claim on this machine: the golden store's root."""
    return cache_dir() / "pvc" / namespace / CLAIM


def golden_namespace(
    operator: Operator, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace of `operator` with the claim its runner Jobs mount, bound."""
    name = namespace_for(request.node.name, f"e2e-{operator.session}", 24)
    store = store_dir(name)
    store.mkdir(parents=True)
    volume = f"{name}-{CLAIM}"
    try:
        cluster.kubectl("create", "namespace", name)
        cluster.apply(_volume(volume, store, name))
        cluster.apply(_claim(volume), name)
        wait_for(
            lambda: cluster.get_json("pvc", CLAIM, "-n", name)["status"].get("phase") == "Bound",
            60,
            f"claim {name}/{CLAIM} to be bound",
        )
        yield name
    finally:
        release_namespace(cluster, name)
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)
        shutil.rmtree(store.parent, ignore_errors=True)


def _volume(name: str, path: Path, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {"namespace": namespace, "name": CLAIM},
        },
    }


def _claim(volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
