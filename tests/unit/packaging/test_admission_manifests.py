"""The admission policies agree with the code they stand guard for: the operator's identity,
its install namespace, the runner's naming, the control annotations, the accelerator mounts
and the Namespace annotations that allow host paths and ServiceAccounts. (What they refuse is tested against the
API server in tests/integration/test_admission_policies.py.)"""

from __future__ import annotations

import re
from typing import Any

import yaml

from infergate.api.access import (
    ALLOWED_HOST_PATHS_ANNOTATION,
    ENGINE_SERVICE_ACCOUNTS_ANNOTATION,
)
from infergate.api.base import GROUP
from infergate.plan.deployment.control import CONTROL_ANNOTATIONS, REQUESTED_BY
from infergate.render.accelerators import PRESETS
from infergate.render.check_names import (
    DEFAULT_RUNNER_NAMESPACE,
    report_name,
    runner_account_name,
    runner_name,
)
from infergate.render.labels import LABEL_REVISION
from infergate.runner.endpoints import (
    ENDPOINTSLICE_CONTROLLER,
    LOCAL_EXECUTOR,
    MANAGED_BY_LABEL,
    TRUSTED_MANAGERS,
)
from tests.unit.packaging.kustomize import (
    MANIFESTS,
    build,
    one,
    operator_service_account,
    tenant_role,
)

ADMISSION = MANIFESTS / "admission"
NAMESPACED = MANIFESTS / "overlays" / "namespaced"


