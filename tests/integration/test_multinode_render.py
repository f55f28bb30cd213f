"""The LeaderWorkerSets of the multi-node examples, as the real API server takes them.

Each multi-node example of manifests/examples is rendered as the operator renders a
revision, and its objects are sent to the local cluster's API server with the pinned
LeaderWorkerSet CRD (sigs.k8s.io/lws, `hack/build-control-plane.sh lws`, installed by
`infergate-dev localcluster up`) in a server-side dry run: nothing is stored. The server
must accept them and keep every field rendered (a structural schema silently prunes the
fields it does not know, so an accepted object could still have lost its group policy).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infergate.api import InferenceDeploymentSpec
from infergate.api.golden import quantity_bytes
from infergate.render import render_revision
from infergate_dev.localcluster.layout import LWS_VERSION, lws_crds
from tests.harness import Cluster
from tests.unit.api.manifests import example_documents

pytestmark = pytest.mark.cluster

_LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"


def _multinode_examples() -> list[tuple[str, dict[str, Any]]]:
    return [
        (stem, document)
        for stem, document in example_documents()
        if document.get("kind") == "InferenceDeployment"
        and document["spec"].get("topology", {}).get("nodes", 1) > 1
    ]


@pytest.fixture(scope="module")
def lws(cluster: Cluster) -> Cluster:
    """The pinned LeaderWorkerSet CRD, installed and Established."""
    if not lws_crds().is_dir():
        pytest.fail(
            f"the LeaderWorkerSet CRD {LWS_VERSION} is not cached at {lws_crds()}: run "
            "`hack/build-control-plane.sh lws`, then `infergate-dev localcluster up`"
        )
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(lws_crds()))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{_LWS_CRD}")
    return cluster


def _dry_run(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
        input=json.dumps(manifest), check=False,
    )  # fmt: skip


def _missing(sent: Any, kept: Any, path: str = "") -> list[str]:
    """Paths of `sent` that `kept` (the server's answer) does not hold with the same value."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [path or "."]
        return [
            miss
            for key, value in sent.items()
            for miss in _missing(value, kept.get(key, _ABSENT), f"{path}.{key}")
        ]
    if isinstance(sent, list):
        if not isinstance(kept, list) or len(kept) != len(sent):
            return [path]
        return [miss for i, v in enumerate(sent) for miss in _missing(v, kept[i], f"{path}[{i}]")]
    return [] if sent == kept or _same_amount(sent, kept) else [path]


def _same_amount(sent: Any, kept: Any) -> bool:
    """A quantity the LWS controller's webhook (with `--with lws`) re-encoded: 1024Gi as 1Ti."""
    try:
        return isinstance(sent, str) and quantity_bytes("", sent) == quantity_bytes("", kept)
    except (ValueError, AttributeError):
        return False


_ABSENT = object()


def test_the_docs_ship_a_gpu_and_an_ascend_group() -> None:
    kinds = {doc["spec"]["engine"]["kind"] for _, doc in _multinode_examples()}
    assert kinds == {"vllm", "mindformers"}


@pytest.mark.parametrize(("stem", "document"), _multinode_examples(), ids=lambda v: str(v)[:40])
def test_the_api_server_takes_every_rendered_object_of_a_group_revision_whole(
    lws: Cluster, namespace: str, stem: str, document: dict[str, Any]
) -> None:
    spec = InferenceDeploymentSpec.model_validate(document["spec"])
    objects = render_revision(document["metadata"]["name"], namespace, spec)
    assert objects.deployment["kind"] == "LeaderWorkerSet"
    for manifest in objects.manifests():
        sent = _dry_run(lws, namespace, manifest)
        kind = manifest["kind"]
        assert sent.returncode == 0, f"{stem}: {kind} refused: {sent.stderr}"
        lost = _missing(manifest, json.loads(sent.stdout))
        assert lost == [], f"{stem}: the API server dropped or changed {kind} fields {lost}"


def test_the_pinned_crd_refuses_what_the_lws_controller_would_not_run(
    lws: Cluster, namespace: str
) -> None:
    """The dry run is a real check: the CRD's own rules refuse a group policy it lacks."""
    _, document = _multinode_examples()[0]
    spec = InferenceDeploymentSpec.model_validate(document["spec"])
    group = render_revision(document["metadata"]["name"], namespace, spec).deployment
    startup = copy.deepcopy(group)
    startup["spec"]["startupPolicy"] = "WhenReady"
    restart = copy.deepcopy(group)
    restart["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RestartAlone"
    for field, broken in (("startupPolicy", startup), ("restartPolicy", restart)):
        sent = _dry_run(lws, namespace, broken)
        assert sent.returncode != 0, f"{field} out of its enum was accepted"
        assert field in sent.stderr, sent.stderr
