"""`infergate crds --apply` (the chart's upgrade hook): each CRD's spec becomes exactly this
version's (a field dropped from the schema is gone), others' labels and annotations stay,
a missing CRD is created, and a replace that lost a race is read again."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from infergate.api.crd import RESOURCE_KINDS, crd_document
from infergate.errors import ConflictError, NotFoundError
from infergate.kube.client import KubeClient
from infergate.kube.crd_install import install_crds

JSON = dict[str, Any]


class Server:
    """CRDs by name; PUT checks the resourceVersion as the API server does."""

    def __init__(self, stored: dict[str, JSON], conflicts: int = 0) -> None:
        self.stored = stored
        self.conflicts = conflicts
        self.verbs: list[str] = []

    def request(self, verb: str, path: str, *, body: Any = None, **_: Any) -> JSON:
        self.verbs.append(verb)
        name = path.rsplit("/", 1)[-1]
        if verb == "GET":
            if name not in self.stored:
                raise NotFoundError(f"{name} not found")
            return copy.deepcopy(self.stored[name])
        if verb == "POST":
            stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            self.stored[body["metadata"]["name"]] = stored
            return stored
        assert verb == "PUT"
        if self.conflicts:
            self.conflicts -= 1
            raise ConflictError("the object has been modified")
        current = self.stored[name]
        assert body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        version = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.stored[name] = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        return self.stored[name]


def _new() -> list[JSON]:
    return [crd_document(resource) for resource in RESOURCE_KINDS]


def _old(crd: JSON) -> JSON:
    old = copy.deepcopy(crd)
    old["metadata"]["resourceVersion"] = "7"
    old["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    old["metadata"]["annotations"] = {"meta.helm.sh/release-name": "infergate"}
    schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["droppedField"] = {"type": "string"}
    return old


def _install(server: Server) -> list[str]:
    said: list[str] = []
    install_crds(cast(KubeClient, server), _new(), said.append)
    return said


def test_an_older_crd_is_replaced_whole_and_keeps_others_metadata() -> None:
    new = _new()
    server = Server({crd["metadata"]["name"]: _old(crd) for crd in new})
    said = _install(server)
    assert said == [f"replaced CustomResourceDefinition {c['metadata']['name']}" for c in new]
    for crd in new:
        stored = server.stored[crd["metadata"]["name"]]
        assert stored["spec"] == crd["spec"]
        assert "droppedField" not in str(stored["spec"])
        assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert stored["metadata"]["annotations"] == {"meta.helm.sh/release-name": "infergate"}
    assert _install(server) == [f"CustomResourceDefinition {c['metadata']['name']} unchanged"
                                for c in new]  # fmt: skip


def test_a_missing_crd_is_created() -> None:
    server = Server({})
    assert all(line.startswith("created ") for line in _install(server))
    assert sorted(server.stored) == sorted(c["metadata"]["name"] for c in _new())


def test_a_replace_that_lost_a_race_reads_again() -> None:
    server = Server({crd["metadata"]["name"]: _old(crd) for crd in _new()}, conflicts=2)
    _install(server)
    assert server.verbs.count("GET") == len(_new()) + 2


def test_a_replace_that_keeps_losing_fails() -> None:
    server = Server({crd["metadata"]["name"]: _old(crd) for crd in _new()}, conflicts=99)
    with pytest.raises(ConflictError):
        _install(server)
