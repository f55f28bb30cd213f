"""Pod Security on the real API server: which of infergate's pods each level admits.

Three namespaces enforce `restricted`, `baseline` and `privileged`
(`pod-security.kubernetes.io/enforce`). Each pod infergate makes is created there with a
server-side dry run, as the ReplicaSet or Job controller would create it from the rendered
template (Pod Security enforces on pods; on a Deployment or Job it only warns): the
vLLM and MindFormers engines of the examples in manifests/examples, vLLM with a file://
model, a parity runner Job, a mirror and the installed operator Deployment. The API
server's answers must be the table of docs/pod-security.md, and a refusal must name
hostPath, the one exception the docs state.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infergate.api import InferenceDeploymentSpec
from infergate.api.shadow import Mirror
from infergate.plan.check.observed import observe_parity_check
from infergate.render import render_revision
from infergate.render.check_children import runner_job
from infergate.render.check_names import runner_account_name
from infergate.render.images import DEFAULT_RUNNER_IMAGE
from infergate.render.mirror import render_mirror
from tests.harness import REPO, Cluster, release_namespace, wait_for

pytestmark = pytest.mark.cluster

JSON = dict[str, Any]
LEVELS = ("restricted", "baseline", "privileged")
RUNNERS = "infergate-system"
"""Where runner Jobs run (the operator's namespace); each level's namespace stands in for it."""
DOC = REPO / "docs" / "pod-security.md"
CHECK: JSON = {
    "apiVersion": "infergate.io/v1alpha1",
    "kind": "ParityCheck",
    "metadata": {"name": "qwen-bbbbbbbbbb", "namespace": "x", "uid": "u-1"},
    "spec": {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
        "suite": {"configMapRef": {"name": "prompts", "key": "suite.jsonl"}},
    },
}

# The rows of docs/pod-security.md's table, by the pod each test below creates.
ROWS = {
    "vllm-gpu": "vLLM engine, `pvc://`, `hf://` or `s3://` model",
    "vllm-file": "vLLM engine, `file://` model",
    "mindformers-ascend": "MindFormers engine (Ascend)",
    "runner": "parity runner",
    "mirror": "mirror (`rollout.mirror`)",
    "operator": "operator",
}


def _example(path: str) -> JSON:
    documents = yaml.safe_load_all((REPO / "manifests" / "examples" / path).read_text())
    found: JSON = next(d for d in documents if d and d["kind"] == "InferenceDeployment")
    return found


def _engine_template(example: JSON, uri: str | None = None) -> JSON:
    spec = dict(example["spec"])
    if uri is not None:
        spec["model"] = {**spec["model"], "uri": uri}
    rendered = render_revision(
        example["metadata"]["name"], "x", InferenceDeploymentSpec.model_validate(spec)
    )
    template: JSON = rendered.deployment["spec"]["template"]
    return template


def _templates(cluster: Cluster) -> dict[str, JSON]:
    runner_spec = observe_parity_check(CHECK).spec
    assert runner_spec is not None
    mirror = next(
        o
        for o in render_mirror(
            "qwen", "x", Mirror(), image=DEFAULT_RUNNER_IMAGE, runner_namespace=RUNNERS
        )
        if o["kind"] == "Deployment"
    )
    built = cluster.kubectl("kustomize", str(REPO / "manifests" / "operator")).stdout
    operator = next(d for d in yaml.safe_load_all(built) if d and d["kind"] == "Deployment")
    return {
        "vllm-gpu": _engine_template(_example("vllm-gpu.yaml")),
        "vllm-file": _engine_template(_example("vllm-gpu.yaml"), "file:///models/qwen"),
        "mindformers-ascend": _engine_template(_example("mindformers-ascend.yaml")),
        "runner": runner_job(
            CHECK, runner_spec.runner, image=DEFAULT_RUNNER_IMAGE, runner_namespace=RUNNERS
        )["spec"]["template"],
        "mirror": mirror["spec"]["template"],
        "operator": operator["spec"]["template"],
    }


def _documented() -> dict[str, dict[str, bool]]:
    """{pod: {level: admitted}} from the table in docs/pod-security.md."""
    table: dict[str, dict[str, bool]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[2] in ("admitted", "refused"):
            table[cells[0]] = {
                level: cell == "admitted" for level, cell in zip(LEVELS, cells[2:], strict=True)
            }
    return table


@pytest.fixture(scope="module")
def enforcing(cluster: Cluster) -> Iterator[dict[str, str]]:
    """A namespace per level, each with the ServiceAccounts the pods name (a pod naming a
    missing one is refused before Pod Security is asked)."""
    nonce = uuid.uuid4().hex[:6]
    namespaces = {level: f"psa-{level}-{nonce}" for level in LEVELS}
    accounts = ["infergate-operator", runner_account_name(CHECK["metadata"]["uid"]), "qwen-mirror"]
    try:
        for level, name in namespaces.items():
            cluster.kubectl("create", "namespace", name)
            cluster.kubectl(
                "label",
                "namespace",
                name,
                f"pod-security.kubernetes.io/enforce={level}",
                "pod-security.kubernetes.io/enforce-version=latest",
            )
            for account in accounts:
                cluster.kubectl("create", "serviceaccount", account, "-n", name)
            wait_for(
                lambda n=name: (
                    cluster.kubectl(
                        "get", "serviceaccount", "default", "-n", n, check=False
                    ).returncode
                    == 0
                ),
                60,
                f"the default ServiceAccount of {name}",
            )
        yield namespaces
    finally:
        for name in namespaces.values():
            release_namespace(cluster, name)


def _dry_run_pod(cluster: Cluster, namespace: str, name: str, template: JSON) -> str | None:
    """None when the API server would create the pod, else its refusal."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": (template.get("metadata") or {}).get("labels") or {},
        },
        "spec": template["spec"],
    }
    result = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    return None if result.returncode == 0 else result.stderr.strip()


