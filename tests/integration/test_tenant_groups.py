"""Groups a tenant cannot impersonate: the attacker's attempts on a multi-node rollout, on
the real API server with the real LeaderWorkerSet controller.

The attacker holds the namespace's built-in `edit` role plus infergate's aggregated tenant
roles (manifests/tenant), as in test_tenant_sides.py, with the admission policies of
manifests/admission installed, naming this session's operator. A multi-node rollout of a
dtype change is in flight: the stable group serves, the canary group waits for its check.
The LWS controller acts under the user its release runs as (localcluster/lws.py), which
the policies name as the one writer of a group's StatefulSets.

The runner calls a group side only through the chain leader pod -> leader StatefulSet ->
the LeaderWorkerSet whose uid the operator recorded (runner/side_pods.py); that chain holds
only if nobody else writes LeaderWorkerSets, StatefulSets or pods wearing infergate.io
metadata. Each attempt is refused at admission; the real runner, with its own
ServiceAccount's token, then dials no pod but the revisions' own.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from infergate_dev.localcluster import lws
from tests.harness import Cluster, wait_for
from tests.integration.admission_support import AdmissionSession, user
from tests.integration.controller_support import Idep, operator
from tests.integration.test_controller_groups import group_manifest, group_pods, group_sets
from tests.integration.test_tenant_sides import (
    TENANT,
    _as_tenant,
    _dialled,
    _enforced,
    _refused,
    guarded,
    tenant,
)

pytestmark = pytest.mark.cluster
__all__ = ["guarded", "operator", "tenant"]

LWS_RESOURCE = "leaderworkersets.leaderworkerset.x-k8s.io"


@pytest.fixture(scope="module", autouse=True)
def lws_controller(cluster: Cluster) -> None:
    lws.start(cluster.layout, say=False)


@dataclass
class _GroupCheck:
    """What `_dialled` reads of a rollout: where its check is."""

    cluster: Cluster
    namespace: str
    check: str


def _can_i(guarded: AdmissionSession, namespace: str) -> str:
    asked = guarded.as_user(TENANT, "auth", "can-i", "create", LWS_RESOURCE, "-n", namespace)
    return asked.stdout.strip()


def _leader(pods: list[dict[str, Any]]) -> dict[str, Any]:
    [leader] = [
        p
        for p in pods
        if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    ]
    return leader


def test_a_tenant_can_neither_make_nor_change_a_group_and_the_runner_dials_only_leaders(
    guarded: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """Holes: a LeaderWorkerSet, a StatefulSet or a pod made by the tenant to look like the
    canary's group (its labels, a leader's owner reference) and running the stable's
    templates; a change to the canary's own LeaderWorkerSet.

    `edit` holds no rights on LeaderWorkerSets (the LWS release ships no roles aggregated
    into it); a cluster may grant them, so here the tenant is granted them on top and what
    refuses is the policy. The operator's own groups, made by the LWS controller under the
    same policies, roll out; a group of the tenant's wearing nothing of infergate's is
    theirs to run."""
    idep = Idep(cluster, tenant, group_manifest())
    idep.apply()
    stable = idep.wait_stable(timeout=180)
    idep.apply(dtype="float16")
    canary, check = idep.wait_check(timeout=180)
    _enforced(guarded, tenant)

    assert _can_i(guarded, tenant) == "no"
    guarded.grant(
        tenant, "group-writer",
        [{"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"],
          "verbs": ["get", "list", "create", "update", "patch"]}],
        user(TENANT),
    )  # fmt: skip
    wait_for(lambda: _can_i(guarded, tenant) == "yes", 60, "the tenant's LeaderWorkerSet rights")

    sets = group_sets(cluster, tenant)
    canary_labels = dict(sets[canary]["metadata"]["labels"])
    stable_spec = sets[stable]["spec"]
    group = stable_spec["leaderWorkerTemplate"]
    template = copy.deepcopy(group.get("leaderTemplate") or group["workerTemplate"])

    def a_group(name: str, labels: dict[str, str], templates: dict[str, str]) -> dict[str, Any]:
        spec = copy.deepcopy(stable_spec)
        for which in ("leaderTemplate", "workerTemplate"):
            if which in spec["leaderWorkerTemplate"]:
                spec["leaderWorkerTemplate"][which]["metadata"] = {"labels": dict(templates)}
        return {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }

    _refused(
        _as_tenant(guarded, tenant, "create", a_group("look-alike", canary_labels, canary_labels)),
        "a LeaderWorkerSet labelled as the canary's",
    )
    _refused(
        _as_tenant(guarded, tenant, "create", a_group("templated", {"app": "x"}, canary_labels)),
        "a LeaderWorkerSet whose templates wear the canary's labels",
    )
    relabelled = guarded.as_user(
        TENANT, "patch", LWS_RESOURCE, f"qwen-{canary}-group", "-n", tenant, "--type=merge",
        "-p", json.dumps({"metadata": {"annotations": {"tenant": "was-here"}}}),
    )  # fmt: skip
    _refused(relabelled, "a change to the canary's LeaderWorkerSet")

    leader = _leader(group_pods(cluster, tenant, canary))
    leader_labels = dict(leader["metadata"]["labels"])
    [owner] = [r for r in leader["metadata"]["ownerReferences"] if r.get("controller")]
    assert owner["kind"] == "StatefulSet"
    look_alike_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "leaders"},
        "spec": {
            "serviceName": "leaders",
            "selector": {"matchLabels": leader_labels},
            "template": {"metadata": {"labels": leader_labels}, "spec": template["spec"]},
        },
    }
    _refused(
        _as_tenant(guarded, tenant, "create", look_alike_set),
        "a StatefulSet of pods wearing the canary leader's labels",
    )
    # With the leader's own annotations too (the group size the LWS pod webhook asks
    # for), so that what refuses it is infergate's policy, not a missing annotation.
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "leader-look-alike", "labels": leader_labels,
                     "annotations": dict(leader["metadata"].get("annotations") or {}),
                     "ownerReferences": [owner]},
        "spec": template["spec"],
    }  # fmt: skip
    _refused(_as_tenant(guarded, tenant, "create", bare), "a pod posing as the canary's leader")

    # What holds a restarted group out of serving is its leader's readiness gate, a
    # condition of the pod's status (docs/multi-node.md): `edit` grants no write of
    # pods/status, so the tenant cannot set it True.
    gate = {"status": {"conditions": [{"type": "infergate.io/checked", "status": "True"}]}}
    opened = guarded.as_user(
        TENANT, "patch", "pod", leader["metadata"]["name"], "-n", tenant, "--subresource=status",
        "--type=strategic", "-p", json.dumps(gate),
    )  # fmt: skip
    assert not opened.allowed, "the tenant set a readiness gate condition of the leader"
    assert "forbidden" in opened.stderr.lower(), opened.stderr

    # The tenant's own group, wearing nothing of infergate's: admitted, and the LWS
    # controller makes its leader StatefulSet.
    mine = _as_tenant(guarded, tenant, "create", a_group("mine", {"app": "mine"}, {"app": "mine"}))
    assert mine.allowed, mine.stderr
    wait_for(
        lambda: (
            cluster.kubectl("get", "statefulset", "mine", "-n", tenant, check=False).returncode == 0
        ),
        60,
        "the LWS controller to make the tenant's own group",
    )

    own = {
        p["status"].get("podIP")
        for revision in (stable, canary)
        for p in group_pods(cluster, tenant, revision)
        if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    }
    chosen = _dialled(guarded, _GroupCheck(cluster, tenant, str(check["metadata"]["name"])))  # type: ignore[arg-type]
    assert chosen <= own, f"the runner chose {sorted(chosen - own)}, no leader of either group"
    names = {p["metadata"]["name"] for p in cluster.get_json("pods", "-n", tenant)["items"]}
    assert "leader-look-alike" not in names
    assert set(group_sets(cluster, tenant)) == {stable, canary}
    status = idep.status()
    assert status["stableRevision"] == stable
    assert status.get("canaryRevision") == canary
