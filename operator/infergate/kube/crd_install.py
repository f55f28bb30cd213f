"""Bring the cluster's CustomResourceDefinitions to those of this version.

Helm installs a chart's crds/ on the first install only and never upgrades them, so the
chart's pre-upgrade hook runs `infergate crds --apply` from the new image: each CRD's
spec becomes exactly the one this version's models generate. A replace (read, then PUT
with the resourceVersion read) rather than an apply: a field a newer version drops from
the schema is then gone, where a server-side apply would leave it to the manager that
first created the CRD (Helm, kubectl). Labels and annotations others set are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from infergate.errors import ConflictError, NotFoundError
from infergate.jsontypes import JSON
from infergate.kube.client import KubeClient

_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_ATTEMPTS = 5


def install_crds(client: KubeClient, crds: Iterable[JSON], report: Callable[[str], None]) -> None:
    """Create or replace every CRD of `crds`, retrying a replace that lost a race."""
    for crd in crds:
        name = crd["metadata"]["name"]
        for attempt in range(_ATTEMPTS):
            try:
                report(_install_one(client, crd, name))
                break
            except ConflictError:
                if attempt == _ATTEMPTS - 1:
                    raise


def _install_one(client: KubeClient, crd: JSON, name: str) -> str:
    what = f"CustomResourceDefinition {name}"
    try:
        current = client.request(
            "GET", f"{_PATH}/{name}", what=what, resource="customresourcedefinitions"
        )
    except NotFoundError:
        client.request("POST", _PATH, what=what, resource="customresourcedefinitions", body=crd)
        return f"created {what}"
    metadata = current["metadata"]
    body = {
        "apiVersion": crd["apiVersion"],
        "kind": crd["kind"],
        "metadata": {
            "name": name,
            "resourceVersion": metadata["resourceVersion"],
            "labels": {**(metadata.get("labels") or {}), **(crd["metadata"].get("labels") or {})},
            "annotations": {
                **(metadata.get("annotations") or {}),
                **(crd["metadata"].get("annotations") or {}),
            },
        },
        "spec": crd["spec"],
    }
    if current.get("spec") == crd["spec"]:
        return f"{what} unchanged"
    client.request(
        "PUT", f"{_PATH}/{name}", what=what, resource="customresourcedefinitions", body=body
    )
    return f"replaced {what}"