def test_each_level_admits_the_pods_the_docs_say(
    cluster: Cluster, enforcing: dict[str, str]
) -> None:
    documented = _documented()
    assert set(documented) == set(ROWS.values()), "docs/pod-security.md's table changed"
    observed: dict[str, dict[str, bool]] = {}
    refusals: dict[tuple[str, str], str] = {}
    for pod, template in _templates(cluster).items():
        observed[ROWS[pod]] = {}
        for level, namespace in enforcing.items():
            refusal = _dry_run_pod(cluster, namespace, pod, template)
            observed[ROWS[pod]][level] = refusal is None
            if refusal is not None:
                refusals[(pod, level)] = refusal
    assert observed == documented, refusals
    # Every refusal is Pod Security's, for the one stated exception: hostPath.
    for (pod, level), text in refusals.items():
        assert f'violates PodSecurity "{level}:latest"' in text, (pod, text)
        # baseline names the hostPath check; restricted reports it as a volume type.
        assert re.search(r'hostPath volumes? \(|restricted volume type "hostPath"', text), (
            pod,
            text,
        )
        assert "runAsNonRoot" not in text, text
        assert "allowPrivilegeEscalation" not in text, text


def test_a_vllm_pod_as_the_upstream_image_would_run_it_is_refused_by_restricted(
    cluster: Cluster, enforcing: dict[str, str]
) -> None:
    """The control: without the rendered user (the upstream image runs as root), the
    restricted namespace refuses the same pod, so the admission above is not vacuous."""
    template = _engine_template(_example("vllm-gpu.yaml"))
    for key in ("runAsNonRoot", "runAsUser", "runAsGroup"):
        template["spec"]["securityContext"].pop(key)
    refusal = _dry_run_pod(cluster, enforcing["restricted"], "vllm-as-root", template)
    assert refusal is not None
    assert "runAsNonRoot" in refusal
    assert _dry_run_pod(cluster, enforcing["baseline"], "vllm-as-root", template) is None
