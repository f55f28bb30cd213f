"""A golden store from its settings: the API model in the runner, a URL on the command line.

In the runner Job (wired by the runner, see `GOLDEN_MOUNT_PATH`):

- `store.pvc`: the claim is mounted at `GOLDEN_MOUNT_PATH` (`$INFERGATE_GOLDEN_DIR`
  overrides it), and the store is the `subPath` folder under it;
- `store.s3` with `credentials: Secret`: credentials from `AWS_ACCESS_KEY_ID` /
  `AWS_SECRET_ACCESS_KEY`, which the Job sets from the Secret in `secretRef`
  (`secretKeyRef` env entries); with `credentials: Environment`, from the AWS default
  chain of the runner pod's environment (IRSA, EKS Pod Identity, instance role).

On the command line: a directory path, or `s3://bucket/prefix` with `--s3-endpoint`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from infergate.api.golden import GoldenSpec, GoldenStoreSpec, S3CredentialsSource
from infergate.golden.blobs import DirectoryStore
from infergate.golden.errors import GoldenConfigError
from infergate.golden.policy import StoragePolicy
from infergate.golden.s3 import EnvironmentChain, S3Credentials, S3Location, S3Store
from infergate.golden.settings import GOLDEN_DIR_ENV, GOLDEN_MOUNT_PATH
from infergate.golden.store import GoldenStore

S3_ENDPOINT_ENV: Final = "INFERGATE_GOLDEN_S3_ENDPOINT"
"""Default of `infergate golden --s3-endpoint`."""


def policy_from_spec(spec: GoldenSpec) -> StoragePolicy:
    """The size policy a `GoldenSpec` sets."""
    return StoragePolicy(
        hidden_states=spec.hidden_states,
        max_bytes=spec.max_bytes_value(),
        sketch_dims=spec.sketch_dimensions,
    )


def store_from_spec(
    spec: GoldenStoreSpec, *, environ: Mapping[str, str] | None = None
) -> GoldenStore:
    """The store a runner Job uses: the mounted claim, or the bucket with the Secret's keys."""
    env = os.environ if environ is None else environ
    if spec.pvc is not None:
        root = Path(env.get(GOLDEN_DIR_ENV) or GOLDEN_MOUNT_PATH)
        if spec.pvc.sub_path:
            root = root / spec.pvc.sub_path
        return GoldenStore(DirectoryStore(root))
    s3 = spec.s3
    if s3 is None:  # GoldenStoreSpec guarantees one of them
        raise GoldenConfigError("store: exactly one of pvc or s3 must be set")
    location = S3Location(s3.endpoint, s3.bucket, s3.prefix, s3.region)
    if s3.credentials is S3CredentialsSource.ENVIRONMENT:
        return GoldenStore(S3Store(location, EnvironmentChain()))
    return GoldenStore(S3Store(location, S3Credentials.from_env(env)))


def store_from_url(
    url: str,
    *,
    endpoint: str | None = None,
    region: str = "us-east-1",
    environ: Mapping[str, str] | None = None,
) -> GoldenStore:
    """A directory path, or s3://bucket[/prefix] (endpoint from the argument or
    $INFERGATE_GOLDEN_S3_ENDPOINT, credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)."""
    env = os.environ if environ is None else environ
    if not url.startswith("s3://"):
        return GoldenStore(DirectoryStore(Path(url)))
    parts = urlsplit(url)
    service = endpoint or env.get(S3_ENDPOINT_ENV)
    if not service:
        raise GoldenConfigError(
            f"store {url}: give the S3 service URL with --s3-endpoint or ${S3_ENDPOINT_ENV}"
        )
    location = S3Location(service, parts.netloc, parts.path.strip("/"), region)
    return GoldenStore(S3Store(location, S3Credentials.from_env(env)))
