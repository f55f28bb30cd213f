"""The admission policies of manifests/admission, enforced by the real API server.

Each test asks as the identity a policy is about: a user RBAC lets write ParityCheck
status, a check's runner (with a real ServiceAccount token), the operator's
ServiceAccount, users annotating InferenceDeployments. RBAC is granted generously on
purpose, so that what refuses is the policy, and the message must say which field and
what is allowed.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infergate.api import InferenceDeployment, ParityCheckSpec
from infergate.plan.deployment.control import ABORT, PROMOTE, REQUESTED_BY
from infergate.render import check_children as children
from infergate.render import render_revision
from infergate.render.check_names import runner_account_name
from infergate.render.images import DEFAULT_RUNNER_IMAGE
from tests.harness import Cluster, apply_crds, namespace_for, release_namespace, wait_for
from tests.integration.admission_support import (
    ADMISSION_DIR,
    AdmissionSession,
    built,
    service_account,
    session_operator_rbac,
    session_policies,
    user,
    wait_until_enforced,
)

pytestmark = pytest.mark.cluster

_STATUS_WRITER = [
    {"apiGroups": ["infergate.io"], "resources": ["paritychecks"], "verbs": ["get", "list"]},
    {
        "apiGroups": ["infergate.io"],
        "resources": ["paritychecks/status"],
        "verbs": ["get", "patch", "update"],
    },
]
_IDEP_EDITOR = [
    {
        "apiGroups": ["infergate.io"],
        "resources": ["inferencedeployments"],
        "verbs": ["get", "list", "create", "patch", "update", "delete"],
    }
]


@pytest.fixture(scope="module")
def admission(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdmissionSession]:
    apply_crds(cluster)
    session = uuid.uuid4().hex[:6]
    ops = f"igops-{session}"
    install = AdmissionSession(cluster, session, ops, tmp_path_factory.mktemp("admission"))
    cluster.kubectl("create", "namespace", ops)
    cluster.kubectl("create", "serviceaccount", "infergate-operator", "-n", ops)
    rbac, rbac_names = session_operator_rbac(cluster, session, ops)
    policies = session_policies(built(cluster, ADMISSION_DIR), session, ops)
    install.apply([*rbac, *policies])
    yield install
    for policy in policies:
        kind = policy["kind"].lower()
        cluster.kubectl("delete", kind, policy["metadata"]["name"], check=False)
    for name in rbac_names:
        cluster.kubectl("delete", name, check=False)
    release_namespace(cluster, ops)


@pytest.fixture
def tenant(
    admission: AdmissionSession, cluster: Cluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace the session's user-facing policies are bound to."""
    name = admission.tenant_namespace(namespace_for(request.node.name, "adm", 30))
    yield name
    release_namespace(cluster, name)


def _check(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "ParityCheck",
        "metadata": {"name": name},
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "0123456789"},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "abcdef0123"},
            "suite": {"inline": [{"id": "capital", "text": "The capital of France is"}]},
        },
    }


def _deployment(name: str = "qwen", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "tiny", "uri": "pvc://models/tiny"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096},
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
            **spec,
        },
    }


def _patch_status(status: dict[str, Any]) -> list[str]:
    return ["--subresource=status", "--type=merge", "-p", json.dumps({"status": status})]


def _uid(cluster: Cluster, namespace: str, account: str) -> str:
    return str(cluster.get_json("serviceaccount", account, "-n", namespace)["metadata"]["uid"])


def _runner_account(
    admission: AdmissionSession, cluster: Cluster, tenant: str, check: str
) -> tuple[str, dict[str, str]]:
    """The check's runner ServiceAccount as the operator makes it: check-<uid>-runner in the
    runner namespace (the session's stand-in for infergate-system), granted status rights
    on the check's namespace across namespaces; its name and the record {name, uid}."""
    uid = cluster.get_json("pcheck", check, "-n", tenant)["metadata"]["uid"]
    account = runner_account_name(uid)
    cluster.kubectl("create", "serviceaccount", account, "-n", admission.ops_namespace)
    admission.grant(
        tenant, f"{check}-runner", _STATUS_WRITER, service_account(admission.ops_namespace, account)
    )
    return account, {"name": account, "uid": _uid(cluster, admission.ops_namespace, account)}


# -- ParityCheck status: the operator and the check's own runner, nobody else -------------


