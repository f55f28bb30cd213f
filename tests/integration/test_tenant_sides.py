"""Sides a tenant cannot impersonate: the attacker's attempts, on the real API server.

The attacker holds the namespace's built-in `edit` role (which creates pods, workloads,
Services, ConfigMaps and EndpointSlices) plus infergate's aggregated tenant roles
(manifests/tenant), nothing else. The admission policies of manifests/admission are
installed for this module, naming this session's operator (a real one, running under its
own ServiceAccount) and bound to the tests' namespaces. A rollout of a dtype change is in
flight: the stable serves, the canary waits for its check.

Each test is one hole (its docstring names it): what a user with those rights would try
so that a harmful canary is judged on the stable's answers, or a look-alike is taken for
a revision. Each attempt is refused at admission, or the object it makes is never
counted; and the parity runner, run here against the real API server with a real token of
the check's own runner ServiceAccount, calls only pods the recorded Deployments made. The
simulated pods answer nothing, so the runner is stopped where it would first dial its
sides (`Connector.health`), and what it would have dialled is what the test reads.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Cluster, namespace_for, release_namespace, wait_for
from tests.integration.admission_support import (
    ADMISSION_DIR,
    AdmissionSession,
    Result,
    built,
    recorded_runner_account,
    session_policies,
    user,
    wait_until_enforced,
)
from tests.integration.controller_support import (
    Idep,
    OperatorInstall,
    deployment_manifest,
    operator,
)
from tests.integration.test_paritycheck_controller import _Described

pytestmark = pytest.mark.cluster
__all__ = ["operator"]

TENANT = "tenant-editor"
TENANT_ROLES = Path(__file__).resolve().parents[2] / "manifests" / "tenant"
REFUSED = "wears infergate.io metadata"


# -- the attacker's world --------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(
    operator: OperatorInstall, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdmissionSession]:
    """The admission policies, naming this session's real operator, bound to namespaces
    labelled for this module; and the tenant roles, aggregated into `edit`."""
    session = uuid.uuid4().hex[:6]
    install = AdmissionSession(
        cluster, session, operator.namespace, tmp_path_factory.mktemp("sides")
    )
    policies = session_policies(built(cluster, ADMISSION_DIR), session, operator.namespace)
    roles = [d for d in built(cluster, TENANT_ROLES) if d["kind"] == "ClusterRole"]
    for role in roles:
        role["metadata"]["name"] = f"{role['metadata']['name']}-sides-{session}"
    install.apply([*policies, *roles])
    yield install
    for document in [*policies, *roles]:
        cluster.kubectl(
            "delete", document["kind"].lower(), document["metadata"]["name"], check=False
        )


@pytest.fixture
def tenant(
    guarded: AdmissionSession,
    operator: OperatorInstall,
    cluster: Cluster,
    request: pytest.FixtureRequest,
) -> Iterator[str]:
    """A namespace the operator watches, under the policies, where the tenant may `edit`."""
    name = guarded.tenant_namespace(
        namespace_for(request.node.name, f"idep-{operator.session}", 30)
    )
    cluster.kubectl(
        "create", "rolebinding", f"{TENANT}-edit", "--clusterrole=edit",
        f"--user={TENANT}", "-n", name,
    )  # fmt: skip

    def tenant_can_edit_checks() -> bool:
        asked = cluster.kubectl(
            "auth", "can-i", "create", "paritychecks.infergate.io", "-n", name,
            f"--as={TENANT}", check=False,
        )  # fmt: skip
        return asked.stdout.strip() == "yes"

    wait_for(tenant_can_edit_checks, 60, "the tenant roles aggregated into edit")
    yield name
    release_namespace(cluster, name)


class _Rollout:
    """A dtype change in flight: the stable serving, the canary waiting for its check."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.idep = Idep(cluster, namespace, deployment_manifest())
        self.idep.apply()
        self.stable = self.idep.wait_stable(timeout=120)
        self.idep.apply(dtype="float16")
        self.canary, check = self.idep.wait_check(timeout=120)
        self.check = str(check["metadata"]["name"])

        def recorded() -> bool:
            uids = {r["hash"]: r.get("deploymentUid") for r in self.idep.status()["revisions"]}
            return all(uids.get(r) for r in (self.stable, self.canary))

        wait_for(recorded, 60, "both revisions' Deployment uids in the status")

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.cluster.get_json(kind, name, "-n", self.namespace)
        return found

    def deployment(self, revision: str) -> dict[str, Any]:
        return self.get("deployment", f"qwen-{revision}")

    def pods(self, revision: str) -> list[dict[str, Any]]:
        """The pods the revision's recorded Deployment made, once each has an address."""
        recorded = {r["hash"]: r for r in self.idep.status().get("revisions") or []}
        uid = recorded[revision]["deploymentUid"]
        assert uid == self.deployment(revision)["metadata"]["uid"]
        sets = {
            rs["metadata"]["name"]
            for rs in self.cluster.get_json("replicasets", "-n", self.namespace)["items"]
            for ref in rs["metadata"].get("ownerReferences") or []
            if ref.get("controller") and ref["uid"] == uid
        }
        return [
            p
            for p in self.cluster.get_json("pods", "-n", self.namespace)["items"]
            if any(
                ref.get("controller") and ref["name"] in sets
                for ref in p["metadata"].get("ownerReferences") or []
            )
        ]

    def addresses(self, revision: str) -> set[str]:
        def ready() -> set[str] | None:
            found = {p["status"].get("podIP") for p in self.pods(revision)}
            return found if found and None not in found else None

        addresses: set[str] = wait_for(ready, 60, f"the pods of revision {revision}")
        return addresses


