"""The golden record store on a real S3-compatible server (Versity S3 Gateway, built from
its Go module, on 127.0.0.1): put, list, get and verify; a corrupt or missing object is
an error; retention deletes exactly the records it should; concurrent writers."""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from infergate.cli import main
from infergate.golden.config import store_from_url
from infergate.golden.errors import (
    GoldenConfigError,
    GoldenIntegrityError,
    GoldenMissingError,
    GoldenUnavailableError,
)
from infergate.golden.keys import Role
from infergate.golden.policy import HiddenStatesPolicy, StoragePolicy
from infergate.golden.retention import DeploymentHistory, WhenDeleted
from infergate.golden.s3 import S3Credentials, S3Location, S3Store
from infergate.golden.store import GoldenStore
from tests.integration.s3server import S3Server, running_server
from tests.unit.golden.records import CANARY, DIGEST, STABLE, check, pair

BUCKET = "golden"
POLICY = StoragePolicy(HiddenStatesPolicy.SUMMARY, max_bytes=8 << 20, sketch_dims=16)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


def _s3_store(server: S3Server, prefix: str) -> GoldenStore:
    blobs = S3Store(
        S3Location(server.endpoint, BUCKET, prefix),
        S3Credentials(server.access_key, server.secret_key),
    )
    blobs.ensure_bucket()
    return GoldenStore(blobs)


def _raw(server: S3Server):  # type: ignore[no-untyped-def]
    from minio import Minio

    return Minio(
        f"127.0.0.1:{server.port}",
        access_key=server.access_key,
        secret_key=server.secret_key,
        secure=False,
        region="us-east-1",
    )


def _commit(store: GoldenStore, prompts: int = 3, **kwargs: object):  # type: ignore[no-untyped-def]
    pairs = [pair(f"p{i}", seed=i) for i in range(prompts)]
    with store.begin(check(**kwargs), POLICY) as recording:  # type: ignore[arg-type]
        for baseline, candidate in pairs:
            recording.add(baseline, candidate)
        return pairs, recording.commit(profile="bf16-kernel")


def test_put_list_get_and_verify(s3: S3Server) -> None:
    store = _s3_store(s3, "roundtrip")
    pairs, (base, cand) = _commit(store)
    assert [item.entry for item in store.list_entries("llm", "qwen")] == [base, cand]
    assert store.find("llm", "qwen", revision=CANARY, suite_digest=DIGEST) == cand
    store.verify(base)
    with store.open(base) as record:
        for baseline, _ in pairs:
            got = record.get(baseline.prompt_id)
            np.testing.assert_array_equal(got.output_token_ids, baseline.output_token_ids)
            assert got.hidden_states is None  # summary policy
            summary = record.hidden_summary(baseline.prompt_id)
            assert summary is not None
            assert summary.positions == 22
    keys = {o.object_name for o in _raw(s3).list_objects(BUCKET, "roundtrip/", recursive=True)}
    assert f"roundtrip/{base.location.index_key}" in keys
    assert f"roundtrip/{base.location.record_prefix}manifest.json" in keys


def test_a_corrupt_object_is_an_integrity_error(s3: S3Server) -> None:
    store = _s3_store(s3, "corrupt")
    _, (base, _) = _commit(store)
    name = f"corrupt/{base.location.record_prefix}prompts/000002.safetensors"
    client = _raw(s3)
    response = client.get_object(BUCKET, name)
    data = bytearray(response.read())
    response.close()
    response.release_conn()
    data[-1] ^= 0x01
    client.put_object(BUCKET, name, io.BytesIO(bytes(data)), len(data))
    with pytest.raises(GoldenIntegrityError, match=r"000002\.safetensors is corrupt"):
        store.verify(base)
    with pytest.raises(GoldenIntegrityError):
        store.open(base)


def test_a_missing_object_is_a_missing_error(s3: S3Server) -> None:
    store = _s3_store(s3, "missing")
    _, (base, _) = _commit(store)
    _raw(s3).remove_object(BUCKET, f"missing/{base.location.record_prefix}manifest.json")
    with pytest.raises(GoldenMissingError, match=r"manifest\.json"):
        store.open(base)


