"""The S3-compatible golden store, through the MinIO Python client (`minio` on PyPI).

Any S3-compatible service serves: AWS S3, Ceph RGW, MinIO, SeaweedFS, Huawei OBS,
Versity Gateway. Objects are addressed path-style under `bucket/prefix`. An S3 PUT is
atomic (a reader sees the whole object or none), so a record's blobs are uploaded one
by one and its index entry is put last.

Credentials are never in the spec and never logged. With `credentials: Secret` (the
default) they come only from the environment the runner pod gets from the Secret named in
`golden.store.s3.secretRef` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional
`AWS_SESSION_TOKEN`): `S3Credentials`. With `credentials: Environment` there is no static
key: `environment_chain` asks, in the AWS SDKs' order, the environment's keys, then a web
identity token (IRSA), then the container credentials endpoint (EKS Pod Identity), then the
instance metadata service, and renews what it got before it expires.

Errors: a missing object is `GoldenMissingError`; refused credentials, an unknown bucket
or an invalid request are `GoldenConfigError` (retrying cannot help); a broken
connection or a 5xx is `GoldenUnavailableError`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar
from urllib.parse import urlsplit

from infergate.golden.blobs import CHUNK, BlobInfo, check_key
from infergate.golden.errors import GoldenConfigError, GoldenMissingError, GoldenUnavailableError

ACCESS_KEY_ENV: Final = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV: Final = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name
SESSION_TOKEN_ENV: Final = "AWS_SESSION_TOKEN"  # noqa: S105 - the variable's name, not a secret

CONNECT_TIMEOUT_S: Final = 10.0
READ_TIMEOUT_S: Final = 120.0
RETRIES: Final = 3

_MISSING: Final = frozenset({"NoSuchKey", "NoSuchObject"})
_REFUSED: Final = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "NoSuchBucket",
        "InvalidBucketName",
        "AuthorizationHeaderMalformed",
        "InvalidArgument",
        "InvalidRequest",
    }
)
_T = TypeVar("_T")


@dataclass(frozen=True)
class S3Location:
    """Where the store lives: endpoint URL, bucket, key prefix, region."""

    endpoint: str
    bucket: str
    prefix: str = ""
    region: str = "us-east-1"

    def __post_init__(self) -> None:
        parts = urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise GoldenConfigError(
                f"s3.endpoint: {self.endpoint!r} is not allowed; give http(s)://host[:port] "
                "with no path (the bucket goes in s3.bucket)"
            )
        if not 3 <= len(self.bucket) <= 63 or not all(
            c.islower() or c.isdigit() or c in "-." for c in self.bucket
        ):
            raise GoldenConfigError(
                f"s3.bucket: {self.bucket!r} is not an S3 bucket name (3-63 lowercase letters, "
                "digits, '-' and '.')"
            )
        if self.prefix:
            check_key(self.prefix.rstrip("/"))

    @property
    def key_prefix(self) -> str:
        return f"{self.prefix.strip('/')}/" if self.prefix.strip("/") else ""


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair (and an optional session token)."""

    access_key: str
    secret_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"S3Credentials(access_key={self.access_key!r}, secret_key=***)"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Credentials:
        env = os.environ if environ is None else environ
        access, secret = env.get(ACCESS_KEY_ENV), env.get(SECRET_KEY_ENV)
        if not access or not secret:
            raise GoldenConfigError(
                f"s3 credentials: {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} must be set (the runner "
                "gets them from the Secret named in golden.store.s3.secretRef)"
            )
        return cls(access, secret, env.get(SESSION_TOKEN_ENV) or None)


class EnvironmentChain:
    """Marks a store whose credentials come from the runner's environment (no static key)."""

    def __repr__(self) -> str:
        return "EnvironmentChain()"


def environment_chain(http: Any) -> Any:
    """A minio credentials provider over the AWS default chain (environment keys, IRSA web
    identity, container credentials, instance role); none answering is a GoldenConfigError."""
    from minio.credentials.providers import (
        ChainedProvider,
        EnvAWSProvider,
        IamAwsProvider,
        Provider,
    )

    chain = ChainedProvider([EnvAWSProvider(), IamAwsProvider(http_client=http)])

    class _Refusing(Provider):
        def retrieve(self) -> Any:
            try:
                return chain.retrieve()
            except ValueError as err:
                raise GoldenConfigError(
                    "s3 credentials (credentials: Environment): none found: no "
                    f"{ACCESS_KEY_ENV}/{SECRET_KEY_ENV}, no web identity token "
                    "(AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN: annotate the runner's "
                    "ServiceAccount for IRSA), no container or instance credentials"
                ) from err

    return _Refusing()