def _as_tenant(
    guarded: AdmissionSession, namespace: str, verb: str, body: dict[str, Any]
) -> Result:
    return guarded.as_user(TENANT, verb, "-n", namespace, "-f", "-", input=json.dumps(body))


def _refused(answer: Result, what: str) -> None:
    assert not answer.allowed, f"{what} was admitted"
    assert REFUSED in answer.stderr, f"{what}: {answer.stderr}"
    assert f"not {TENANT}" in answer.stderr, answer.stderr


def _enforced(guarded: AdmissionSession, namespace: str) -> None:
    probe = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "probe", "labels": {"infergate.io/probe": "x"}},
    }
    wait_until_enforced(
        lambda: _as_tenant(guarded, namespace, "create", probe), "the managed-objects policy"
    )


class _Recording(_Described):
    """What the sides say of themselves (as `_Described`), and every address the runner
    was about to call: it asks an endpoint to describe itself first, the moment it has
    chosen it for a side, and health-checks both sides before the first prompt."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def describe(self, url: str) -> Any:
        self.urls.append(url)
        return super().describe(url)

    def health(self, urls: list[str], timeout: float) -> None:  # noqa: ARG002
        from infergate.runner.drive import SideUnavailableError

        self.urls.extend(urls)
        raise SideUnavailableError("stopped by the test before any prompt")


def _dialled(guarded: AdmissionSession, rollout: _Rollout) -> set[str]:
    """The hosts the check's real runner, with its own ServiceAccount's token, chose to
    call. (KWOK gives its pods loopback addresses, which the API server keeps out of the
    EndpointSlice controller's IPv4 slices: the revisions' own pods are never published
    here, so the runner waits for them, and anything it chose came from elsewhere.)"""
    from infergate.kube.client import KubeClient, load_api_client
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.runner.run import Connector, RunOptions, run_check

    cluster = rollout.cluster

    # The account the operator recorded for the check, found by its uid wherever the
    # operator keeps its runners (its own namespace, out of the tenant's reach).
    account, account_namespace = wait_for(
        lambda: recorded_runner_account(cluster, rollout.namespace, rollout.check),
        120,
        "the recorded runner ServiceAccount",
    )
    config = guarded.token_kubeconfig(account_namespace, account)
    api = CheckClient(KubeClient(load_api_client(str(config))), rollout.namespace)
    options = RunOptions(wait_for_sides=5.0, progress_interval=0.0)
    recording = _Recording()
    run_check(
        api, rollout.check, options, connector=Connector(info=recording, health=recording.health)
    )
    return {url.removeprefix("http://").rsplit(":", 1)[0] for url in recording.urls}


def _judged_on_their_own_pods(guarded: AdmissionSession, rollout: _Rollout) -> None:
    """The runner calls no address but the stable's and the canary's own pods'; the
    canary is not promoted and the stable keeps its replicas."""
    own = {
        p["status"].get("podIP") for r in (rollout.stable, rollout.canary) for p in rollout.pods(r)
    }
    chosen = _dialled(guarded, rollout)
    assert chosen <= own, f"the runner chose {sorted(chosen - own)}, no pod of either revision"
    check = rollout.get("pcheck", rollout.check)
    assert (check.get("status") or {}).get("phase") != "Passed"
    status = rollout.idep.status()
    assert status["stableRevision"] == rollout.stable
    assert rollout.idep.revisions()[rollout.stable] == 2


# -- the holes ---------------------------------------------------------------------------


def test_a_pod_wearing_the_canarys_labels_is_refused_and_never_dialled(
    guarded: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """Hole: revision Services select pods on labels anyone who may create pods can set; a
    pod wearing the canary's labels but running the stable's template is published by the
    cluster's own EndpointSlice controller, and the runner took the first address.

    Every way `edit` has to put such a pod in the canary Service is refused: a bare pod, a
    pod labelled afterwards, a workload whose template wears the labels, and a change to
    the canary's own pod. The runner then dials only the revisions' own pods."""
    rollout = _Rollout(cluster, tenant)
    _enforced(guarded, tenant)
    stable_template = rollout.deployment(rollout.stable)["spec"]["template"]
    canary_labels = rollout.deployment(rollout.canary)["spec"]["template"]["metadata"]["labels"]
    look_alike = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "look-alike", "labels": dict(canary_labels)},
        "spec": copy.deepcopy(stable_template["spec"]),
    }
    _refused(_as_tenant(guarded, tenant, "create", look_alike), "a bare look-alike pod")

    # A plain pod is the tenant's to make; the canary's labels are not its to add.
    plain = copy.deepcopy(look_alike)
    plain["metadata"] = {"name": "plain", "labels": {"app": "mine"}}
    made = _as_tenant(guarded, tenant, "create", plain)
    assert made.allowed, made.stderr
    labelled = guarded.as_user(
        TENANT, "label", "pod", "plain", "-n", tenant,
        *(f"{key}={value}" for key, value in canary_labels.items()),
    )  # fmt: skip
    _refused(labelled, "labelling a plain pod as the canary's")

    template = {"metadata": {"labels": dict(canary_labels)}, "spec": stable_template["spec"]}
    selector = {"matchLabels": dict(canary_labels)}
    workloads = {
        "Deployment": {"apiVersion": "apps/v1", "spec": {"selector": selector, "template": template}},
        "ReplicaSet": {"apiVersion": "apps/v1", "spec": {"selector": selector, "template": template}},
        "Job": {
            "apiVersion": "batch/v1",
            "spec": {"template": {**template, "spec": {**template["spec"], "restartPolicy": "Never"}}},
        },
    }  # fmt: skip
    for kind, body in workloads.items():
        workload = {"kind": kind, "metadata": {"name": "look-alikes"}, **body}
        _refused(_as_tenant(guarded, tenant, "create", workload), f"a {kind} of look-alikes")

    # The canary's own pod running the stable's image: pods' images are mutable.
    [canary_pod] = rollout.pods(rollout.canary)
    image = stable_template["spec"]["containers"][0]["image"]
    container = canary_pod["spec"]["containers"][0]["name"]
    swapped = guarded.as_user(
        TENANT, "set", "image", f"pod/{canary_pod['metadata']['name']}", f"{container}={image}x",
        "-n", tenant,
    )  # fmt: skip
    _refused(swapped, "a new image on the canary's pod")

    pods = {p["metadata"]["name"]: p for p in cluster.get_json("pods", "-n", tenant)["items"]}
    assert "look-alike" not in pods
    assert pods["plain"]["metadata"]["labels"] == {"app": "mine"}
    _judged_on_their_own_pods(guarded, rollout)


def test_an_endpointslice_for_the_canary_service_is_refused_or_ignored(
    guarded: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """Hole: whoever may create EndpointSlices in the namespace could label one for the
    canary Service, listing the stable's pod, and have the runner call the stable as the
    canary.

    Recent Kubernetes leaves EndpointSlice writes out of `edit`, but a cluster may grant
    them (older clusters did, through the Endpoints rights): here the tenant is granted
    them on top, so that what refuses is the policy. Labelled as a trusted publisher's (the
    EndpointSlice controller's, the local executor's), the slice is refused; labelled as
    anyone else's, it is admitted and the runner never reads it."""
    rollout = _Rollout(cluster, tenant)
    _enforced(guarded, tenant)
    guarded.grant(
        tenant, "slice-writer",
        [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
          "verbs": ["get", "list", "create", "update", "patch"]}],
        user(TENANT),
    )  # fmt: skip
    wait_for(
        lambda: (
            guarded.as_user(
                TENANT, "auth", "can-i", "create", "endpointslices.discovery.k8s.io", "-n", tenant
            ).stdout.strip()
            == "yes"
        ),
        60,
        "the tenant's EndpointSlice rights",
    )
    service = f"qwen-{rollout.canary}"
    # The tenant's own copy of the stable, wearing nothing of infergate's: theirs to run.
    stable_template = rollout.deployment(rollout.stable)["spec"]["template"]
    copy_of_stable = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "copy-of-stable", "labels": {"app": "mine"}},
        "spec": copy.deepcopy(stable_template["spec"]),
    }
    made = _as_tenant(guarded, tenant, "create", copy_of_stable)
    assert made.allowed, made.stderr

    def running() -> dict[str, Any] | None:
        pod = rollout.get("pod", "copy-of-stable")
        return pod if pod["status"].get("podIP") else None

    stable_pod = wait_for(running, 60, "the tenant's copy of the stable to get an address")
    address = stable_pod["status"]["podIP"]
    ports = rollout.get("service", service)["spec"]["ports"]

    def forged(name: str, manager: str) -> dict[str, Any]:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": manager,
                },
            },
            # The local executor's form (loopback pod addresses are refused in IPv4 slices).
            "addressType": "FQDN",
            "endpoints": [
                {
                    "addresses": [address],
                    "conditions": {"ready": True},
                    "targetRef": {
                        "kind": "Pod",
                        "name": stable_pod["metadata"]["name"],
                        "namespace": tenant,
                        "uid": stable_pod["metadata"]["uid"],
                    },
                }
            ],
            "ports": [
                {"name": p.get("name", ""), "port": p["targetPort"], "protocol": "TCP"}
                for p in ports
                if isinstance(p.get("targetPort"), int)
            ],
        }

    for manager, what in (
        ("endpointslice-controller.k8s.io", "EndpointSlice controller's"),
        ("local-executor.infergate.io", "local executor's"),
    ):
        name = f"forged-{manager.split('.')[0]}"
        answer = _as_tenant(guarded, tenant, "create", forged(name, manager))
        assert not answer.allowed, f"a slice labelled as the {what} was admitted"
        assert f"is labelled as the {what}" in answer.stderr, answer.stderr
        assert f"not {TENANT}" in answer.stderr

    mine = _as_tenant(guarded, tenant, "create", forged("mine", "tenant.example.com"))
    assert mine.allowed, mine.stderr
    _judged_on_their_own_pods(guarded, rollout)


