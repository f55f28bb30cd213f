"""What the operator's install gives the pods of infergate's own image: registry credentials
(`--image-pull-secret`) and a cloud identity on the runner's account
(`--runner-service-account-annotation`)."""

from __future__ import annotations

from typing import Any

import pytest

from infergate.api.shadow import Mirror
from infergate.commands.operator import account_annotations, pull_secret_names
from infergate.plan.check.observed import observe_parity_check
from infergate.render.check_children import probe_pod, runner_job, runner_rbac
from infergate.render.mirror import render_mirror
from tests.unit.render.test_check_children import CHECK, RUNNER, RUNNERS, vllm_revision

IRSA = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/golden"}


def test_the_runner_account_carries_the_installs_annotations_and_pull_secrets() -> None:
    account, *_ = runner_rbac(
        CHECK,
        runner_namespace=RUNNERS,
        deployments=["qwen"],
        services=[],
        config_maps=[],
        account_annotations=IRSA,
        pull_secrets=("registry-creds",),
    )
    assert account["kind"] == "ServiceAccount"
    # The account the runner's pods run as, where they run: the runner namespace.
    assert account["metadata"]["namespace"] == RUNNERS
    assert account["metadata"]["annotations"] == IRSA
    assert account["imagePullSecrets"] == [{"name": "registry-creds"}]
    plain, *_ = runner_rbac(
        CHECK, runner_namespace=RUNNERS, deployments=["qwen"], services=[], config_maps=[]
    )
    assert "annotations" not in plain["metadata"]
    assert "imagePullSecrets" not in plain


def test_the_runner_job_pulls_with_the_installs_secrets() -> None:
    spec = observe_parity_check(CHECK).spec
    assert spec is not None
    job = runner_job(
        CHECK,
        spec.runner,
        image=RUNNER,
        runner_namespace=RUNNERS,
        pull_secrets=("registry-creds",),
    )
    assert job["metadata"]["namespace"] == RUNNERS
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "registry-creds"}]
    plain = runner_job(CHECK, spec.runner, image=RUNNER, runner_namespace=RUNNERS)
    assert "imagePullSecrets" not in plain["spec"]["template"]["spec"]


def test_a_probe_pulls_the_engine_image_and_infergates_own() -> None:
    deployment = vllm_revision()
    deployment["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "engine-creds"}]
    pod = probe_pod(
        CHECK,
        "baseline",
        deployment,
        fingerprint_image=RUNNER,
        pull_secrets=("registry-creds", "engine-creds"),
    )
    assert pod["spec"]["imagePullSecrets"] == [{"name": "engine-creds"}, {"name": "registry-creds"}]


def test_the_mirror_pulls_with_the_installs_secrets() -> None:
    objects = render_mirror(
        "qwen", "llm", Mirror(), image=RUNNER, runner_namespace=RUNNERS, pull_secrets=("creds",)
    )
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "creds"}]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["a", "b", "a"], ("a", "b")),
        ([], ()),
    ],
)
def test_pull_secret_flags_are_names_each_once(values: list[str], expected: Any) -> None:
    assert pull_secret_names(values) == expected


@pytest.mark.parametrize("value", ["Registry", "a/b", "", "-a"])
def test_a_pull_secret_flag_that_is_no_name_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not a Secret name"):
        pull_secret_names([value])


def test_annotation_flags_split_at_the_first_equals_sign() -> None:
    assert account_annotations(["eks.amazonaws.com/role-arn=arn:aws:iam::1:role/a=b"]) == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/a=b"
    }


@pytest.mark.parametrize("value", ["no-equals", "=value", "bad key=v", "a/b/c=v"])
def test_an_annotation_flag_without_a_key_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="KEY=VALUE"):
        account_annotations([value])