def _policies() -> list[dict[str, Any]]:
    return [
        d
        for path in sorted(ADMISSION.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if d
    ]


def _text(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, width=10_000)


def _by_name(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in _policies() if d["kind"] == kind and d["metadata"]["name"] == name)


def test_every_policy_is_bound_to_deny_and_fails_closed() -> None:
    documents = _policies()
    policies = {
        (d["kind"], d["metadata"]["name"]): d for d in documents if d["kind"].endswith("Policy")
    }
    bindings = [d for d in documents if d["kind"].endswith("PolicyBinding")]
    assert {(b["kind"].removesuffix("Binding"), b["spec"]["policyName"]) for b in bindings} == set(
        policies
    )
    for policy in policies.values():
        assert policy["spec"]["failurePolicy"] == "Fail", policy["metadata"]["name"]
        # A built-in paramKind loses its params for good once unbound on v1.36
        # (kubernetes/kubernetes#130887): the policies take none.
        assert "paramKind" not in policy["spec"]
    for binding in bindings:
        if binding["kind"] == "ValidatingAdmissionPolicyBinding":
            assert binding["spec"]["validationActions"] == ["Deny"]


# kube-controller-manager's controllers, as it runs with --use-service-account-credentials.
CONTROLLERS = {
    f"system:serviceaccount:kube-system:{name}"
    for name in (
        "replicaset-controller",
        "job-controller",
        "deployment-controller",
        "generic-garbage-collector",
        "endpointslice-controller",
        "statefulset-controller",
    )
}
# The LeaderWorkerSet controller as its release installs it (lws config/default:
# namespace lws-system, name prefix lws-, ServiceAccount controller-manager).
LWS_CONTROLLER = "system:serviceaccount:lws-system:lws-controller-manager"


def test_the_operator_named_in_the_policies_is_the_installed_one() -> None:
    namespace, account = operator_service_account(build(MANIFESTS / "operator"))
    username = f"system:serviceaccount:{namespace}:{account}"
    for document in _policies():
        names = set(re.findall(r"system:serviceaccount:[-a-z0-9]+:[-a-z0-9]+", _text(document)))
        assert names <= {username, LWS_CONTROLLER, *CONTROLLERS}, document["metadata"]["name"]
    protected = _text(_by_name("ValidatingAdmissionPolicy", "infergate-operator-namespaces"))
    assert f"'{namespace}'" in protected


def test_namespace_allow_lists_are_the_annotations_the_api_names() -> None:
    for name in ("infergate-inferencedeployment-access", "infergate-operator-workloads"):
        text = _text(_by_name("ValidatingAdmissionPolicy", name))
        named = set(re.findall(r"'(infergate\.io/[-a-z]+)'", text))
        assert named == {ALLOWED_HOST_PATHS_ANNOTATION, ENGINE_SERVICE_ACCOUNTS_ANNOTATION}
        assert "namespaceObject.metadata.annotations" in text


def test_control_annotations_are_the_ones_the_controller_reads() -> None:
    for kind in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"):
        text = _text(_by_name(kind, "infergate-control-requester"))
        named = set(re.findall(r"'(infergate\.io/[-a-z]+)'", text))
        assert set(CONTROL_ANNOTATIONS) <= named
        assert named <= {*CONTROL_ANNOTATIONS, REQUESTED_BY}
    mutation = _by_name("MutatingAdmissionPolicy", "infergate-control-requester")
    assert REQUESTED_BY in _text(mutation)


def test_accelerator_mounts_are_the_ones_the_renderer_makes() -> None:
    text = _text(_by_name("ValidatingAdmissionPolicy", "infergate-operator-workloads"))
    driver = next(
        v
        for v in _by_name("ValidatingAdmissionPolicy", "infergate-operator-workloads")["spec"][
            "variables"
        ]
        if v["name"] == "driverPaths"
    )
    listed = set(re.findall(r"'(/[^']+)'", driver["expression"]))
    rendered = {mount.path for preset in PRESETS.values() for mount in preset.host_mounts}
    assert listed == rendered
    assert "-runner" in text


def test_runner_names_follow_the_rule_the_status_policy_checks() -> None:
    """check-<uid>-runner of the runner namespace: one name per check, whatever its name or
    namespace, short enough for a Job's pod labels; the status policy admits that account
    of the runner namespace only (never one of the check's own namespace)."""
    uid = "5f0c6b2e-8c1d-4f7a-9a43-0d2b6f1e7c55"
    name = runner_account_name(uid)
    assert name == f"check-{uid}-runner"
    assert len(name) <= 63
    policy = _by_name("ValidatingAdmissionPolicy", "infergate-paritycheck-status")
    text = _text(policy)
    assert "== 'check-' + object.metadata.uid + '-runner'" in text
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["runnerNamespace"] == f"'{DEFAULT_RUNNER_NAMESPACE}'"
    assert "request.namespace" not in variables["isRunner"]
    assert "'system:serviceaccount:' + variables.runnerNamespace" in variables["isRunner"]


def test_the_runner_namespace_of_the_policies_is_where_the_operator_is_installed() -> None:
    """The default install runs runners in the operator's namespace (the operator's
    default with POD_NAMESPACE set): the policies name that namespace for them."""
    namespace, _ = operator_service_account(build(MANIFESTS / "operator"))
    assert namespace == DEFAULT_RUNNER_NAMESPACE
    for name in ("infergate-operator-workloads", "infergate-operator-namespaces"):
        text = _text(_by_name("ValidatingAdmissionPolicy", name))
        assert f"'{namespace}'" in text
        assert "startsWith('check-')" in text


def test_namespaced_overlay_grants_nothing_cluster_wide() -> None:
    documents = build(NAMESPACED)
    assert [d for d in documents if d["kind"] == "ClusterRoleBinding"] == []
    _, account = operator_service_account(documents)
    all_bindings = [d for d in documents if d["kind"] == "RoleBinding"]
    # The leader-election Lease's Role and the runner namespace's Role, in the operator's
    # own namespace, bind no rule set.
    bindings = [b for b in all_bindings if b["roleRef"]["kind"] == "ClusterRole"]
    own = [b for b in all_bindings if b not in bindings]
    assert {b["roleRef"]["name"] for b in own} == {
        "infergate-operator-leader-election",
        "infergate-runner-namespace",
    }
    assert {b["metadata"]["namespace"] for b in own} == {"infergate-system"}
    watched = {b["metadata"]["namespace"] for b in bindings}
    assert watched == {"llm"}
    # Rule sets of the operator; the tenant roles aggregate into the built-in ones instead.
    roles = {
        d["metadata"]["name"]
        for d in documents
        if d["kind"] == "ClusterRole" and not tenant_role(d)
    }
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["roleRef"]["name"] in roles
        assert [(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]] == [
            ("ServiceAccount", account, "infergate-system")
        ]
    for namespace in watched:
        assert {
            b["roleRef"]["name"] for b in bindings if b["metadata"]["namespace"] == namespace
        } == roles
    args = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {a.removeprefix("--namespace=") for a in args if a.startswith("--namespace=")} == watched


def test_namespaced_overlay_installs_the_same_objects_bar_the_cluster_bindings() -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in build(MANIFESTS)}
    namespaced = {(d["kind"], d["metadata"]["name"]) for d in build(NAMESPACED)}
    assert base - namespaced == {
        ("ClusterRoleBinding", "infergate-operator"),
        ("ClusterRoleBinding", "infergate-paritycheck-controller"),
    }
    assert namespaced - base == {
        ("RoleBinding", "infergate-operator"),
        ("RoleBinding", "infergate-paritycheck-controller"),
        ("Role", "infergate-runner-namespace"),
        ("RoleBinding", "infergate-runner-namespace"),
    }


