"""A namespace's own team, as the attacker: what it may not do to a canary's verdict.

The setting a platform team has: the operator installed from manifests/operator and
manifests/runner (a real operator pod, which starts each check's runner Job under its
own ServiceAccount in the runner namespace, its own), the admission policies of
manifests/admission bound to that operator and to the team's namespace, and the tenant
roles of manifests/tenant aggregated into the built-in roles. The team is one user
holding the built-in `edit` ClusterRole by a RoleBinding in its namespace and nothing
else; it makes its InferenceDeployment itself and changes its dtype, which the operator
gates behind a ParityCheck. Every request of the team is made by impersonation
(`kubectl --as`), so the API server's RBAC and admission decide, not the test.

The simulated engine pods never answer, so the check's verdict is written, when a test
needs one, as the runner writes it: a status patch under a real token of the runner's
own ServiceAccount (made by the operator in the runner namespace), through the same
RBAC and policies. Each test's docstring names the hole it closes (experiments/
SECURITY.md lists them).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infergate.plan.check.status import spec_digest
from infergate.plan.deployment.control import PROMOTE, REQUESTED_BY
from infergate.render.check_names import runner_account_name
from tests.harness import REPO, Cluster, namespace_for, release_namespace, wait_for
from tests.integration.admission_support import (
    ADMISSION_DIR,
    SESSION_LABEL,
    AdmissionSession,
    Result,
    built,
    patch_check_status_as,
    session_policies,
    user,
    wait_until_enforced,
)
from tests.integration.controller_support import (
    GOLDEN_ARGS,
    Idep,
    OperatorInstall,
    deployment_manifest,
    install_operator,
    settle,
)

pytestmark = pytest.mark.cluster

TENANT_DIR = REPO / "manifests" / "tenant"
TEAM = "app-team"
# The default safety-net resync, given explicitly: an install of its own, whose policies
# (which judge this operator's requests wherever it acts) bind to no other test's operator.
# It keeps golden records, as an install that runs the drift watch does.
_OWN_INSTALL = ("--resync-seconds=300", *GOLDEN_ARGS)


@dataclass
class Setting:
    """The installed operator, its policies, and the team's namespace."""

    cluster: Cluster
    operator: OperatorInstall
    admission: AdmissionSession
    namespace: str

    def team(self, *args: str, input: str | None = None) -> Result:  # noqa: A002
        """A request of the team, in its namespace unless `args` name another."""
        if "-n" not in args:
            args = (*args, "-n", self.namespace)
        return self.admission.as_user(TEAM, *args, input=input)

    def team_applies(self, manifest: dict[str, Any]) -> Result:
        return self.team("apply", "-f", "-", input=json.dumps(manifest))

    @property
    def runners(self) -> str:
        """The runner namespace: the operator's own."""
        return self.operator.namespace


@pytest.fixture(scope="module")
def installed(
    request: pytest.FixtureRequest, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorInstall, AdmissionSession]]:
    """The operator, the admission policies bound to it, the tenant roles aggregated."""
    operator = install_operator(request, cluster, _OWN_INSTALL)
    operator.wait_ready()
    session = uuid.uuid4().hex[:6]
    admission = AdmissionSession(
        cluster, session, operator.namespace, tmp_path_factory.mktemp("adversary")
    )
    policies = session_policies(built(cluster, ADMISSION_DIR), session, operator.namespace)
    tenant_roles = built(cluster, TENANT_DIR)
    for role in tenant_roles:
        role["metadata"]["name"] = f"{role['metadata']['name']}-adv-{session}"
    admission.apply([*tenant_roles, *policies])
    yield operator, admission
    for document in [*policies, *tenant_roles]:
        cluster.kubectl(
            "delete", document["kind"].lower(), document["metadata"]["name"], check=False
        )


@pytest.fixture
def setting(
    installed: tuple[OperatorInstall, AdmissionSession],
    cluster: Cluster,
    request: pytest.FixtureRequest,
) -> Iterator[Setting]:
    """A fresh namespace the operator watches and the policies judge, the team its editor."""
    operator, admission = installed
    namespace = namespace_for(request.node.name, f"idep-{operator.session}", 30)
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, f"{SESSION_LABEL}={admission.session}")
    admission.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{TEAM}-edit", "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "edit",
                },
                "subjects": [user(TEAM)],
            }
        ]
    )
    here = Setting(cluster, operator, admission, namespace)
    # The aggregated roles reach `edit` through the controller-manager.
    wait_for(
        lambda: (
            here.team("auth", "can-i", "create", "inferencedeployments.infergate.io").stdout.strip()
            == "yes"
        ),
        60,
        "the tenant roles aggregated into edit",
    )
    yield here
    release_namespace(cluster, namespace)