def test_retention_deletes_exactly_the_records_it_names(s3: S3Server) -> None:
    store = _s3_store(s3, "retention")
    _commit(store)
    _commit(store, deployment="gone")
    _, (other_base, other_cand) = _commit(store, deployment="other")
    histories = {
        ("llm", "qwen"): DeploymentHistory(exists=True, revisions=frozenset({CANARY})),
        ("llm", "gone"): DeploymentHistory(exists=False),
    }
    deleted = store.prune(histories, when_deleted=WhenDeleted.DELETE)
    assert {(d.location.deployment, d.location.name.revision) for d in deleted} == {
        ("qwen", STABLE),
        ("gone", STABLE),
        ("gone", CANARY),
    }
    keys = {o.object_name for o in _raw(s3).list_objects(BUCKET, "retention/", recursive=True)}
    assert not [k for k in keys if "/gone/" in k]
    assert not [k for k in keys if f"/qwen/{STABLE}-" in k]
    assert [k for k in keys if f"/qwen/{CANARY}-" in k]
    for entry in (other_base, other_cand):
        store.verify(entry)


def test_concurrent_writers_leave_a_readable_index(s3: S3Server) -> None:
    store = _s3_store(s3, "concurrent")
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: _commit(store, name=f"check-{i}"), range(4)))
    items = store.list_entries()
    assert len(items) == 8
    for item in items:
        assert item.entry is not None
        store.verify(item.entry)
    assert {item.location.name.role for item in items} == {Role.BASELINE, Role.CANDIDATE}


def test_wrong_credentials_and_no_server_are_told_apart(s3: S3Server) -> None:
    wrong = S3Store(S3Location(s3.endpoint, BUCKET), S3Credentials(s3.access_key, "not-it"))
    with pytest.raises(GoldenConfigError, match=r"SignatureDoesNotMatch|AccessDenied"):
        list(wrong.list("index/"))
    down = S3Store(
        S3Location("http://127.0.0.1:9", BUCKET), S3Credentials(s3.access_key, s3.secret_key)
    )
    with pytest.raises(GoldenUnavailableError):
        list(down.list("index/"))


def test_the_cli_verifies_an_s3_store(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _s3_store(s3, "cli")
    _commit(store)
    for key, value in s3.credentials_env.items():
        monkeypatch.setenv(key, value)
    argv = ["golden", "verify", "--store", f"s3://{BUCKET}/cli", "--s3-endpoint", s3.endpoint]
    assert main(argv) == 0
    assert "2 ok, 0 corrupt" in capsys.readouterr().out
    same = store_from_url(f"s3://{BUCKET}/cli", endpoint=s3.endpoint)
    assert len(same.list_entries("llm", "qwen")) == 2


def test_the_runner_stores_a_passed_check_and_reads_it_back_as_a_baseline(s3: S3Server) -> None:
    """The runner with the operator's S3 setting, credentials only from the environment
    the Job's secretKeyRef entries give it."""
    import dataclasses

    from infergate.api.golden import GoldenSpec
    from infergate.runner.run import run_check
    from tests.unit.runner import test_run as live

    _s3_store(s3, "runner")  # the bucket exists
    golden = GoldenSpec.model_validate(
        {
            "store": {
                "s3": {
                    "endpoint": s3.endpoint,
                    "bucket": BUCKET,
                    "prefix": "runner",
                    "secretRef": {"name": "golden-s3"},
                }
            },
            "hiddenStates": "full",
        }
    )
    environ = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
    options = dataclasses.replace(live.FAST, golden=golden, environ=environ)
    api = live.cluster()
    run_check(api, "check", options, connector=live.engines().connector())
    stored = live.status(api)["golden"]
    assert stored["stored"] is True, stored
    assert stored["store"].startswith("s3 ")
    # The stable's pods are gone; its record is the baseline.
    api.add_check(
        "again",
        {**api.checks["check"]["spec"], "baseline": {"golden": {"revision": STABLE}}},
    )
    api.services.pop("qwen-aaaaaaaaaa")
    run_check(api, "again", options, connector=live.engines().connector())
    again = api.checks["again"]["status"]
    assert again["phase"] == "Passed", again
    assert again["goldenBaseline"]["entry"] == stored["entries"][0]
    # Wrong keys: the store refuses, and the check ends without a pass.
    bad = dataclasses.replace(options, environ={**environ, "AWS_SECRET_ACCESS_KEY": "wrong"})
    api.add_check("denied", api.checks["again"]["spec"])
    run_check(api, "denied", bad, connector=live.engines().connector())
    assert api.checks["denied"]["status"]["phase"] != "Passed"
