"""Golden-record retention end to end on a real S3-compatible server (Versity S3 Gateway).

After a Passed check the runner deletes the records of the deleted InferenceDeployments
of its namespace under `retention.whenDeleted: Delete`, keeps them under Retain, and
deletes nothing of other deployments when it may not list them; `infergate golden prune`
does the same from outside the cluster. The bucket is real throughout. In the first
tests the InferenceDeployments come from the runner unit tests' in-memory API (the
decision is what matters); the last one asks the real local API server, as the runner's
own ServiceAccount (in a namespace of its own, as in the runner namespace) with the Role
the operator renders for it in the check's, once without and once with the `list` verb.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from infergate.api.golden import GoldenSpec
from infergate.cli import main
from infergate.errors import ForbiddenError
from infergate.golden.policy import HiddenStatesPolicy, StoragePolicy
from infergate.golden.s3 import S3Credentials, S3Location, S3Store
from infergate.golden.store import GoldenStore
from infergate.runner.run import EXIT_DONE, run_check
from tests.integration.s3server import S3Server, running_server
from tests.unit.golden.records import CANARY, STABLE, check, pair
from tests.unit.runner import test_run as live
from tests.unit.runner.fakes import FakeApi

BUCKET = "golden"
POLICY = StoragePolicy(HiddenStatesPolicy.NONE, max_bytes=4 << 20, sketch_dims=16)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


def _store(server: S3Server, prefix: str) -> GoldenStore:
    blobs = S3Store(
        S3Location(server.endpoint, BUCKET, prefix),
        S3Credentials(server.access_key, server.secret_key),
    )
    blobs.ensure_bucket()
    return GoldenStore(blobs)


def _seed(store: GoldenStore, *deployments: tuple[str, str]) -> None:
    """Both sides' records of one Passed check of each (namespace, deployment)."""
    for namespace, deployment in deployments:
        with store.begin(check(namespace=namespace, deployment=deployment), POLICY) as recording:
            recording.add(*pair("p0"))
            recording.commit(profile="bf16-kernel")


def _objects(server: S3Server, prefix: str) -> set[str]:
    """namespace/deployment of every object in the bucket, index, record and noise blobs
    alike, read with another client than the store's."""
    from minio import Minio

    client = Minio(
        f"127.0.0.1:{server.port}",
        access_key=server.access_key,
        secret_key=server.secret_key,
        secure=False,
        region="us-east-1",
    )
    found = set()
    for item in client.list_objects(BUCKET, f"{prefix}/", recursive=True):
        kind, namespace, deployment = str(item.object_name).split("/")[1:4]
        assert kind in ("index", "records", "noise"), item.object_name
        found.add(f"{namespace}/{deployment}")
    return found


def _golden(server: S3Server, prefix: str, when_deleted: str) -> GoldenSpec:
    return GoldenSpec.model_validate(
        {
            "store": {
                "s3": {
                    "endpoint": server.endpoint,
                    "bucket": BUCKET,
                    "prefix": prefix,
                    "secretRef": {"name": "golden-s3"},
                }
            },
            "hiddenStates": "none",
            "retention": {"whenDeleted": when_deleted},
        }
    )


def _run(server: S3Server, prefix: str, when_deleted: str, api: FakeApi, name: str) -> str:
    """Run check `name` to Passed with the operator's S3 setting; its golden message."""
    options = dataclasses.replace(
        live.FAST, golden=_golden(server, prefix, when_deleted), environ=server.credentials_env
    )
    assert run_check(api, name, options, connector=live.engines().connector()) == EXIT_DONE
    status = api.checks[name]["status"]
    assert status["phase"] == "Passed", status
    assert status["golden"]["stored"] is True, status["golden"]
    message: str = status["golden"]["message"]
    return message


def _cluster_with_kept() -> FakeApi:
    """llm/qwen (the check's) and llm/kept exist; llm/gone does not."""
    api = live.cluster()
    api.deployments["kept"] = {
        "metadata": {"name": "kept"},
        "status": {"stableRevision": STABLE, "canaryRevision": CANARY},
    }
    return api


SEEDED = {"llm/gone", "llm/kept", "team-b/gone"}


def test_delete_removes_the_deleted_deployments_objects_from_the_bucket(s3: S3Server) -> None:
    _seed(_store(s3, "delete"), ("llm", "gone"), ("llm", "kept"), ("team-b", "gone"))
    assert _objects(s3, "delete") == SEEDED
    message = _run(s3, "delete", "Delete", _cluster_with_kept(), "check")
    assert "of deleted InferenceDeployments llm/gone" in message
    # Another namespace's deployment of that name is not the runner's to judge.
    assert _objects(s3, "delete") == {"llm/qwen", "llm/kept", "team-b/gone"}


def test_retain_keeps_them(s3: S3Server) -> None:
    _seed(_store(s3, "retain"), ("llm", "gone"), ("llm", "kept"), ("team-b", "gone"))
    message = _run(s3, "retain", "Retain", _cluster_with_kept(), "check")
    assert "retention removed" not in message
    assert _objects(s3, "retain") == {"llm/qwen", *SEEDED}


def test_a_forbidden_listing_deletes_nothing(s3: S3Server) -> None:
    _seed(_store(s3, "forbidden"), ("llm", "gone"), ("llm", "kept"), ("team-b", "gone"))
    api = _cluster_with_kept()
    api.list_refusal = ForbiddenError(
        "list InferenceDeployment in llm: 403 inferencedeployments.infergate.io is forbidden",
        status=403,
    )
    message = _run(s3, "forbidden", "Delete", api, "check")
    assert "could not list the InferenceDeployments of llm" in message
    assert "nothing of other deployments was deleted" in message
    assert _objects(s3, "forbidden") == {"llm/qwen", *SEEDED}