def _canary_in_flight(
    setting: Setting, manifest: dict[str, Any] | None = None
) -> tuple[Idep, str, str, dict[str, Any]]:
    """The team makes its deployment (`manifest`, or the usual one), waits for it to be
    stable and changes its dtype: the stable revision, the canary revision and the canary's
    ParityCheck, whose runner's ServiceAccount the operator has made in the runner namespace
    and recorded."""
    manifest = manifest if manifest is not None else deployment_manifest()
    idep = Idep(setting.cluster, setting.namespace, manifest)
    made = setting.team_applies(manifest)
    assert made.allowed, made.stderr
    # The policies reach the admission chain through informers: wait until one bites.
    wait_until_enforced(
        lambda: setting.team("annotate", "idep", idep.name, f"{REQUESTED_BY}=nobody"),
        "the requester policy to refuse the team",
    )
    stable = idep.wait_stable(timeout=120)
    manifest["spec"]["engine"]["dtype"] = "float16"
    changed = setting.team_applies(manifest)
    assert changed.allowed, changed.stderr
    canary, check = idep.wait_check(timeout=90)
    name = check["metadata"]["name"]
    account = runner_account_name(check["metadata"]["uid"])

    def recorded() -> dict[str, Any] | None:
        body: dict[str, Any] = setting.cluster.get_json("pcheck", name, "-n", setting.namespace)
        runner = (body.get("status") or {}).get("runnerServiceAccount") or {}
        return body if runner.get("name") == account else None

    check = wait_for(recorded, 90, f"{name}: its runner recorded")
    found = setting.cluster.kubectl(
        "get", "serviceaccount", account, "-n", setting.runners, check=False
    )
    assert found.returncode == 0, found.stderr
    return idep, stable, canary, check


def _bound_verdict(check: dict[str, Any], *, passed: bool) -> dict[str, Any]:
    """A verdict bound as the runner binds one: the check's spec digest, generation and both
    revisions (a golden baseline, as a drift run's, resolves to the record's revision)."""
    spec = check["spec"]
    outcome = "Passed" if passed else "Failed"
    baseline = spec["baseline"]
    return {
        "phase": outcome,
        "baselineRevision": baseline.get("revision") or baseline["golden"]["revision"],
        "candidateRevision": spec["candidate"]["revision"],
        "verdict": {
            "passed": passed,
            "outcome": outcome,
            "summary": f"{outcome} (written as the runner writes it)",
            "specDigest": spec_digest(spec),
            "generation": check["metadata"]["generation"],
        },
        "metrics": {"tokenMatchRate": 1.0 if passed else 0.5},
    }


def _status_patch(status: dict[str, Any]) -> tuple[str, ...]:
    return ("--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def _runner_writes(setting: Setting, runner: str, check: str, status: dict[str, Any]) -> Result:
    """The verdict as the runner writes it: a PATCH of the status subresource (the only
    verb its Role grants there; kubectl would read the subresource first) under a real
    token of its ServiceAccount in the runner namespace."""
    answer = patch_check_status_as(
        setting.cluster, (runner, setting.runners), setting.namespace, check, status
    )
    ok = answer.status_code == 200
    return Result(0 if ok else 1, answer.text if ok else "", "" if ok else answer.text)


def _token_kubeconfig(setting: Setting, token: str, tmp: Path) -> Path:
    """A kubeconfig that authenticates with `token` alone."""
    import yaml

    config = yaml.safe_load(setting.cluster.kubeconfig.read_text())
    path = tmp / f"token-{uuid.uuid4().hex[:6]}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": config["clusters"][0]["cluster"]}],
                "users": [{"name": "minted", "user": {"token": token}}],
                "contexts": [{"name": "minted", "context": {"cluster": "local", "user": "minted"}}],
                "current-context": "minted",
            }
        )
    )
    return path