def test_namespaced_overlay_lets_the_operator_keep_runners_in_its_own_namespace() -> None:
    """Runner Jobs, ServiceAccounts and NetworkPolicies are made in the operator's
    namespace; there it may write those and nothing else, and watch what kopf watches."""
    documents = build(NAMESPACED)
    [role] = [
        d
        for d in documents
        if d["kind"] == "Role" and d["metadata"]["name"] == "infergate-runner-namespace"
    ]
    assert role["metadata"]["namespace"] == "infergate-system"
    written = {
        resource
        for rule in role["rules"]
        if set(rule["verbs"]) - {"get", "list", "watch"}
        for resource in rule["resources"]
    }
    assert written == {"jobs", "serviceaccounts", "networkpolicies"}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]


def _variable(policy: dict[str, Any], name: str) -> str:
    return str(next(v for v in policy["spec"]["variables"] if v["name"] == name)["expression"])


def _users(text: str) -> set[str]:
    return set(re.findall(r"'(system:[-a-z0-9:]+)'", text))


def _matched(policy: dict[str, Any]) -> dict[str, set[str]]:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    found: dict[str, set[str]] = {}
    for rule in rules:
        for resource in rule["resources"]:
            found[resource] = set(rule["operations"])
    return found


def test_only_the_workload_controllers_write_pods_wearing_infergate_metadata() -> None:
    """A pod copying the canary's labels, or an owner reference to its ReplicaSet (which
    the runner cannot tell from the real one once labels and hash are copied too), is
    refused unless the ReplicaSet or Job controller, or the operator, creates it."""
    policy = _by_name("ValidatingAdmissionPolicy", "infergate-managed-pods")
    assert _matched(policy) == {"pods": {"CREATE", "UPDATE"}}
    [condition] = policy["spec"]["matchConditions"]
    # Both the object and what it was (a label removed is a label worn).
    assert "[object, oldObject]" in condition["expression"]
    assert f"'{GROUP}/'" in condition["expression"]
    assert LABEL_REVISION.startswith(f"{GROUP}/")
    assert "ownerReferences" in condition["expression"]
    namespace, account = operator_service_account(build(MANIFESTS / "operator"))
    assert _users(_variable(policy, "creators")) == {
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:job-controller",
        # A group's pods, made from the StatefulSets of its LeaderWorkerSet.
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:kube-controller-manager",
        f"system:serviceaccount:{namespace}:{account}",
    }
    # Updates only: owner references removed, adoption, the local executor's kubelet role.
    assert _users(_variable(policy, "updaters")) == {
        "system:serviceaccount:kube-system:deployment-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        LWS_CONTROLLER,
        _LOCAL_NODES,
    }
    [rule] = policy["spec"]["validations"]
    assert "request.operation == 'UPDATE'" in rule["expression"]


def test_only_the_operator_writes_objects_wearing_infergate_metadata() -> None:
    policy = _by_name("ValidatingAdmissionPolicy", "infergate-managed-objects")
    matched = _matched(policy)
    for resource in (
        "configmaps", "services", "deployments", "replicasets", "statefulsets",
        "daemonsets", "jobs", "cronjobs", "leaderworkersets",
    ):  # fmt: skip
        assert matched[resource] == {"CREATE", "UPDATE"}, resource
    # A group's templates count: a leader's or a worker's pods would wear the labels.
    for template in ("leaderTemplate", "workerTemplate"):
        assert f"leaderWorkerTemplate.{template}.metadata.labels" in _variable(
            policy, "templateLabels"
        )
    # The LWS controller makes a group's StatefulSets, nothing else of ours.
    assert f"'{LWS_CONTROLLER}'" in _variable(policy, "controller")
    # A workload's pod template counts: its pods would wear the labels.
    assert "spec.template.metadata.labels" in _variable(policy, "templateLabels")
    assert "spec.jobTemplate.spec.template.metadata.labels" in _variable(policy, "templateLabels")
    namespace, account = operator_service_account(build(MANIFESTS / "operator"))
    assert _variable(policy, "operator").endswith(f"'system:serviceaccount:{namespace}:{account}'")
    # A check's runner fills only its report ConfigMap.
    assert report_name("c").endswith("-report")
    assert runner_name("c").endswith("-runner")
    assert "'-report'" in _variable(policy, "report")
    assert "'-runner'" in _variable(policy, "report")


