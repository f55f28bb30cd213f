"""An InferenceDeployment on real engines, seen the way a user sees it (kubectl only)."""

from __future__ import annotations

import copy
import os
from typing import Any

import httpx
import pytest

from infergate.suite import inline, medium_prompts
from tests.e2e.support import MODEL_NAME, check_status, fixture_model, runner_log
from tests.harness import Cluster, wait_for

MINDFORMERS_IMAGE = "ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0"
# The strict profile's minimum evidence (32 prompts, 1024 scored positions) is met with 36
# prompts of about 32 tokens. The fixture engines run with maxModelLen 512 on CPU, so no
# 8K-token prompt fits: the checks state that long prompts are not required, and their
# verdicts say the long-context checks were not part of them. No limit is relaxed.
SUITE = inline(medium_prompts(tokens=32))
SHORT_CONTEXT = {"minLongPrompts": 0}


def mindformers_deployment(
    name: str = "qwen",
    *,
    seed: int = 42,
    config: dict[str, Any] | None = None,
    auto_promote: bool = True,
    max_tokens: int = 12,
    suite: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """MindFormers (float32, its adapter serves its own hidden states) on the Ascend executor."""
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": MODEL_NAME, "uri": f"file://{fixture_model()}"},
            "engine": {
                "kind": "mindformers",
                "image": MINDFORMERS_IMAGE,
                "dtype": "float32",
                "maxModelLen": 512,
                "seed": seed,
                "config": copy.deepcopy(config or {}),
            },
            "accelerator": {"kind": "ascend-npu"},
            "replicas": 1,
            "rollout": {
                "canaryReplicas": 1,
                "autoPromote": auto_promote,
                "autoRollback": True,
                "progressDeadlineSeconds": 900,
                "parity": {
                    "suite": {"inline": copy.deepcopy(suite or SUITE)},
                    "sampling": {"maxTokens": max_tokens, "topLogprobs": 5},
                    # Same engine, dtype and config on both sides (a seed or nothing
                    # changed): a replay, judged bit for bit. Measured on this cluster: two
                    # MindFormers fp32 processes agree exactly on 36 prompts (token match 1,
                    # mean KL 0, hidden max-abs error 0 over 4761 tokens).
                    "profile": "strict",
                    "thresholds": dict(SHORT_CONTEXT),
                    "runner": {"activeDeadlineSeconds": 600, "backoffLimit": 0},
                    "deadlineSeconds": 900,
                },
            },
        },
    }


