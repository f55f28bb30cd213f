"""Every value of the chart is read by a template and changes what is rendered; the
switches leave out exactly their objects; the CRD upgrade hook is what an upgrade runs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from infergate.commands.operator import account_annotations, pull_secret_names
from infergate_dev.chartvalues import Values, leaf_paths
from tests.unit.packaging.test_helm_chart import CHART, NAMESPACE, hook, template

JSON = dict[str, Any]
CRD_NAMES = ["inferencedeployments.infergate.io", "paritychecks.infergate.io"]


def _values() -> Values:
    return Values.model_validate(yaml.safe_load((CHART / "values.yaml").read_text()))


def _operator(rendered: list[JSON]) -> JSON:
    return next(d for d in rendered if d["kind"] == "Deployment")


def _job(rendered: list[JSON]) -> JSON:
    return next(d for d in rendered if d["kind"] == "Job")


def test_every_value_is_read_by_a_template() -> None:
    texts = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*") if p.is_file())
    unread = [
        path
        for path in leaf_paths(_values())
        if not re.search(rf"\.Values\.{re.escape(path)}\b", texts)
    ]
    assert unread == []


def test_pod_placement_values_reach_the_operator_and_the_crd_upgrade_job() -> None:
    rendered = template(
        "imagePullSecrets[0].name=regcred",
        "operator.priorityClassName=system-cluster-critical",
        "operator.nodeSelector.pool=system",
        "operator.tolerations[0].key=dedicated",
        "operator.tolerations[0].operator=Exists",
        "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "operator.replicas=3",
        "image.pullPolicy=Always",
    )
    operator, job = _operator(rendered), _job(rendered)
    assert operator["spec"]["replicas"] == 3
    for pod in (operator["spec"]["template"]["spec"], job["spec"]["template"]["spec"]):
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["priorityClassName"] == "system-cluster-critical"
        assert pod["nodeSelector"] == {"pool": "system"}
        assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert "nodeAffinity" in pod["affinity"]
        assert pod["containers"][0]["imagePullPolicy"] == "Always"
    defaults = _operator(template())["spec"]["template"]["spec"]
    assert defaults.keys().isdisjoint({"imagePullSecrets", "priorityClassName", "nodeSelector"})


def test_service_account_annotations_reach_the_operators_account_only() -> None:
    role = "arn:aws:iam::123456789012:role/infergate"
    rendered = template(f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={role}")
    accounts = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ServiceAccount"}
    assert accounts["infergate-operator"]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": role
    }
    assert "eks.amazonaws.com/role-arn" not in accounts["infergate-crd-upgrade"]["metadata"].get(
        "annotations", {}
    )
    plain = next(d for d in template() if d["metadata"]["name"] == "infergate-operator"
                 and d["kind"] == "ServiceAccount")  # fmt: skip
    assert "annotations" not in plain["metadata"]


def test_pull_secrets_and_runner_annotations_reach_the_operators_flags() -> None:
    role = "arn:aws:iam::123456789012:role/golden"
    rendered = template(
        "imagePullSecrets[0].name=regcred",
        "imagePullSecrets[1].name=mirror-creds",
        f"runner.serviceAccountAnnotations.eks\\.amazonaws\\.com/role-arn={role}",
    )
    args = _operator(rendered)["spec"]["template"]["spec"]["containers"][0]["args"]
    flags: dict[str, list[str]] = {}
    for arg in args:
        flag, _, value = arg.partition("=")
        flags.setdefault(flag, []).append(value)
    # What the operator makes of them: every runner account and runner/probe/mirror pod.
    assert pull_secret_names(flags["--image-pull-secret"]) == ("regcred", "mirror-creds")
    assert account_annotations(flags["--runner-service-account-annotation"]) == {
        "eks.amazonaws.com/role-arn": role
    }
    plain = _operator(template())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in plain if a.startswith(("--image-pull-secret", "--runner-service"))]


def test_the_operators_disruption_budget_exists_only_with_a_replica_to_spare() -> None:
    def budgets(*values: str) -> list[JSON]:
        return [d for d in template(*values) if d["kind"] == "PodDisruptionBudget"]

    [budget] = budgets()
    assert budget["spec"]["minAvailable"] == 1
    labels = _operator(template())["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # One replica under minAvailable 1 would block every drain of its node.
    assert budgets("operator.replicas=1") == []


ADMISSION_KINDS = {
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


@pytest.mark.parametrize(
    ("values", "gone"),
    [
        (["admission.enabled=false"], lambda d: d["kind"] in ADMISSION_KINDS),
        (["monitoring.enabled=false"], lambda d: d["kind"] == "ConfigMap"),
        (["monitoring.dashboard.enabled=false"], lambda d: d["kind"] == "ConfigMap"),
        (["crds.upgrade=false"], hook),
    ],
    ids=["admission", "monitoring", "dashboard", "crd-upgrade"],
)
def test_a_switch_leaves_out_exactly_its_objects(values: list[str], gone: Any) -> None:
    everything = template()
    expected = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in everything if not gone(d))
    assert len(expected) < len(everything)
    rendered = template(*values)
    assert sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered) == expected


def test_monitoring_off_wins_over_the_switches_below_it() -> None:
    rendered = template(
        "monitoring.enabled=false",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
    )
    assert {d["kind"] for d in rendered}.isdisjoint({"ServiceMonitor", "PrometheusRule"})
    on = template(
        "monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true"
    )
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= {d["kind"] for d in on}


def test_the_crd_upgrade_hook_runs_the_new_image_before_the_upgrade_with_a_narrow_role() -> None:
    rendered = [d for d in template("image.tag=0.2.0", "operator.extraEnv[0].name=HTTPS_PROXY",
                                    "operator.extraEnv[0].value=http://proxy:3128") if hook(d)]  # fmt: skip
    assert sorted(d["kind"] for d in rendered) == [
        "ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount",
    ]  # fmt: skip
    for doc in rendered:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-upgrade"
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    weights = {
        d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in rendered
    }
    assert weights["ServiceAccount"] < weights["ClusterRoleBinding"] < weights["Job"]
    assert weights["ClusterRole"] < weights["Job"]
    job = _job(rendered)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/infergate/infergate:0.2.0"
    assert container["args"] == ["crds", "--apply"]
    assert container["env"] == [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["serviceAccountName"] == "infergate-crd-upgrade"
    assert job["metadata"]["namespace"] == NAMESPACE
    role = next(d for d in rendered if d["kind"] == "ClusterRole")
    named, create = role["rules"]
    assert named["resourceNames"] == CRD_NAMES
    assert named["verbs"] == ["get", "update"]
    assert create == {"apiGroups": ["apiextensions.k8s.io"],
                      "resources": ["customresourcedefinitions"], "verbs": ["create"]}  # fmt: skip
    crds = sorted(
        d["metadata"]["name"] for d in template() if d["kind"] == "CustomResourceDefinition"
    )
    assert crds == CRD_NAMES