def test_prune_reads_an_s3_store_and_deletes_only_with_apply(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from infergate.commands import golden as golden_command

    _seed(_store(s3, "cli"), ("llm", "qwen"), ("llm", "gone"), ("team-b", "gone"))
    listing = [
        {
            "metadata": {"namespace": "llm", "name": "qwen"},
            "status": {"stableRevision": STABLE, "canaryRevision": CANARY},
        }
    ]
    monkeypatch.setattr(golden_command, "_inference_deployments", lambda _args: listing)
    for key, value in s3.credentials_env.items():
        monkeypatch.setenv(key, value)
    argv = [
        "golden", "prune", "--store", f"s3://{BUCKET}/cli", "--s3-endpoint", s3.endpoint,
        "--when-deleted", "Delete",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "4 record(s) would be deleted" in out
    assert _objects(s3, "cli") == {"llm/qwen", "llm/gone", "team-b/gone"}
    assert main([*argv, "-n", "llm", "--apply"]) == 0
    assert "deleted 2 record(s)" in capsys.readouterr().out
    assert _objects(s3, "cli") == {"llm/qwen", "team-b/gone"}


# -- against the real API server ------------------------------------------------------------


def _runner_identity(
    cluster: Any, namespace: str, runners: str, name: str, *, list_deployments: bool
) -> str:
    """Apply the runner's ServiceAccount (in `runners`, standing in for the runner
    namespace), Role and RoleBinding (in the check's `namespace`) as the operator renders
    them for check `name`, without owner references (the check is not in this cluster);
    the user name the API server knows the runner by."""
    from infergate.render.check_children import runner_rbac

    body = {"metadata": {"name": name, "namespace": namespace, "uid": name}}
    account, role, binding = runner_rbac(
        body,
        runner_namespace=runners,
        deployments=["qwen"],
        services=[],
        config_maps=[],
        list_deployments=list_deployments,
    )
    for manifest, where in ((account, runners), (role, namespace), (binding, namespace)):
        manifest["metadata"].pop("ownerReferences", None)
        cluster.kubectl("apply", "-n", where, "-f", "-", input=json.dumps(manifest))
    return f"system:serviceaccount:{runners}:{account['metadata']['name']}"


def _as(cluster: Any, user: str, namespace: str) -> Any:
    """The runner's API client (kube/paritycheck_api.py), speaking as `user`."""
    from infergate.kube.client import KubeClient, load_api_client
    from infergate.kube.paritycheck_api import CheckClient

    api_client = load_api_client(str(cluster.kubeconfig))
    api_client.set_default_header("Impersonate-User", user)
    return CheckClient(KubeClient(api_client), namespace)


@pytest.mark.cluster
def test_the_runners_own_role_decides_whether_deleted_deployments_are_pruned(
    s3: S3Server,
    cluster: Any,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    from tests.harness import apply_crds, release_namespace
    from tests.integration.controller_support import deployment_manifest

    apply_crds(cluster)
    for name in ("qwen", "kept"):
        cluster.apply(deployment_manifest(name, parity=False, auto_promote=False), namespace)
    cluster.kubectl(
        "patch", "inferencedeployment", "kept", "-n", namespace, "--subresource=status",
        "--type=merge", "-p",
        json.dumps({"status": {"stableRevision": STABLE, "canaryRevision": CANARY}}),
    )  # fmt: skip
    other = f"{namespace}-b"  # records of a namespace this cluster does not have
    prefix = "cluster"
    _seed(_store(s3, prefix), (namespace, "gone"), (namespace, "kept"), (other, "gone"))
    seeded = {f"{namespace}/gone", f"{namespace}/kept", f"{other}/gone"}
    api = live.cluster()
    api.namespace = namespace
    runners = f"{namespace}-runners"
    cluster.kubectl("create", "namespace", runners)
    request.addfinalizer(lambda: release_namespace(cluster, runners))

    # The Role without `list` (the operator's under whenDeleted: Retain): a real 403.
    user = _runner_identity(cluster, namespace, runners, "check", list_deployments=False)
    api.inference_deployments = _as(cluster, user, namespace).inference_deployments  # type: ignore[method-assign]
    message = _run(s3, prefix, "Delete", api, "check")
    assert "could not list the InferenceDeployments" in message
    assert "403" in message
    assert _objects(s3, prefix) == {f"{namespace}/qwen", *seeded}

    # From outside, with the kubeconfig's own rights: a dry run names gone's two records.
    argv = [
        "golden", "prune", "--store", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", s3.endpoint,
        "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "--when-deleted", "Delete",
    ]  # fmt: skip
    env = s3.credentials_env
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(f"InferenceDeployment {namespace}/gone was deleted") == 2
    assert f"{namespace}/kept" not in out
    assert _objects(s3, prefix) == {f"{namespace}/qwen", *seeded}

    # The Role with `list` (whenDeleted: Delete): the runner itself prunes them.
    user = _runner_identity(cluster, namespace, runners, "again", list_deployments=True)
    api.inference_deployments = _as(cluster, user, namespace).inference_deployments  # type: ignore[method-assign]
    api.add_check("again", api.checks["check"]["spec"])
    api.add_probe("again", "baseline", live.PROBE_IP)
    message = _run(s3, prefix, "Delete", api, "again")
    assert f"of deleted InferenceDeployments {namespace}/gone" in message
    assert _objects(s3, prefix) == {f"{namespace}/qwen", f"{namespace}/kept", f"{other}/gone"}
