"""What a check starts: probes that copy the revision but take no traffic, a runner with
least privilege."""

from __future__ import annotations

import json
from typing import Any

from infergate.api.enums import EngineKind
from infergate.api.golden import GoldenSpec
from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.controllers._watched import WATCH_LABELS
from infergate.golden.settings import GOLDEN_CONFIG_ENV, GOLDEN_MOUNT_PATH
from infergate.plan.check.observed import observe_parity_check
from infergate.render.check_children import (
    pooling_args,
    probe_pod,
    probe_service,
    report_config_map,
    runner_job,
    runner_network_policy,
    runner_rbac,
)
from infergate.render.check_names import child_name, probe_name
from infergate.render.labels import engine_pod_selector
from infergate.render.objects import render_revision

CHECK: dict[str, Any] = {
    "apiVersion": "infergate.io/v1alpha1",
    "kind": "ParityCheck",
    "metadata": {"name": "qwen-bbbbbbbbbb", "namespace": "llm", "uid": "u-1"},
    "spec": {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
        "suite": {"configMapRef": {"name": "prompts", "key": "suite.jsonl"}},
        "runner": {"activeDeadlineSeconds": 600, "backoffLimit": 2, "concurrency": 1},
    },
}

RUNNER = "ghcr.io/infergate/infergate:0.1.0"
RUNNERS = "infergate-system"


def vllm_revision() -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "fixture", "uri": "file:///models/tiny"},
            "engine": {
                "kind": "vllm",
                "image": "vllm/vllm-openai:v0.32.0",
                "dtype": "bfloat16",
                "maxModelLen": 2048,
                "config": {"rms_norm_eps": 1e-6},
            },
            "accelerator": {"kind": "nvidia-gpu"},
            "replicas": 1,
            "rollout": {"autoPromote": False},
        }
    )
    return render_revision("qwen", "llm", spec).deployment