def test_only_the_operator_and_the_checks_own_runner_write_its_status(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    runners = admission.ops_namespace
    accounts: dict[str, str] = {}
    records: dict[str, dict[str, str]] = {}
    for name in ("a", "b"):
        cluster.apply(_check(name), tenant)
        accounts[name], records[name] = _runner_account(admission, cluster, tenant, name)
    # RBAC lets every one of them write any check's status: what refuses is the policy.
    # (kubectl reads the subresource before patching it, hence `get` for the operator too.)
    admission.grant(tenant, "status-writer", _STATUS_WRITER, user("mallory"))
    admission.grant(tenant, "operator-reader", _STATUS_WRITER, user(admission.operator))
    passed = {"phase": "Passed", "verdict": {"passed": True, "outcome": "Passed"}}

    def mallory_writes() -> Any:
        return admission.as_user(
            "mallory", "patch", "pcheck", "a", "-n", tenant, *_patch_status(passed)
        )

    wait_until_enforced(mallory_writes, "the status policy to refuse a user")
    refused = mallory_writes()
    assert "status of ParityCheck a may be written only by the infergate operator" in refused.stderr
    assert "not by mallory" in refused.stderr

    # The operator records each check's runner (name and uid) before starting it.
    for name in ("a", "b"):
        stamped = admission.as_operator(
            "patch", "pcheck", name, "-n", tenant,
            *_patch_status({"phase": "Pending", "runnerServiceAccount": records[name]}),
        )  # fmt: skip
        assert stamped.allowed, stamped.stderr

    own = admission.as_service_account(
        runners, accounts["a"], "patch", "pcheck", "a", "-n", tenant, *_patch_status(passed)
    )
    assert own.allowed, own.stderr
    other = admission.as_service_account(
        runners, accounts["a"], "patch", "pcheck", "b", "-n", tenant, *_patch_status(passed)
    )
    assert not other.allowed
    assert "status of ParityCheck b may be written only" in other.stderr
    stored = cluster.get_json("pcheck", "b", "-n", tenant)["status"]
    assert stored["phase"] == "Pending"

    # The runner may not move the record to someone else.
    moved = admission.as_service_account(
        runners, accounts["a"], "patch", "pcheck", "a", "-n", tenant,
        *_patch_status({"runnerServiceAccount": {"name": accounts["a"], "uid": "forged"}}),
    )  # fmt: skip
    assert not moved.allowed
    assert "status.runnerServiceAccount is written by the infergate operator only" in moved.stderr


# -- InferenceDeployment status: the operator only -----------------------------------------

_DEPLOYMENT_STATUS_WRITER = [
    {"apiGroups": ["infergate.io"], "resources": ["inferencedeployments"], "verbs": ["get"]},
    {
        "apiGroups": ["infergate.io"],
        "resources": ["inferencedeployments/status"],
        "verbs": ["get", "patch", "update"],
    },
]


def test_only_the_operator_writes_an_inference_deployments_status(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    cluster.apply(_deployment(), tenant)
    # RBAC lets both write the status (as `*/status` grants would): what refuses is the policy.
    admission.grant(tenant, "idep-status", _DEPLOYMENT_STATUS_WRITER, user("mallory"))
    admission.grant(tenant, "idep-operator", _DEPLOYMENT_STATUS_WRITER, user(admission.operator))
    # A traffic step the canary never earned, a stable revision nobody promoted.
    skipped = {"stableRevision": "abcdef0123", "traffic": {"mode": "gateway", "canaryWeight": 50}}

    def mallory_writes() -> Any:
        return admission.as_user(
            "mallory", "patch", "idep", "qwen", "-n", tenant, *_patch_status(skipped)
        )

    wait_until_enforced(mallory_writes, "the deployment status policy to refuse a user")
    refused = mallory_writes()
    assert "status of InferenceDeployment qwen may be written only by the infergate operator" in (
        refused.stderr
    )
    assert "not by mallory" in refused.stderr
    assert (cluster.get_json("idep", "qwen", "-n", tenant).get("status") or {}).get(
        "stableRevision"
    ) is None
    written = admission.as_operator(
        "patch", "idep", "qwen", "-n", tenant, *_patch_status({"observedGeneration": 1})
    )
    assert written.allowed, written.stderr


def test_a_service_account_made_again_under_the_runners_name_is_refused(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    runners = admission.ops_namespace
    cluster.apply(_check("a"), tenant)
    account, record = _runner_account(admission, cluster, tenant, "a")
    admission.grant(tenant, "operator-reader", _STATUS_WRITER, user(admission.operator))

    def stamp() -> Any:
        return admission.as_operator(
            "patch", "pcheck", "a", "-n", tenant, *_patch_status({"runnerServiceAccount": record})
        )

    wait_until_enforced(
        lambda: admission.as_user(
            "system:serviceaccount:kube-system:default", "patch", "pcheck", "a", "-n", tenant,
            *_patch_status({"phase": "Running"}),
        ),
        "the status policy",
    )  # fmt: skip
    assert stamp().allowed
    cluster.kubectl("delete", "serviceaccount", account, "-n", runners)
    cluster.kubectl("create", "serviceaccount", account, "-n", runners)
    forged = admission.as_service_account(
        runners, account, "patch", "pcheck", "a", "-n", tenant,
        *_patch_status({"phase": "Passed", "verdict": {"passed": True}}),
    )  # fmt: skip
    assert not forged.allowed
    assert "may be written only by the infergate operator or by its runner" in forged.stderr


def test_a_runner_without_a_recorded_identity_cannot_write(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    cluster.apply(_check("c"), tenant)
    account, _ = _runner_account(admission, cluster, tenant, "c")

    def runner_writes() -> Any:
        return admission.as_service_account(
            admission.ops_namespace, account, "patch", "pcheck", "c", "-n", tenant,
            *_patch_status({"phase": "Passed", "verdict": {"passed": True}}),
        )  # fmt: skip

    wait_until_enforced(runner_writes, "the status policy to refuse an unrecorded runner")
    assert "status of ParityCheck c may be written only" in runner_writes().stderr
    assert cluster.get_json("pcheck", "c", "-n", tenant).get("status") is None


def test_a_namespace_editor_cannot_act_as_the_runner(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    """An application team holding the namespace's built-in `edit` role, a canary check in
    flight with its runner recorded. `edit` mints tokens for any ServiceAccount of the
    namespace and runs pods as them: the runner's account is not one of them. It has no
    right in the runner namespace, and a ServiceAccount of its own namespace under the
    runner's very name, with a token it minted, writes no verdict.

    (The project's roles aggregated into `edit` give no status rights: the team is also
    granted them, so that what refuses the verdict is the policy, not RBAC.)"""
    runners = admission.ops_namespace
    team = "app-team"
    admission.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "app-team-edit", "namespace": tenant},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "edit",
                },
                "subjects": [user(team)],
            }
        ]
    )
    admission.grant(tenant, "team-status", _STATUS_WRITER, user(team))
    admission.grant(tenant, "operator-reader", _STATUS_WRITER, user(admission.operator))
    cluster.apply(_check("canary"), tenant)
    account, record = _runner_account(admission, cluster, tenant, "canary")
    passed = {"phase": "Passed", "verdict": {"passed": True, "outcome": "Passed"}}

    def team_writes() -> Any:
        return admission.as_user(
            team, "patch", "pcheck", "canary", "-n", tenant, *_patch_status(passed)
        )

    wait_until_enforced(team_writes, "the status policy to refuse the team")
    stamped = admission.as_operator(
        "patch", "pcheck", "canary", "-n", tenant,
        *_patch_status({"phase": "Running", "runnerServiceAccount": record}),
    )  # fmt: skip
    assert stamped.allowed, stamped.stderr

    # What `edit` gives in its own namespace: tokens and pods of its ServiceAccounts.
    for verb, resource, subresource in (
        ("create", "serviceaccounts", "token"),
        ("create", "pods", ""),
    ):
        extra = [f"--subresource={subresource}"] if subresource else []
        here = admission.as_user(team, "auth", "can-i", verb, resource, *extra, "-n", tenant)
        assert here.stdout.strip() == "yes", (resource, here.stderr)
        there = admission.as_user(team, "auth", "can-i", verb, resource, *extra, "-n", runners)
        assert there.stdout.strip() == "no", (resource, there.stdout)
    # The runner's account: not in the team's namespace, and out of reach in the runner's.
    missing = admission.as_user(team, "create", "token", account, "-n", tenant)
    assert not missing.allowed
    assert "not found" in missing.stderr
    minted = admission.as_user(team, "create", "token", account, "-n", runners)
    assert not minted.allowed
    assert "forbidden" in minted.stderr.lower()
    secrets = admission.as_user(team, "get", "secrets", "-n", runners)
    assert not secrets.allowed

    # A look-alike: the runner's name in the team's namespace, a token the team mints,
    # status rights granted to it. Refused by the policy: it is not the runner namespace's.
    made = admission.as_user(team, "create", "serviceaccount", account, "-n", tenant)
    assert made.allowed, made.stderr
    assert admission.as_user(team, "create", "token", account, "-n", tenant).allowed
    admission.grant(tenant, "look-alike", _STATUS_WRITER, service_account(tenant, account))
    look_alike = admission.as_service_account(
        tenant, account, "patch", "pcheck", "canary", "-n", tenant, *_patch_status(passed)
    )
    assert not look_alike.allowed
    assert f"by its runner ServiceAccount in namespace {runners}" in look_alike.stderr
    refused = team_writes()
    assert not refused.allowed
    assert f"not by {team}" in refused.stderr
    assert cluster.get_json("pcheck", "canary", "-n", tenant)["status"]["phase"] == "Running"

    # The runner itself still writes its verdict.
    own = admission.as_service_account(
        runners, account, "patch", "pcheck", "canary", "-n", tenant, *_patch_status(passed)
    )
    assert own.allowed, own.stderr