def _assert_not_promoted(setting: Setting, idep: Idep, stable: str, canary: str) -> None:
    """The rollout as a user reads it, a few resyncs later: the stable unchanged and still
    serving at full size, the canary not promoted."""
    settle()
    status = idep.status()
    assert status["stableRevision"] == stable
    record = {r["hash"]: r for r in status.get("revisions") or []}.get(canary) or {}
    assert not record.get("promotedAt"), record
    assert idep.revisions()[stable] == idep.manifest["spec"]["replicas"]
    service = setting.cluster.get_json("service", idep.name, "-n", setting.namespace)
    assert service["spec"]["selector"]["infergate.io/revision"] == stable


def test_the_team_cannot_mint_the_runners_token_nor_make_one_that_writes_a_verdict(
    setting: Setting, tmp_path: Path
) -> None:
    """Hole: the runner's ServiceAccount lived in the team's namespace, where `edit` mints
    tokens (`kubectl create token <check>-runner`) and runs pods as any ServiceAccount; a
    token so minted wrote a correctly bound Passed and the canary was promoted. Now the
    account is `check-<uid>-runner` in the runner namespace: not found in the team's
    namespace, forbidden in the runner's. The same name made in the team's namespace
    gives a token that writes nothing: `edit` cannot grant it status rights (no RBAC
    objects), and the status policy admits only the runner namespace's account."""
    idep, stable, canary, check = _canary_in_flight(setting)
    name = check["metadata"]["name"]
    account = check["status"]["runnerServiceAccount"]["name"]

    missing = setting.team("create", "token", account)
    assert not missing.allowed
    assert "not found" in missing.stderr
    forbidden = setting.team("create", "token", account, "-n", setting.runners)
    assert not forbidden.allowed
    assert "forbidden" in forbidden.stderr.lower()
    for verb, resource, *extra in (
        ("create", "pods"),
        ("get", "secrets"),
        ("create", "pods", "--subresource=exec"),
    ):
        there = setting.team("auth", "can-i", verb, resource, *extra, "-n", setting.runners)
        assert there.stdout.strip() == "no", (verb, resource, *extra)

    # The look-alike: the runner's name in the team's namespace, and a token for it.
    made = setting.team("create", "serviceaccount", account)
    assert made.allowed, made.stderr
    minted = setting.team("create", "token", account, "--duration=10m")
    assert minted.allowed, minted.stderr
    kubeconfig = _token_kubeconfig(setting, minted.stdout.strip(), tmp_path)
    # The team cannot give it rights: no Role or RoleBinding, and the check's own runner
    # binding is not theirs to edit.
    for verb, resource, *extra in (
        ("create", "rolebindings"),
        ("create", "roles"),
        ("patch", "rolebindings"),
        ("patch", "paritychecks.infergate.io", "--subresource=status"),
    ):
        answer = setting.team("auth", "can-i", verb, resource, *extra)
        assert answer.stdout.strip() == "no", (verb, resource, *extra)
    bind = setting.team(
        "create", "rolebinding", "mine", "--clusterrole=edit",
        f"--serviceaccount={setting.namespace}:{account}",
    )  # fmt: skip
    assert not bind.allowed
    written = subprocess.run(
        [
            str(setting.cluster.kubectl_path), f"--kubeconfig={kubeconfig}",
            "patch", "pcheck", name, "-n", setting.namespace,
            *_status_patch(_bound_verdict(check, passed=True)),
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert written.returncode != 0
    assert "forbidden" in written.stderr.lower()
    body = setting.cluster.get_json("pcheck", name, "-n", setting.namespace)
    assert body["status"].get("phase") not in ("Passed", "Failed")
    assert (body["status"].get("verdict") or {}).get("passed") is not True
    _assert_not_promoted(setting, idep, stable, canary)


def test_a_correctly_bound_forged_verdict_is_refused_on_every_path(setting: Setting) -> None:
    """Hole: whoever could write ParityCheck status wrote a Passed bound to the spec digest,
    generation and both revisions, and the operator promoted; InferenceDeployment status
    (the recorded check uid, stable revision, traffic step) had no writer rule at all. The
    team's roles name no `/status`, the policies admit only the operator and the recorded
    runner, and a status carried on the main resource is dropped by the API server. The
    canary stays unpromoted; a real verdict of the runner still goes through."""
    idep, stable, canary, check = _canary_in_flight(setting)
    name = check["metadata"]["name"]
    forged = _bound_verdict(check, passed=True)

    on_status = setting.team("patch", "pcheck", name, *_status_patch(forged))
    assert not on_status.allowed
    assert "forbidden" in on_status.stderr.lower()
    replaced = {**setting.cluster.get_json("pcheck", name, "-n", setting.namespace)}
    replaced["status"] = {**replaced["status"], **forged}
    on_replace = setting.team(
        "replace", "--subresource=status", "-f", "-", input=json.dumps(replaced)
    )
    assert not on_replace.allowed
    # The main resource, which the team may patch (edit): status is not written there.
    setting.team("patch", "pcheck", name, "--type=merge", "-p", json.dumps({"status": forged}))
    stored = setting.cluster.get_json("pcheck", name, "-n", setting.namespace)["status"]
    assert stored.get("phase") not in ("Passed", "Failed")
    assert (stored.get("verdict") or {}).get("passed") is not True

    # The deployment's status: the stable revision, the check the operator recorded.
    records = [
        {**r, "verdict": "Passed", "parityCheckUid": check["metadata"]["uid"]}
        if r["hash"] == canary
        else r
        for r in idep.status().get("revisions") or []
    ]
    moved = {"stableRevision": canary, "revisions": records}
    on_idep_status = setting.team("patch", "idep", idep.name, *_status_patch(moved))
    assert not on_idep_status.allowed
    assert "forbidden" in on_idep_status.stderr.lower()
    setting.team("patch", "idep", idep.name, "--type=merge", "-p", json.dumps({"status": moved}))
    _assert_not_promoted(setting, idep, stable, canary)

    # The runner, under its own token, writes the verdict the team could not: it counts.
    runner = check["status"]["runnerServiceAccount"]["name"]
    real = _runner_writes(setting, runner, name, _bound_verdict(check, passed=True))
    assert real.allowed, real.stderr
    promoted = idep.wait("the canary promoted", lambda s: s.get("stableRevision") == canary, 90)
    assert promoted["stableRevision"] == canary


def test_a_re_applied_promote_does_not_promote_a_canary_whose_check_failed(
    setting: Setting,
) -> None:
    """Hole: a rollout moved on the say of whoever could put something on the deployment.
    The manual promotion surface is the `infergate.io/promote` annotation (`true` or the
    canary's revision), handled once and removed. After the runner's Failed the canary is
    rolled back (autoRollback): the team re-applying the annotation, by `annotate` or with
    its whole manifest, or naming the failed revision, is refused and said (Event
    ManualActionRefused, with the requester the API server stamped); the failed revision
    is not made again, the stable keeps serving."""
    idep, stable, canary, check = _canary_in_flight(setting)
    name = check["metadata"]["name"]
    runner = check["status"]["runnerServiceAccount"]["name"]
    failed = _runner_writes(setting, runner, name, _bound_verdict(check, passed=False))
    assert failed.allowed, failed.stderr
    status = idep.wait_phase("RolledBack", timeout=90)
    assert status["stableRevision"] == stable
    assert {r["hash"]: r for r in status["revisions"]}[canary]["verdict"] == "Failed"
    idep.wait("the canary removed", lambda _: canary not in idep.revisions(), 90)

    manifest = json.loads(json.dumps(idep.manifest))
    manifest["spec"]["engine"]["dtype"] = "float16"
    requests: list[tuple[str, Any]] = [
        ("annotate", lambda: setting.team("annotate", "idep", idep.name, f"{PROMOTE}=true")),
        (
            "annotate the revision",
            lambda: setting.team(
                "annotate", "idep", idep.name, "--overwrite", f"{PROMOTE}={canary}"
            ),
        ),
        (
            "apply the manifest",
            lambda: setting.team_applies(
                {**manifest, "metadata": {**manifest["metadata"], "annotations": {PROMOTE: "true"}}}
            ),
        ),
    ]
    for what, ask in requests:
        asked = ask()
        assert asked.allowed, (what, asked.stderr)
        wait_for(
            lambda: PROMOTE not in (idep.get()["metadata"].get("annotations") or {}),
            60,
            f"{what}: the request handled and removed",
        )
        _assert_not_promoted(setting, idep, stable, canary)
        assert canary not in idep.revisions()
    refused = [e for e in idep.events() if e["reason"] == "ManualActionRefused"]
    assert any(
        "promote" in e["message"] and "there is no canary" in e["message"] for e in refused
    ), [e["message"] for e in refused]
    assert idep.status()["stableRevision"] == stable