def test_a_workload_with_copied_owner_references_is_refused_or_never_a_revision(
    guarded: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """Hole: "is this ours" rested on controller ownerReference uids, which can be copied
    from any child; Deployments were keyed by label, and a role annotation was trusted.

    A Deployment or ReplicaSet naming the InferenceDeployment (its uid, controller: true)
    or wearing its labels is refused, as is a change to the revisions' own workloads. A
    copy without them is admitted and is no revision: the operator records and scales the
    Deployments it made, and the runner follows their uids."""
    rollout = _Rollout(cluster, tenant)
    _enforced(guarded, tenant)
    idep = rollout.get("idep", "qwen")
    owner = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "name": "qwen",
        "uid": idep["metadata"]["uid"],
        "controller": True,
    }
    stable = rollout.deployment(rollout.stable)
    template = copy.deepcopy(stable["spec"]["template"])
    template_labels = dict(template["metadata"]["labels"])
    plain_labels = {"app": "look-alike"}
    template["metadata"]["labels"] = plain_labels

    def workload(kind: str, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, **metadata},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": plain_labels},
                "template": template,
            },
        }

    attempts: dict[str, dict[str, Any]] = {
        "owner reference to the InferenceDeployment": {"ownerReferences": [owner]},
        "the revision's labels": {"labels": dict(stable["metadata"]["labels"])},
        "the stable's annotations and labels": {
            "labels": dict(stable["metadata"]["labels"]),
            "annotations": dict(stable["metadata"].get("annotations") or {}),
        },
    }
    for kind in ("Deployment", "ReplicaSet"):
        for what, metadata in attempts.items():
            body = workload(kind, f"copy-{kind.lower()}", metadata)
            _refused(_as_tenant(guarded, tenant, "create", body), f"a {kind} with {what}")

    # The revisions' own workloads are not the tenant's to change either.
    image = template["spec"]["containers"][0]["image"]
    canary = f"qwen-{rollout.canary}"
    for target in (f"deployment/{canary}", f"deployment/qwen-{rollout.stable}"):
        changed = guarded.as_user(
            TENANT, "patch", target, "-n", tenant, "--type=json", "-p",
            json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                         "value": f"{image}-swapped"}]),
        )  # fmt: skip
        _refused(changed, f"a new image in {target}")
    [canary_set] = [
        rs["metadata"]["name"]
        for rs in cluster.get_json("replicasets", "-n", tenant)["items"]
        if (rs["metadata"].get("labels") or {}).get("infergate.io/revision") == rollout.canary
    ]
    relabelled = guarded.as_user(
        TENANT, "label", "replicaset", canary_set, "-n", tenant, "--overwrite",
        f"infergate.io/revision={rollout.stable}",
    )  # fmt: skip
    _refused(relabelled, "the canary's ReplicaSet relabelled as the stable's")

    # Without infergate metadata the tenant may make it; it is no revision of qwen.
    plain = workload("Deployment", f"qwen-{rollout.canary}x", {"labels": {"app": "mine"}})
    made = _as_tenant(guarded, tenant, "create", plain)
    assert made.allowed, made.stderr
    before = {r["hash"]: r["deploymentUid"] for r in rollout.idep.status()["revisions"]}
    assert before == {
        rollout.stable: stable["metadata"]["uid"],
        rollout.canary: rollout.deployment(rollout.canary)["metadata"]["uid"],
    }
    assert set(rollout.idep.revisions()) == {rollout.stable, rollout.canary}
    assert template_labels != plain_labels
    _judged_on_their_own_pods(guarded, rollout)