def test_the_publishers_policy_names_the_labels_the_runner_trusts() -> None:
    policy = _by_name("ValidatingAdmissionPolicy", "infergate-endpoint-publishers")
    assert _matched(policy) == {"endpointslices": {"CREATE", "UPDATE"}}
    assert MANAGED_BY_LABEL in _variable(policy, "managers")
    validations = [v["expression"] for v in policy["spec"]["validations"]]
    named = {m for text in validations for m in re.findall(r"'([-a-z.]+\.(?:io|k8s\.io))'", text)}
    assert named == set(TRUSTED_MANAGERS)
    assert any(
        ENDPOINTSLICE_CONTROLLER in v and "kube-system:endpointslice-controller" in v
        for v in validations
    )
    assert any(LOCAL_EXECUTOR in v and _LOCAL_NODES in v for v in validations)


# The local cluster's executor publishes its slices as this user (dev/infergate_dev pki).
_LOCAL_NODES = "system:infergate-local-nodes"


def test_the_local_executor_is_the_user_the_policies_name() -> None:
    from infergate_dev.localcluster.pki import CLIENTS

    assert ("nodes", _LOCAL_NODES, "system:masters") in CLIENTS


def test_only_the_operator_writes_an_inference_deployments_status() -> None:
    """Whoever RBAC lets write inferencedeployments/status (a `*/status` grant) could record
    a traffic step or a stable revision the rollout never judged: the policy admits the
    operator's user name alone, and says so."""
    namespace, account = operator_service_account(build(MANIFESTS / "operator"))
    username = f"system:serviceaccount:{namespace}:{account}"
    installed = build(ADMISSION)
    policy = one(installed, "ValidatingAdmissionPolicy", "infergate-inferencedeployment-status")
    binding = one(
        installed, "ValidatingAdmissionPolicyBinding", "infergate-inferencedeployment-status"
    )
    assert binding["spec"] == {
        "policyName": "infergate-inferencedeployment-status",
        "validationActions": ["Deny"],
    }
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["infergate.io"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["inferencedeployments/status"],
        }
    ]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables == {"operator": f"'{username}'"}
    [validation] = policy["spec"]["validations"]
    # Nothing but the user name decides: no uid, group or RBAC-derived exception.
    assert validation["expression"] == "request.userInfo.username == variables.operator"
    assert username in validation["message"]
    assert "variables.operator" in validation["messageExpression"]
    assert "request.userInfo.username" in validation["messageExpression"]


_CEL_KEYS = ("expression", "messageExpression")
# What may follow a CEL string literal: an operator (`in` too), a closing bracket, a separator or the
# end. A word right after one (`'the runners' Jobs'`) is a quote that ended the literal.
_AFTER_LITERAL = re.compile(r"\s*(?:$|in\b|[-+*/%)\],}:?=!<>&|.])")


def _cel_expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in _CEL_KEYS and isinstance(v, str)]
        return found + [e for v in node.values() for e in _cel_expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in _cel_expressions(v)]
    return []


def _literal_ends(expression: str) -> list[int]:
    """Where each string literal of a CEL expression ends (its closing quote); raises if
    one never ends."""
    ends, quote, i = [], "", 0
    while i < len(expression):
        ch = expression[i]
        if quote:
            if ch == "\\":
                i += 1
            elif expression.startswith(quote, i):
                ends.append(i + len(quote) - 1)
                i += len(quote) - 1
                quote = ""
        elif ch in "'\"":
            quote = ch * 3 if expression.startswith(ch * 3, i) else ch
            i += len(quote) - 1
        i += 1
    if quote:
        raise AssertionError(f"a string literal never ends in: {expression}")
    return ends


def test_every_cel_string_literal_ends_where_its_text_does() -> None:
    """A quote inside a message (`the runners' Jobs`) ends the literal early: the API server
    refuses the whole policy at install. Every literal must close, and be followed by an
    operator, a bracket or the end, never by a word."""
    for document in _policies():
        for expression in _cel_expressions(document["spec"]):
            for end in _literal_ends(expression):
                rest = expression[end + 1 :]
                assert _AFTER_LITERAL.match(rest), (
                    f"{document['metadata']['name']}: a word follows a string literal at "
                    f"{rest[:40]!r} in {expression!r}"
                )