class Rollout:
    """One InferenceDeployment in a test namespace."""

    def __init__(self, cluster: Cluster, namespace: str, name: str = "qwen") -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name

    def apply(self, manifest: dict[str, Any]) -> None:
        self.cluster.apply(manifest, self.namespace)

    def get(self) -> dict[str, Any]:
        return self.cluster.get_json(
            "inferencedeployments.infergate.io", self.name, "-n", self.namespace
        )

    def status(self) -> dict[str, Any]:
        return self.get().get("status") or {}

    def wait(self, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            status = self.status()
            return status if predicate(status) else None

        try:
            return wait_for(probe, timeout, what, interval=1.0)
        except AssertionError as err:
            raise AssertionError(f"{err}\nstatus: {self.status()}\n{self.logs()}") from None

    def wait_stable(self, timeout: float = 600) -> str:
        status = self.wait(
            lambda s: (
                s.get("stableRevision")
                and s.get("phase") == "Stable"
                and not s.get("canaryRevision")
            ),
            timeout,
            f"InferenceDeployment {self.name} to be Stable",
        )
        return str(status["stableRevision"])

    def wait_canary(self, timeout: float = 120) -> str:
        status = self.wait(lambda s: s.get("canaryRevision"), timeout, "a canary revision")
        return str(status["canaryRevision"])

    def check_name(self, revision: str) -> str:
        return f"{self.name}-{revision}"

    def wait_check(self, revision: str, timeout: float = 900) -> dict[str, Any]:
        name = self.check_name(revision)

        def ended() -> dict[str, Any] | None:
            found = self.cluster.kubectl(
                "get",
                "paritychecks.infergate.io",
                name,
                "-n",
                self.namespace,
                "-o",
                "name",
                check=False,
            )
            if found.returncode != 0:
                return None
            status = check_status(self.cluster, self.namespace, name)
            return (
                status
                if status.get("phase") in ("Passed", "Failed", "Inconclusive", "Error")
                else None
            )

        try:
            return wait_for(ended, timeout, f"ParityCheck {name} to end", interval=2.0)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.logs()}") from None

    def revision_record(self, revision: str) -> dict[str, Any]:
        return next(r for r in self.status().get("revisions", []) if r["hash"] == revision)

    def pods(self, revision: str) -> list[dict[str, Any]]:
        return self.cluster.get_json(
            "pods", "-n", self.namespace, "-l", f"infergate.io/revision={revision}"
        )["items"]

    def live_pods(self, revision: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(revision) if not p["metadata"].get("deletionTimestamp")]

    def complete(self, revision: str, prompt: str = "The weather today is") -> list[int]:
        """Greedy tokens from a pod of `revision`, called on its pod IP (never a ClusterIP)."""
        [pod] = self.live_pods(revision)
        url = f"http://{pod['status']['podIP']}:8000/v1/completions"
        body = {
            "model": MODEL_NAME,
            "prompt": prompt,
            "max_tokens": 4,
            "temperature": 0,
            "return_token_ids": True,
        }
        answer = httpx.post(url, json=body, timeout=120)
        answer.raise_for_status()
        return [int(t) for t in answer.json()["choices"][0]["token_ids"]]

    def logs(self) -> str:
        return f"runner log:\n{runner_log(self.cluster, self.namespace)[-3000:]}"


def rendered_engine_problem(cluster: Cluster, manifest: dict[str, Any]) -> str | None:
    """Why the engine pods of `manifest` could not start on the local executor, if they could not.

    Renders the revision as the operator does, maps its image to a local environment and
    its process environment as the executor does, and runs the rendered command line
    with `--help` there: a missing program or one that fails before reading its
    arguments shows here in seconds rather than as a pod crash-looping until a test's
    deadline.
    """
    import os
    import shutil
    import subprocess

    from infergate.api.inference_deployment import InferenceDeploymentSpec
    from infergate.render.objects import render_revision
    from infergate_dev.localcluster.executor.images import load
    from infergate_dev.localcluster.executor.podspec import image_environment, image_process_env

    spec = InferenceDeploymentSpec.model_validate(manifest["spec"])
    container = render_revision("probe", "default", spec).deployment["spec"]["template"]["spec"][
        "containers"
    ][0]
    environment = image_environment(container["image"], load(cluster.layout.root / "executor.yaml"))
    program = container["command"][0]
    env = {**os.environ, **image_process_env(environment, os.environ.get("PATH", ""))}
    found = shutil.which(program, path=env["PATH"])
    where = f"image {container['image']} (local environment {environment.venv or 'host PATH'})"
    if found is None:
        return f"{where}: the rendered command {program!r} does not exist there"
    args = [a.replace("$(POD_IP)", "127.0.0.1") for a in container["args"]]
    result = subprocess.run(
        [found, *args, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"{where}: `{program} {' '.join(args[:2])} ... --help` exits {result.returncode}: {tail[0]}"
    return None


@pytest.fixture(scope="module", autouse=True)
def engines_start(cluster: Cluster) -> None:
    """Autouse in the modules that import it: skip (or, with INFERGATE_REQUIRE_E2E=1, fail) when rendered engine pods cannot start."""
    problem = rendered_engine_problem(cluster, mindformers_deployment())
    if problem is not None:
        message = f"rendered MindFormers engine pods cannot start on the executor: {problem}"
        if os.environ.get("INFERGATE_REQUIRE_E2E") == "1":
            pytest.fail(message)
        pytest.skip(message)