def test_configmaps_and_services_wearing_infergate_metadata_are_the_operators(
    guarded: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """Hole: the runner reads a revision's ConfigMap (what it pins) and Service (whose
    slices it follows); `edit` makes and changes both, so a tenant could mint a future
    revision's objects, or point the canary's Service at the stable's pods.

    An infergate-labelled ConfigMap or Service, or one naming the InferenceDeployment as
    owner, is refused; so is a change to the revisions' own. Plain ones stay the tenant's."""
    rollout = _Rollout(cluster, tenant)
    _enforced(guarded, tenant)
    canary = f"qwen-{rollout.canary}"
    pinned = rollout.get("configmap", canary)
    service = rollout.get("service", canary)
    owner = {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "name": "qwen",
        "uid": rollout.get("idep", "qwen")["metadata"]["uid"],
        "controller": True,
    }
    labels = dict(pinned["metadata"]["labels"])
    minted = {
        "a ConfigMap with the revision's labels": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "qwen-0000000000", "labels": labels},
            "data": dict(pinned.get("data") or {}),
        },
        "a ConfigMap owned by the InferenceDeployment": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "qwen-1111111111", "ownerReferences": [owner]},
            "data": dict(pinned.get("data") or {}),
        },
        "a Service with the revision's labels": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "qwen-0000000000", "labels": dict(service["metadata"]["labels"])},
            "spec": {"selector": dict(service["spec"]["selector"]), "ports": service["spec"]["ports"]},
        },
    }  # fmt: skip
    for what, body in minted.items():
        _refused(_as_tenant(guarded, tenant, "create", body), what)

    stable_selector = rollout.get("service", f"qwen-{rollout.stable}")["spec"]["selector"]
    pointed = guarded.as_user(
        TENANT, "patch", "service", canary, "-n", tenant, "--type=merge",
        "-p", json.dumps({"spec": {"selector": stable_selector}}),
    )  # fmt: skip
    _refused(pointed, "the canary's Service pointed at the stable's pods")
    # Its data is immutable (`immutable: true`); its labels, which say whose it is, are not.
    relabelled = guarded.as_user(
        TENANT, "label", "configmap", canary, "-n", tenant, "--overwrite",
        f"infergate.io/revision={rollout.stable}",
    )  # fmt: skip
    _refused(relabelled, "the canary's ConfigMap relabelled as the stable's")

    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine"}, "data": {}}
    made = _as_tenant(guarded, tenant, "create", plain)
    assert made.allowed, made.stderr
    assert rollout.get("configmap", canary)["data"] == pinned["data"]
    assert rollout.get("service", canary)["spec"]["selector"] == service["spec"]["selector"]
    _judged_on_their_own_pods(guarded, rollout)