# -- InferenceDeployments: host paths and ServiceAccounts from the admin's lists ----------


def _create(admission: AdmissionSession, namespace: str, manifest: dict[str, Any]) -> Any:
    return admission.as_user(
        "alice", "create", "-n", namespace, "-f", "-", input=json.dumps(manifest)
    )


def test_file_models_only_under_allowed_directories(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    admission.grant(tenant, "idep-editor", _IDEP_EDITOR, user("alice"))
    hostile = _deployment("etc", model={"name": "m", "uri": "file:///etc"})
    wait_until_enforced(lambda: _create(admission, tenant, hostile), "the access policy")
    refused = _create(
        admission, tenant, _deployment(model={"name": "m", "uri": "file:///data/models/tiny"})
    )
    assert not refused.allowed
    assert "spec.model.uri: file:///data/models/tiny is not allowed" in refused.stderr
    assert "none (file:// is off)" in refused.stderr

    admission.allow(tenant, allowed_host_paths="/data/models, /mnt/weights/")

    def tiny() -> Any:
        return _create(
            admission, tenant, _deployment(model={"name": "m", "uri": "file:///data/models/tiny"})
        )

    created = _wait_allowed(tiny)
    assert created.allowed, created.stderr
    for uri in ("file:///data/models-old/tiny", "file:///data", "file:///mnt"):
        outside = _create(admission, tenant, _deployment("other", model={"name": "m", "uri": uri}))
        assert not outside.allowed, uri
        assert f"namespace {tenant} may mount only /data/models, /mnt/weights/" in outside.stderr
    deeper = _create(
        admission,
        tenant,
        _deployment("deep", model={"name": "m", "uri": "file:///mnt/weights/a/b"}),
    )
    assert deeper.allowed, deeper.stderr

    # The list shrinks: what exists may still be scaled; a new file:// uri may not be set.
    admission.allow(tenant, allowed_host_paths="")
    wait_until_enforced(
        lambda: _create(
            admission,
            tenant,
            _deployment("again", model={"name": "m", "uri": "file:///data/models/x"}),
        ),
        "the emptied list",
    )
    scaled = admission.as_user(
        "alice",
        "patch",
        "idep",
        "qwen",
        "-n",
        tenant,
        "--type=merge",
        "-p",
        '{"spec":{"replicas":3}}',
    )
    assert scaled.allowed, scaled.stderr
    moved = admission.as_user(
        "alice", "patch", "idep", "qwen", "-n", tenant, "--type=merge",
        "-p", '{"spec":{"model":{"uri":"file:///data/models/other"}}}',
    )  # fmt: skip
    assert not moved.allowed


def _wait_allowed(probe: Any) -> Any:
    return wait_for(
        lambda: r if (r := probe()).allowed else None, 30, "the new annotation to apply"
    )


def test_engine_service_accounts_only_from_the_allow_list(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    admission.grant(tenant, "idep-editor", _IDEP_EDITOR, user("alice"))
    powerful = _deployment(placement={"serviceAccountName": "ci-deployer"})
    wait_until_enforced(lambda: _create(admission, tenant, powerful), "the access policy")
    refused = _create(admission, tenant, powerful)
    assert "spec.placement.serviceAccountName: ci-deployer is not allowed" in refused.stderr
    assert _create(admission, tenant, _deployment("plain")).allowed
    assert _create(
        admission, tenant, _deployment("dflt", placement={"serviceAccountName": "default"})
    ).allowed

    admission.allow(tenant, engine_service_accounts="model-reader,shared-reader")
    reader = _deployment("reader", placement={"serviceAccountName": "model-reader"})
    assert _wait_allowed(lambda: _create(admission, tenant, reader)).allowed
    shared = _deployment("shared", placement={"serviceAccountName": "shared-reader"})
    assert _create(admission, tenant, shared).allowed
    assert not _create(
        admission, tenant, _deployment("still", placement={"serviceAccountName": "ci-deployer"})
    ).allowed


# -- Manual control: who asked is stamped by the API server --------------------------------


def _annotations(cluster: Cluster, namespace: str) -> dict[str, str]:
    stored = cluster.get_json("idep", "qwen", "-n", namespace)
    return dict(stored["metadata"].get("annotations") or {})


def test_the_requester_of_a_promote_or_abort_is_stamped_and_cannot_be_forged(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    served = cluster.kubectl(
        "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name"
    )
    assert "mutatingadmissionpolicies.admissionregistration.k8s.io" in served.stdout.split()
    for name in ("alice", "bob"):
        admission.grant(tenant, f"{name}-edit", _IDEP_EDITOR, user(name))
    cluster.apply(_deployment(), tenant)

    def forge() -> Any:
        return admission.as_user(
            "bob", "annotate", "idep", "qwen", "-n", tenant, f"{REQUESTED_BY}=alice"
        )

    wait_until_enforced(forge, "the requester policy")
    forged = forge()
    assert "infergate.io/requested-by] is written by the API server" in forged.stderr

    asked = admission.as_user("alice", "annotate", "idep", "qwen", "-n", tenant, f"{PROMOTE}=true")
    assert asked.allowed, asked.stderr
    assert _annotations(cluster, tenant)[REQUESTED_BY] == "alice"

    # Bob asks for an abort and claims Alice did: the API server writes who really asked.
    claimed = admission.as_user(
        "bob", "annotate", "idep", "qwen", "-n", tenant, "--overwrite",
        f"{ABORT}=true", f"{REQUESTED_BY}=alice",
    )  # fmt: skip
    assert claimed.allowed, claimed.stderr
    assert _annotations(cluster, tenant)[REQUESTED_BY] == "bob"

    # The stamp cannot be dropped while a request is pending, nor rewritten on its own.
    dropped = admission.as_user(
        "alice", "annotate", "idep", "qwen", "-n", tenant, f"{REQUESTED_BY}-"
    )
    assert not dropped.allowed
    rewritten = admission.as_user(
        "alice", "annotate", "idep", "qwen", "-n", tenant, "--overwrite", f"{REQUESTED_BY}=alice"
    )
    assert not rewritten.allowed

    # Handled: the operator removes the requests and the stamp together.
    removed = admission.as_user(
        "alice",
        "annotate",
        "idep",
        "qwen",
        "-n",
        tenant,
        f"{PROMOTE}-",
        f"{ABORT}-",
        f"{REQUESTED_BY}-",
    )
    assert removed.allowed, removed.stderr
    assert REQUESTED_BY not in _annotations(cluster, tenant)

    created = copy.deepcopy(_deployment("born-promoted"))
    created["metadata"]["annotations"] = {PROMOTE: "true", REQUESTED_BY: "someone-else"}
    born = _create(admission, tenant, created)
    assert born.allowed, born.stderr
    stored = cluster.get_json("idep", "born-promoted", "-n", tenant)
    assert stored["metadata"]["annotations"][REQUESTED_BY] == "alice"


# -- What the operator writes ---------------------------------------------------------------


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def _dry_run(admission: AdmissionSession, namespace: str, manifest: dict[str, Any]) -> Any:
    return admission.as_operator(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(manifest)
    )


def _runner_check(namespace: str) -> dict[str, Any]:
    return {
        **_check("qwen-check"),
        "metadata": {"name": "qwen-check", "namespace": namespace, "uid": "u"},
    }


def _runner_objects(namespace: str, runner_namespace: str) -> list[dict[str, Any]]:
    """The runner's Job and ServiceAccount (runner namespace), its Role and RoleBinding (the
    check's namespace), as infergate renders them, without namespace or owner."""
    check = _runner_check(namespace)
    runner = ParityCheckSpec.model_validate(check["spec"]).runner
    settings = children.RunnerSettings(
        active_deadline_seconds=runner.active_deadline_seconds, backoff_limit=runner.backoff_limit
    )
    job = children.runner_job(
        check, settings, image=DEFAULT_RUNNER_IMAGE, runner_namespace=runner_namespace
    )
    account, role, binding = children.runner_rbac(
        check, runner_namespace=runner_namespace, deployments=[], services=[], config_maps=[]
    )
    out = [job, account, role, binding]
    for item in out:
        item["metadata"].pop("ownerReferences", None)
        item["metadata"].pop("namespace", None)
    return out


def _rendered(namespace: str, uri: str, accelerator: str) -> list[dict[str, Any]]:
    """What infergate renders for one revision and its parity probe (the runner Job goes
    to the runner namespace: `_runner_objects`)."""
    engine = "vllm" if accelerator == "nvidia-gpu" else "mindformers"
    document = _deployment(
        "qwen",
        model={"name": "tiny", "uri": uri},
        engine={"kind": engine, "dtype": "bfloat16", "maxModelLen": 4096},
        accelerator={"kind": accelerator},
    )
    spec = InferenceDeployment.model_validate(document).spec
    objects = render_revision("qwen", namespace, spec)
    check = _runner_check(namespace)
    probe = children.probe_pod(
        check, "candidate", objects.deployment, fingerprint_image=DEFAULT_RUNNER_IMAGE
    )
    out = [*objects.manifests(), probe]
    for item in out:
        item["metadata"].pop("ownerReferences", None)
        item["metadata"].pop("namespace", None)
    return [o for o in out if o["kind"] in ("Deployment", "Service", "Job", "Pod")]


def test_what_infergate_renders_passes_and_what_it_never_renders_is_refused(
    admission: AdmissionSession, cluster: Cluster, tenant: str
) -> None:
    admission.allow(tenant, allowed_host_paths="/data/models")
    # It exists (the ServiceAccount plugin refuses pods of a missing one before the policy).
    cluster.kubectl("create", "serviceaccount", "ci-deployer", "-n", tenant)
    hostile = _pod("root", volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    wait_until_enforced(
        lambda: _dry_run(admission, tenant, hostile), "the operator-workload policy"
    )

    for uri, accelerator in (
        ("pvc://models/tiny", "nvidia-gpu"),
        ("file:///data/models/tiny", "ascend-npu"),
    ):
        for manifest in _rendered(tenant, uri, accelerator):
            answer = _dry_run(admission, tenant, manifest)
            assert answer.allowed, (
                f"{manifest['kind']} {manifest['metadata']['name']}: {answer.stderr}"
            )
    # The runner's Job and ServiceAccount in the runner namespace, its grant in the check's.
    job, account, role, binding = _runner_objects(tenant, admission.ops_namespace)
    # The Role exists before its binding (RBAC resolves it to check the grant).
    cluster.apply(role, tenant)
    # It exists (see above), so that what refuses a pod running as it is the policy.
    cluster.kubectl("create", "serviceaccount", account["metadata"]["name"], "-n", tenant)
    for namespace, manifest in (
        (admission.ops_namespace, job),
        (admission.ops_namespace, account),
        (tenant, binding),
    ):
        answer = _dry_run(admission, namespace, manifest)
        assert answer.allowed, f"{manifest['kind']} in {namespace}: {answer.stderr}"
    # A runner Job in the tenant's namespace is not what infergate renders any more.
    assert not _dry_run(admission, tenant, job).allowed

    refused = {
        "hostPath outside the list": (hostile, "mounts from the node only the accelerator driver"),
        "privileged": (
            _pod("priv", container={"securityContext": {"privileged": True}}),
            "never privileged",
        ),
        "added capability": (
            _pod("cap", container={"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
            "add no capabilities",
        ),
        "host network": (_pod("net", hostNetwork=True), "never share the node's network"),
        "foreign ServiceAccount": (
            _pod("sa", serviceAccountName="ci-deployer"),
            "run as the namespace's default ServiceAccount",
        ),
        "a runner account in the tenant's namespace": (
            _pod(
                "runner", serviceAccountName=job["spec"]["template"]["spec"]["serviceAccountName"]
            ),
            "run as the namespace's default ServiceAccount",
        ),
        "binding a tenant Role to another namespace's account": (
            {
                **binding,
                "subjects": [
                    {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"}
                ],
            },
            "bind a Role of their namespace",
        ),
        "externalIPs": (
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "mitm"},
                "spec": {"ports": [{"port": 80}], "externalIPs": ["10.0.0.1"]},
            },
            "ClusterIP Services without externalIPs",
        ),
        "binding a ClusterRole": (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "grant"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    # A ClusterRole the operator holds in full, so RBAC's escalation
                    # check lets it through and the policy is what refuses.
                    "name": f"infergate-operator-adm-{admission.session}",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": tenant}],
            },
            "bind a Role of their namespace",
        ),
    }
    for what, (manifest, message) in refused.items():
        answer = _dry_run(admission, tenant, manifest)
        assert not answer.allowed, what
        assert message in answer.stderr, f"{what}: {answer.stderr}"


def test_the_operator_writes_nothing_in_system_namespaces_or_its_own(
    admission: AdmissionSession, cluster: Cluster
) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    # RBAC alone would let it: its ClusterRole creates ConfigMaps and pods everywhere.
    for verb, resource in (("create", "configmaps"), ("create", "pods"), ("patch", "configmaps")):
        can = admission.as_operator("auth", "can-i", verb, resource, "-n", "kube-system")
        assert can.stdout.strip() == "yes"

    wait_until_enforced(
        lambda: _dry_run(admission, "kube-system", config_map), "the namespace policy"
    )
    answer = _dry_run(admission, "kube-system", config_map)
    assert "may not write configmaps in namespace kube-system" in answer.stderr
    pod = _dry_run(admission, "kube-system", _pod("p", serviceAccountName="default"))
    assert not pod.allowed
    # A pod in its own namespace, running as itself, is refused by two policies (this
    # namespace's and the pods' ServiceAccount rule); which one the API server names
    # first is not fixed, so the namespace rule is shown on a ConfigMap there.
    own = _dry_run(
        admission, admission.ops_namespace, _pod("me", serviceAccountName="infergate-operator")
    )
    assert not own.allowed
    own_map = _dry_run(admission, admission.ops_namespace, config_map)
    assert "may write in its own namespace only the Jobs," in own_map.stderr
    assert "not configmaps x" in own_map.stderr
    # There, a runner Job runs as the account of its own name, never as the operator.
    job, account, _, _ = _runner_objects("llm", admission.ops_namespace)
    assert _dry_run(admission, admission.ops_namespace, job).allowed
    assert _dry_run(admission, admission.ops_namespace, account).allowed
    as_operator = copy.deepcopy(job)
    as_operator["spec"]["template"]["spec"]["serviceAccountName"] = "infergate-operator"
    answer = _dry_run(admission, admission.ops_namespace, as_operator)
    assert not answer.allowed
    # Nor can it widen what a namespace may mount: Namespaces are beyond its RBAC.
    widen = admission.as_operator("auth", "can-i", "patch", "namespaces")
    assert widen.stdout.strip() == "no"


def test_policies_on_built_in_kinds_typecheck_against_their_schemas(
    admission: AdmissionSession, cluster: Cluster
) -> None:
    """No expression names a field Pods, Deployments, Jobs, Services or RoleBindings lack.

    The API server type-checks a policy against the schemas of the kinds it matches and
    reports what does not resolve in its status. It does so for built-in kinds only (a
    policy on custom resources reports nothing), so those are checked by behaviour above.
    """
    checked = 0
    for policy in session_policies(
        built(cluster, ADMISSION_DIR), admission.session, admission.ops_namespace
    ):
        if policy["kind"] != "ValidatingAdmissionPolicy":
            continue
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        if {group for rule in rules for group in rule["apiGroups"]} == {"infergate.io"}:
            continue
        name = policy["metadata"]["name"]

        def status(name: str = name) -> dict[str, Any] | None:
            stored = cluster.get_json("validatingadmissionpolicy", name)
            done = (stored.get("status") or {}).get("observedGeneration") == stored["metadata"][
                "generation"
            ]
            return dict(stored["status"]) if done else None

        typed = wait_for(status, 30, f"{name} to be type-checked")
        assert typed.get("typeChecking", {}).get("expressionWarnings", []) == [], yaml.safe_dump(
            typed
        )
        checked += 1
    # operator-workloads, operator-namespaces, managed-pods, managed-objects,
    # endpoint-publishers.
    assert checked == 5
