"""The golden API models: what a user may write, and the store they lead to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from infergate.api.golden import GoldenBaseline, GoldenSpec, quantity_bytes
from infergate.api.schema import to_structural
from infergate.golden.blobs import DirectoryStore
from infergate.golden.config import (
    GOLDEN_DIR_ENV,
    GOLDEN_MOUNT_PATH,
    policy_from_spec,
    store_from_spec,
    store_from_url,
)
from infergate.golden.errors import GoldenConfigError
from infergate.golden.policy import HiddenStatesPolicy
from infergate.golden.retention import WhenDeleted

S3 = {
    "endpoint": "https://s3.eu-west-1.amazonaws.com",
    "bucket": "golden-records",
    "prefix": "prod/llm",
    "secretRef": {"name": "golden-s3"},
}


def test_defaults_keep_summaries_under_100mi_and_retain_on_delete() -> None:
    spec = GoldenSpec.model_validate({"store": {"pvc": {"claimName": "golden"}}})
    assert spec.hidden_states is HiddenStatesPolicy.SUMMARY
    assert spec.max_bytes_value() == 100 * 2**20
    assert spec.retention.when_deleted is WhenDeleted.RETAIN
    assert spec.retention.records_per_revision == 1
    policy = policy_from_spec(spec)
    assert (policy.max_bytes, policy.sketch_dims) == (100 * 2**20, 64)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100Mi", 100 * 2**20),
        ("1Gi", 2**30),
        ("500M", 500 * 10**6),
        (1048576, 2**20),
        ("1.5Gi", 3 * 2**29),
    ],
)
def test_max_bytes_takes_kubernetes_quantities(value: int | str, expected: int) -> None:
    assert quantity_bytes("maxBytes", value) == expected


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"store": {}}, "exactly one of pvc or s3"),
        ({"store": {"pvc": {"claimName": "g"}, "s3": S3}}, "exactly one of pvc or s3"),
        ({"store": {"pvc": {"claimName": "g"}}, "maxBytes": "10Ki"}, "maxBytes"),
        ({"store": {"pvc": {"claimName": "g"}}, "maxBytes": "100m"}, "maxBytes"),
        ({"store": {"pvc": {"claimName": "g"}}, "hiddenStates": "all"}, "hiddenStates"),
        ({"store": {"pvc": {"claimName": "g", "subPath": "../etc"}}}, "subPath"),
        ({"store": {"s3": {**S3, "bucket": "Golden_Records"}}}, "bucket"),
        ({"store": {"s3": {**S3, "secretRef": None}}}, "secretRef: required with credentials"),
        (
            {"store": {"s3": {**S3, "credentials": "Environment"}}},
            "secretRef: not allowed with credentials Environment",
        ),
        ({"store": {"s3": {**S3, "credentials": "Instance"}}}, "credentials"),
        ({"store": {"s3": {**S3, "accessKey": "AKIA..."}}}, "accessKey"),
        (
            {"store": {"pvc": {"claimName": "g"}}, "retention": {"whenDeleted": "Keep"}},
            "whenDeleted",
        ),
    ],
)
def test_invalid_settings_are_refused_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        GoldenSpec.model_validate(body)


def test_the_models_give_structural_crd_schemas() -> None:
    for model in (GoldenSpec, GoldenBaseline):
        schema = to_structural(model.model_json_schema(by_alias=True, mode="validation"))
        assert schema["type"] == "object"
    spec_schema = to_structural(GoldenSpec.model_json_schema(by_alias=True, mode="validation"))
    assert spec_schema["properties"]["maxBytes"]["x-kubernetes-int-or-string"] is True
    store = spec_schema["properties"]["store"]
    assert store["x-kubernetes-validations"][0]["rule"] == "has(self.pvc) != has(self.s3)"


def test_a_golden_baseline_names_a_revision_or_latest() -> None:
    ref = {"inferenceDeploymentRef": {"name": "qwen"}}
    assert GoldenBaseline.model_validate(ref).revision == "latest"
    assert GoldenBaseline.model_validate({**ref, "revision": "3f2a9c1d0e"}).revision == "3f2a9c1d0e"
    with pytest.raises(ValidationError, match="revision"):
        GoldenBaseline.model_validate({**ref, "revision": "newest"})


def test_a_pvc_store_lives_under_the_mount_path(tmp_path: Path) -> None:
    spec = GoldenSpec.model_validate({"store": {"pvc": {"claimName": "g", "subPath": "llm"}}})
    store = store_from_spec(spec.store, environ={GOLDEN_DIR_ENV: str(tmp_path)})
    assert isinstance(store.blobs, DirectoryStore)
    assert store.blobs.root == tmp_path / "llm"
    default = store_from_spec(spec.store, environ={})
    assert isinstance(default.blobs, DirectoryStore)
    assert default.blobs.root == Path(GOLDEN_MOUNT_PATH) / "llm"


def test_an_s3_store_takes_credentials_only_from_the_environment() -> None:
    spec = GoldenSpec.model_validate({"store": {"s3": S3}})
    with pytest.raises(GoldenConfigError, match="AWS_ACCESS_KEY_ID"):
        store_from_spec(spec.store, environ={})
    env = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    store = store_from_spec(spec.store, environ=env)
    assert store.describe() == "s3 https://s3.eu-west-1.amazonaws.com/golden-records/prod/llm/"
    assert "secret" not in repr(store.blobs.__dict__)


@pytest.mark.parametrize(
    ("url", "endpoint", "problem"),
    [
        ("s3://golden", None, "--s3-endpoint"),
        ("s3://golden", "ftp://host", "s3.endpoint"),
        ("s3://golden", "http://host:9000/path", "s3.endpoint"),
        ("s3://GOLDEN", "http://host:9000", "s3.bucket"),
    ],
)
def test_bad_store_urls_are_refused(url: str, endpoint: str | None, problem: str) -> None:
    env = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    with pytest.raises(GoldenConfigError, match=problem):
        store_from_url(url, endpoint=endpoint, environ=env)


ENVIRONMENT_S3 = {k: v for k, v in S3.items() if k != "secretRef"} | {"credentials": "Environment"}


def test_an_environment_store_takes_no_static_key_and_asks_the_default_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EKS Pod Identity's container credentials endpoint, served on loopback: the runner gets
    short-lived keys with no Secret at all, and the token file is read for each request."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from infergate.golden.s3 import environment_chain

    seen: list[str | None] = []

    class Credentials(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = json.dumps(
                {
                    "AccessKeyId": "ASIA-POD-IDENTITY",
                    "SecretAccessKey": "short-lived",
                    "Token": "session",
                    "Expiration": "2999-01-01T00:00:00Z",
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Credentials)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_WEB_IDENTITY_TOKEN_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            f"http://127.0.0.1:{server.server_port}/v1/credentials",
        )
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token")
        spec = GoldenSpec.model_validate({"store": {"s3": ENVIRONMENT_S3}})
        # No AWS_* key in the environment, and none is asked for.
        store = store_from_spec(spec.store, environ={})
        assert store.describe() == "s3 https://s3.eu-west-1.amazonaws.com/golden-records/prod/llm/"
        import urllib3

        got = environment_chain(urllib3.PoolManager()).retrieve()
        assert (got.access_key, got.secret_key, got.session_token) == (
            "ASIA-POD-IDENTITY",
            "short-lived",
            "session",
        )
        assert seen == ["pod-token"]
    finally:
        server.shutdown()


def test_an_environment_store_prefers_keys_the_environment_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import urllib3

    from infergate.golden.s3 import environment_chain

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    got = environment_chain(urllib3.PoolManager()).retrieve()
    assert (got.access_key, got.secret_key) == ("from-env", "env-secret")