def selected(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_probe_runs_the_revisions_image_and_pinned_flags_in_pooling_mode() -> None:
    deployment = vllm_revision()
    pod = probe_pod(CHECK, "baseline", deployment, fingerprint_image=RUNNER)
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    probe = pod["spec"]["containers"][0]
    assert probe["image"] == engine["image"]
    assert probe["command"] == engine["command"]
    assert probe["args"][: probe["args"].index("--runner")] == [
        a for a in engine["args"] if a not in ("--max-logprobs", "20")
    ]
    assert probe["args"][-6:-1] == ["--runner", "pooling", "--convert", "embed", "--pooler-config"]
    assert json.loads(probe["args"][-1]) == {
        "task": "token_embed",
        "tok_pooling_type": "ALL",
        "use_activation": False,
    }
    # Same accelerator, node selection and tolerations as the revision's own pods.
    assert probe["resources"] == engine["resources"]
    assert pod["spec"]["nodeSelector"] == deployment["spec"]["template"]["spec"]["nodeSelector"]
    assert pod["spec"]["tolerations"] == deployment["spec"]["template"]["spec"]["tolerations"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_no_service_of_the_deployment_ever_selects_the_probe() -> None:
    pod = probe_pod(CHECK, "baseline", vllm_revision(), fingerprint_image=RUNNER)
    labels = pod["metadata"]["labels"]
    assert not selected(engine_pod_selector("qwen"), labels)
    assert not selected(engine_pod_selector("qwen", "aaaaaaaaaa"), labels)
    service = probe_service(CHECK, "baseline", 8000)
    assert selected(service["spec"]["selector"], labels)
    assert (
        service["metadata"]["name"]
        == pod["metadata"]["name"]
        == probe_name("qwen-bbbbbbbbbb", "baseline")
    )


def test_pooling_args_drop_serving_only_flags() -> None:
    assert pooling_args(["serve", "/m", "--max-logprobs", "20", "--seed", "1"])[:4] == [
        "serve",
        "/m",
        "--seed",
        "1",
    ]
    assert pooling_args(["serve", "/m", "--max-logprobs=20"])[:2] == ["serve", "/m"]


def test_the_runner_role_names_every_object_and_writes_only_its_own_status_and_report() -> None:
    account, role, binding = runner_rbac(
        CHECK,
        runner_namespace=RUNNERS,
        deployments=["qwen", "qwen"],
        services=["qwen-aaaaaaaaaa", "qwen-bbbbbbbbbb", "qwen-bbbbbbbbbb-probe-baseline"],
        config_maps=["qwen-aaaaaaaaaa", "qwen-bbbbbbbbbb", "prompts"],
    )
    rules = role["rules"]
    writes = [r for r in rules if set(r["verbs"]) - {"get", "list", "watch"}]
    assert {(r["resources"][0], tuple(r["resourceNames"])) for r in writes} == {
        ("paritychecks/status", ("qwen-bbbbbbbbbb",)),
        ("configmaps", ("qwen-bbbbbbbbbb-report",)),
    }
    for rule in rules:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        # Slices are listed by label; a side's pods and their ReplicaSets are known only
        # once published (runner.side_pods): none of those is nameable in advance.
        if rule["resources"] not in (
            ["endpointslices"],
            ["pods"],
            ["replicasets"],
            ["statefulsets"],
        ):
            assert rule["resourceNames"], rule
    unnamed = {(r["resources"][0], tuple(r["verbs"])) for r in rules if "resourceNames" not in r}
    assert unnamed == {
        ("endpointslices", ("list",)),
        ("pods", ("get",)),
        ("replicasets", ("get",)),
        ("statefulsets", ("get",)),
    }
    config_maps = next(
        r for r in rules if r["resources"] == ["configmaps"] and r["verbs"] == ["get"]
    )
    assert config_maps["resourceNames"] == [
        "prompts",
        "qwen-aaaaaaaaaa",
        "qwen-bbbbbbbbbb",
        "qwen-bbbbbbbbbb-report",
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": RUNNERS}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_runner_account_lives_in_the_runner_namespace_and_is_granted_in_the_checks() -> None:
    """No one with rights in the check's namespace only can mint the runner's token or run
    a pod as it: its ServiceAccount is the runner namespace's, named after the check's uid
    (two namespaces' checks of one name never share it); the grant stays in the check's
    namespace, owned by the check, its subject naming the other namespace's account."""
    account, role, binding = runner_rbac(
        CHECK, runner_namespace=RUNNERS, deployments=["qwen"], services=["s"], config_maps=["c"]
    )
    assert account["metadata"]["namespace"] == RUNNERS
    assert account["metadata"]["name"] == "check-u-1-runner"
    assert "ownerReferences" not in account["metadata"]  # none can cross namespaces
    labels = account["metadata"]["labels"]
    assert labels["infergate.io/paritycheck-namespace"] == "llm"
    assert labels["infergate.io/paritycheck-uid"] == "u-1"
    assert labels["infergate.io/paritycheck"] == "qwen-bbbbbbbbbb"
    for grant in (role, binding):
        assert grant["metadata"]["namespace"] == "llm"
        assert grant["metadata"]["name"] == "qwen-bbbbbbbbbb-runner"
        assert grant["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    [subject] = binding["subjects"]
    assert (subject["namespace"], subject["name"]) == (RUNNERS, "check-u-1-runner")
    other = {**CHECK, "metadata": {**CHECK["metadata"], "namespace": "team-b", "uid": "u-2"}}
    other_account, _, _ = runner_rbac(
        other, runner_namespace=RUNNERS, deployments=[], services=[], config_maps=[]
    )
    assert other_account["metadata"]["name"] != account["metadata"]["name"]


def _deployment_verbs(role: dict[str, Any]) -> list[tuple[str, tuple[str, ...] | None]]:
    return [
        (verb, tuple(rule["resourceNames"]) if "resourceNames" in rule else None)
        for rule in role["rules"]
        if rule["resources"] == ["inferencedeployments"]
        for verb in rule["verbs"]
    ]


def test_the_runner_lists_deployments_only_when_retention_deletes_the_deleted_ones() -> None:
    """`get` of its own deployment by name always; `list` of the namespace's (a list
    cannot be narrowed to names) only for `whenDeleted: Delete`; never watch or a write."""
    args = {"deployments": ["qwen"], "services": ["s"], "config_maps": ["c"]}
    _, role, _ = runner_rbac(CHECK, runner_namespace=RUNNERS, **args)  # type: ignore[arg-type]
    assert _deployment_verbs(role) == [("get", ("qwen",))]
    _, role, _ = runner_rbac(
        CHECK,
        runner_namespace=RUNNERS,
        **args,  # type: ignore[arg-type]
        list_deployments=True,
    )
    assert _deployment_verbs(role) == [("get", ("qwen",)), ("list", None)]
    granted = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert granted == {"get", "list", "patch", "update"}


def test_an_empty_name_list_drops_the_rule_rather_than_granting_every_object() -> None:
    _, role, _ = runner_rbac(
        CHECK, runner_namespace=RUNNERS, deployments=[], services=[], config_maps=[]
    )
    resources = [r["resources"][0] for r in role["rules"]]
    assert "inferencedeployments" not in resources
    assert "services" not in resources


def test_the_runner_job_runs_the_check_under_its_account_with_the_checks_limits() -> None:
    spec = observe_parity_check(CHECK).spec
    assert spec is not None
    job = runner_job(
        CHECK,
        spec.runner,
        image="ghcr.io/infergate/infergate:0.1.0",
        runner_namespace=RUNNERS,
        previous_report="qwen-old-report",
    )
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["infergate"]
    assert container["args"] == [
        "parity",
        "run",
        "--check",
        "llm/qwen-bbbbbbbbbb",
        "--concurrency",
        "1",
        "--previous-report",
        "qwen-old-report",
    ]
    assert pod["serviceAccountName"] == "check-u-1-runner"
    assert job["metadata"]["namespace"] == RUNNERS
    assert job["metadata"]["name"] == "check-u-1-runner"
    assert "ownerReferences" not in job["metadata"]
    assert container["image"] == "ghcr.io/infergate/infergate:0.1.0"
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["backoffLimit"] == 2
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_operators_golden_store_reaches_the_runner_and_nothing_else_does() -> None:
    spec = observe_parity_check(CHECK).spec
    assert spec is not None
    plain = runner_job(CHECK, spec.runner, image="img", runner_namespace=RUNNERS)
    assert "volumes" not in plain["spec"]["template"]["spec"]
    pvc = GoldenSpec.model_validate(
        {"store": {"pvc": {"claimName": "golden-records", "subPath": "prod"}}}
    )
    job = runner_job(CHECK, spec.runner, image="img", runner_namespace=RUNNERS, golden=pvc)
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert GoldenSpec.model_validate(json.loads(env[GOLDEN_CONFIG_ENV]["value"])) == pvc
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts[GOLDEN_MOUNT_PATH]]["persistentVolumeClaim"] == {
        "claimName": "golden-records"
    }
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    # The root stays read-only; scratch space is the pod's own emptyDir.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "emptyDir" in volumes[mounts[env["TMPDIR"]["value"]]]

    s3 = GoldenSpec.model_validate(
        {
            "store": {
                "s3": {
                    "endpoint": "http://127.0.0.1:7070",
                    "bucket": "golden",
                    "secretRef": {"name": "golden-s3", "accessKeyIdKey": "id"},
                }
            }
        }
    )
    job = runner_job(CHECK, spec.runner, image="img", runner_namespace=RUNNERS, golden=s3)
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    # Keys only from the Secret, never as values in the Job.
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {
        "secretKeyRef": {"name": "golden-s3", "key": "id"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "golden-s3", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert all(m["mountPath"] != GOLDEN_MOUNT_PATH for m in container["volumeMounts"])

    # credentials: Environment: no key anywhere in the Job, the runner's identity holds them.
    ambient = GoldenSpec.model_validate(
        {
            "store": {
                "s3": {
                    "endpoint": "https://s3.eu-west-1.amazonaws.com",
                    "bucket": "golden",
                    "credentials": "Environment",
                }
            }
        }
    )
    job = runner_job(CHECK, spec.runner, image="img", runner_namespace=RUNNERS, golden=ambient)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert not {e["name"] for e in container["env"]} & {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    }
    assert "secretKeyRef" not in json.dumps(job)


def test_long_check_names_give_valid_distinct_child_names() -> None:
    a, b = "x" * 70 + "a", "x" * 70 + "b"
    assert len(child_name(a, "probe-candidate")) <= 63
    assert child_name(a, "probe-candidate") != child_name(b, "probe-candidate")
    assert child_name(a, "probe-candidate").endswith("-probe-candidate")


def test_engine_kinds_the_probe_applies_to() -> None:
    from infergate.plan.check.sides import needs_probe

    # vLLM says neither what it loaded nor (but under pooling) its hidden states.
    assert needs_probe(EngineKind.VLLM.value)
    assert not needs_probe(EngineKind.MINDFORMERS.value)


def test_the_probe_serves_what_the_revision_loaded_beside_it() -> None:
    deployment = vllm_revision()
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    pod = probe_pod(CHECK, "baseline", deployment, fingerprint_image=RUNNER)
    pooling, fingerprints = pod["spec"]["containers"]
    assert pooling["args"][-6] == "--runner"
    assert fingerprints["image"] == RUNNER
    assert fingerprints["args"][:3] == [
        "fingerprints",
        "--engine-config",
        "/etc/infergate/engine/engine.json",
    ]
    # The same model and pinned config the engine mounts, read-only.
    model_mounts = {m["mountPath"] for m in engine["volumeMounts"] if m["name"] != "dshm"}
    assert {m["mountPath"] for m in fingerprints["volumeMounts"]} == model_mounts
    assert all(m["readOnly"] for m in fingerprints["volumeMounts"])
    assert "nvidia.com/gpu" not in str(fingerprints["resources"])
    service = probe_service(CHECK, "baseline", 8000)
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "fingerprints"]


def test_without_hidden_states_the_probe_only_serves_fingerprints_and_holds_no_accelerator() -> (
    None
):
    pod = probe_pod(
        CHECK, "baseline", vllm_revision(), hidden_states=False, fingerprint_image=RUNNER
    )
    [only] = pod["spec"]["containers"]
    assert only["name"] == "fingerprints"
    assert "nvidia.com/gpu" not in str(pod["spec"]["containers"])
    service = probe_service(CHECK, "baseline", 8000, hidden_states=False)
    assert [p["name"] for p in service["spec"]["ports"]] == ["fingerprints"]


def test_every_child_of_a_check_wears_the_label_the_operators_watches_select() -> None:
    spec = observe_parity_check(CHECK).spec
    assert spec is not None
    job = runner_job(CHECK, spec.runner, image=RUNNER, runner_namespace=RUNNERS)
    children = [
        *runner_rbac(
            CHECK, runner_namespace=RUNNERS, deployments=["qwen"], services=[], config_maps=[]
        ),
        runner_network_policy(CHECK, [], runner_namespace=RUNNERS),
        job,
        job["spec"]["template"],
        probe_pod(CHECK, "baseline", vllm_revision(), fingerprint_image=RUNNER),
        probe_service(CHECK, "baseline", 8000),
        report_config_map(CHECK),
    ]
    for child in children:
        labels = child["metadata"]["labels"]
        for key, value in WATCH_LABELS.items():
            assert labels.get(key) == value, child.get("kind", "pod template")