class S3Store:
    """A `BlobStore` on an S3-compatible bucket."""

    def __init__(self, location: S3Location, credentials: S3Credentials | EnvironmentChain) -> None:
        import urllib3
        from minio import Minio

        self._location = location
        parts = urlsplit(location.endpoint)
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
            retries=urllib3.Retry(
                total=RETRIES, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504)
            ),
            maxsize=4,
        )
        if isinstance(credentials, EnvironmentChain):
            keys: dict[str, Any] = {"credentials": environment_chain(http)}
        else:
            keys = {
                "access_key": credentials.access_key,
                "secret_key": credentials.secret_key,
                "session_token": credentials.session_token,
            }
        self._client = Minio(
            parts.netloc,
            secure=parts.scheme == "https",
            region=location.region,
            http_client=http,
            **keys,
        )

    def describe(self) -> str:
        where = self._location
        return f"s3 {where.endpoint}/{where.bucket}/{where.key_prefix}"

    def _name(self, key: str) -> str:
        return f"{self._location.key_prefix}{check_key(key)}"

    def staging_root(self) -> None:
        return None

    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (tests and first use)."""
        bucket = self._location.bucket
        if not self._call("bucket", lambda: self._client.bucket_exists(bucket)):
            self._call("bucket", lambda: self._client.make_bucket(bucket))

    def publish(self, local_dir: Path, prefix: str, files: Sequence[str]) -> None:
        for name in files:
            source = local_dir / name
            key = f"{prefix}{name}"
            object_name = self._name(key)
            self._call(
                key,
                lambda source=source, object_name=object_name: self._client.fput_object(  # type: ignore[misc]
                    self._location.bucket, object_name, str(source)
                ),
            )

    def put_bytes(self, key: str, data: bytes) -> None:
        name = self._name(key)
        self._call(
            key,
            lambda: self._client.put_object(
                self._location.bucket,
                name,
                io.BytesIO(data),
                len(data),
                content_type="application/json",
            ),
        )

    def get_bytes(self, key: str) -> bytes:
        chunks: list[bytes] = []
        self.read_chunks(key, chunks.append)
        return b"".join(chunks)

    def read_chunks(self, key: str, sink: Callable[[bytes], None]) -> None:
        name = self._name(key)
        response = self._call(key, lambda: self._client.get_object(self._location.bucket, name))
        try:
            for chunk in response.stream(CHUNK):
                sink(chunk)
        except Exception as err:
            raise GoldenUnavailableError(f"{self.describe()}: reading {key} failed: {err}") from err
        finally:
            response.close()
            response.release_conn()

    def local_path(self, key: str) -> None:  # noqa: ARG002 - objects are never local files
        return None

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        start = self._name(prefix) if prefix else self._location.key_prefix
        skip = len(self._location.key_prefix)
        objects: Iterator[Any] = self._call(
            prefix,
            lambda: iter(
                self._client.list_objects(self._location.bucket, prefix=start, recursive=True)
            ),
        )
        while True:
            item = self._call(prefix, lambda: next(objects, None))
            if item is None:
                return
            if item.is_dir or item.object_name is None:
                continue
            modified = item.last_modified or datetime.now(UTC)
            yield BlobInfo(item.object_name[skip:], int(item.size or 0), modified)

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            name = self._name(key)
            try:
                self._call(
                    key,
                    lambda name=name: self._client.remove_object(  # type: ignore[misc]
                        self._location.bucket, name
                    ),
                )
            except GoldenMissingError:
                continue

    def _call(self, key: str, fn: Callable[[], _T]) -> _T:
        from minio.error import MinioException, S3Error, ServerError

        try:
            return fn()
        except S3Error as err:
            self._raise_s3(key, err.code or "", err.message or str(err))
        except ServerError as err:
            raise GoldenUnavailableError(
                f"{self.describe()}: {key}: server error {err.status_code}"
            ) from err
        except MinioException as err:
            raise GoldenUnavailableError(f"{self.describe()}: {key}: {err}") from err
        except OSError as err:  # urllib3's connection errors derive from OSError or HTTPError
            raise GoldenUnavailableError(f"{self.describe()}: {key}: {err}") from err
        except Exception as err:
            import urllib3.exceptions

            if isinstance(err, urllib3.exceptions.HTTPError):
                raise GoldenUnavailableError(f"{self.describe()}: {key}: {err}") from err
            raise

    def _raise_s3(self, key: str, code: str, message: str) -> NoReturn:
        text = f"{self.describe()}: {key}: {code}: {message}"
        if code in _MISSING:
            raise GoldenMissingError(text)
        if code in _REFUSED:
            raise GoldenConfigError(text)
        raise GoldenUnavailableError(text)
