"""Golden records in the API: where a deployment's records live and how much they keep.

`GoldenSpec` is the operator's setting (`infergate operator --golden-config FILE`), never
a tenant's: a tenant must not point the runner at storage of its choosing. The operator
hands it to every runner Job:

    store: {pvc: {claimName: golden-records}}
    # or: {s3: {endpoint: https://obs.example.com, bucket: golden, prefix: llm,
    #            secretRef: {name: golden-s3}}}
    # or, keys from the runner's environment (IRSA, EKS Pod Identity, instance roles):
    #     {s3: {endpoint: https://s3.eu-west-1.amazonaws.com, bucket: golden,
    #           region: eu-west-1, credentials: Environment}}
    hiddenStates: summary        # none | summary | full
    maxBytes: 100Mi              # per side and suite
    retention: {whenDeleted: Retain, recordsPerRevision: 1}

`GoldenBaseline` is a ParityCheck baseline, a third kind beside inferenceDeploymentRef
and endpoint (`Side.golden`):

    kind: ParityCheck
    spec:
      baseline: {golden: {revision: latest}}      # or {revision: 3f2a9c1d0e}
      candidate: {inferenceDeploymentRef: {name: qwen}, revision: 5b7e0a9c4d}

The golden settings change no numerics: the revision hash must declare them cosmetic.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Self

from pydantic import ConfigDict, Field, model_validator

from infergate.api.base import SHORT_TEXT_MAX, URI_MAX, KubeModel, cel, cel_rules
from infergate.api.common import LocalObjectReference, ObjectName, Quantity
from infergate.golden.settings import (
    MIN_BYTES,
    SKETCH_DIMS_DEFAULT,
    SKETCH_DIMS_MAX,
    SKETCH_DIMS_MIN,
    HiddenStatesPolicy,
    WhenDeleted,
)

MAX_BYTES_CAP = 1 << 40
RECORDS_PER_REVISION_MAX = 10
_ENV_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
_PREFIX_PATTERN = r"^([A-Za-z0-9!_.*'()-]+/)*[A-Za-z0-9!_.*'()-]*$"
_SUB_PATH_PATTERN = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$"
_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[kMGTPE]i?|)$")


def quantity_bytes(field: str, value: int | str) -> int:
    """A byte count from a Kubernetes quantity (100Mi, 1G, 1048576); whole bytes only."""
    if isinstance(value, int):
        number, multiplier = Decimal(value), 1
    else:
        match = _QUANTITY.match(value.strip())
        if match is None:
            raise ValueError(
                f"{field}: {value!r} is not a byte quantity; give e.g. 100Mi, 1Gi, 500M or a "
                "number of bytes"
            )
        try:
            number = Decimal(match["number"])
        except InvalidOperation as err:
            raise ValueError(f"{field}: {value!r} is not a number") from err
        multiplier = _SUFFIXES[match["suffix"]]
    total = number * multiplier
    if total != total.to_integral_value():
        raise ValueError(f"{field}: {value!r} is not a whole number of bytes")
    return int(total)


class GoldenPvcStore(KubeModel):
    """A PersistentVolumeClaim in the deployment's namespace, mounted read-write into the
    runner: the default store, which works on any cluster with a ReadWriteOnce volume."""

    claim_name: ObjectName
    """Name of the PersistentVolumeClaim, in the same namespace."""
    sub_path: str | None = Field(default=None, max_length=SHORT_TEXT_MAX, pattern=_SUB_PATH_PATTERN)
    """Folder inside the volume that holds the store (relative, no '..'). Unset: its root."""

    @model_validator(mode="after")
    def _no_parent(self) -> Self:
        if self.sub_path is not None and ".." in self.sub_path.split("/"):
            raise ValueError(f"subPath: {self.sub_path!r} must not contain '..'")
        return self


class S3SecretReference(KubeModel):
    """A Secret in the same namespace holding the S3 access key pair."""

    name: ObjectName
    """Name of the Secret."""
    access_key_id_key: str = Field(
        default="AWS_ACCESS_KEY_ID",
        min_length=1,
        max_length=SHORT_TEXT_MAX,
        pattern=_ENV_KEY_PATTERN,
    )
    """Key of the Secret holding the access key id."""
    secret_access_key_key: str = Field(
        default="AWS_SECRET_ACCESS_KEY",
        min_length=1,
        max_length=SHORT_TEXT_MAX,
        pattern=_ENV_KEY_PATTERN,
    )
    """Key of the Secret holding the secret access key."""


class S3CredentialsSource(StrEnum):
    """Where the runner's S3 credentials come from."""

    SECRET = "Secret"  # noqa: S105 - the name of a source, not a secret
    ENVIRONMENT = "Environment"


class GoldenS3Store(KubeModel):
    """An S3-compatible bucket (AWS S3, Ceph RGW, MinIO, SeaweedFS, Huawei OBS ...)."""

    endpoint: str = Field(
        min_length=1,
        max_length=URI_MAX,
        json_schema_extra=cel_rules(
            cel(
                "isURL(self) && url(self).getScheme() in ['http', 'https'] "
                "&& url(self).getHostname() != '' && url(self).getEscapedPath() in ['', '/']",
                "endpoint must be http(s)://host[:port] with no path, e.g. "
                "https://s3.eu-west-1.amazonaws.com",
            )
        ),
    )
    """Service URL, e.g. https://s3.eu-west-1.amazonaws.com; the bucket is addressed path-style."""
    bucket: str = Field(min_length=3, max_length=63, pattern=_BUCKET_PATTERN)
    """Bucket name; it must exist."""
    prefix: str = Field(default="", max_length=SHORT_TEXT_MAX, pattern=_PREFIX_PATTERN)
    """Key prefix under which the store lives, e.g. golden/prod. Empty: the bucket's root."""
    region: str = Field(default="us-east-1", min_length=1, max_length=64)
    """Region the request signature names."""
    credentials: S3CredentialsSource = S3CredentialsSource.SECRET
    """Secret (the default): static keys from the Secret secretRef names, and from nowhere
    else. Environment: no static key; the runner takes credentials as the AWS SDKs' default
    chain does: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY if its environment has them, else a
    web identity token (IRSA: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, which the EKS
    pod identity webhook sets from the runner ServiceAccount's eks.amazonaws.com/role-arn
    annotation; see `infergate operator --runner-service-account-annotation`), else the
    container credentials endpoint (EKS Pod Identity), else the node's instance role."""
    secret_ref: S3SecretReference | None = None
    """With credentials Secret (required there): the Secret with the access key pair; the
    runner gets it as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Not allowed with
    credentials Environment."""

    @model_validator(mode="after")
    def _credentials(self) -> Self:
        if self.credentials is S3CredentialsSource.SECRET and self.secret_ref is None:
            raise ValueError(
                "s3.secretRef: required with credentials Secret (the default); name the "
                "Secret with the access key pair, or set credentials: Environment to take "
                "them from the runner's environment (IRSA, workload identity)"
            )
        if self.credentials is S3CredentialsSource.ENVIRONMENT and self.secret_ref is not None:
            raise ValueError(
                "s3.secretRef: not allowed with credentials Environment; remove it, or set "
                "credentials: Secret"
            )
        return self


class GoldenStoreSpec(KubeModel):
    """Where the records live: exactly one of pvc or s3."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel("has(self.pvc) != has(self.s3)", "exactly one of pvc or s3 must be set")
        )
    )

    pvc: GoldenPvcStore | None = None
    """A directory on a PersistentVolumeClaim. Exclusive with s3."""
    s3: GoldenS3Store | None = None
    """An S3-compatible bucket. Exclusive with pvc."""

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.pvc is None) == (self.s3 is None):
            raise ValueError("store: exactly one of pvc or s3 must be set")
        return self


class GoldenRetention(KubeModel):
    """How long records stay: as long as their revision is in the deployment's history
    (revisionHistoryLimit)."""

    when_deleted: WhenDeleted = WhenDeleted.RETAIN
    """Retain: a deleted InferenceDeployment's records stay (a later migration or a new cluster
    can use them); Delete: they go with it, deleted by the runner of the namespace's next
    Passed check (which may then list the namespace's InferenceDeployments) or by
    `infergate golden prune`.
    """
    records_per_revision: int = Field(default=1, ge=1, le=RECORDS_PER_REVISION_MAX)
    """Newest records kept per revision, role, suite and engine fingerprint; older ones go."""


class GoldenSpec(KubeModel):
    """Golden records: every Passed check stores both sides' answers for later checks and the
    drift watch."""

    store: GoldenStoreSpec
    """Where the records live."""
    hidden_states: HiddenStatesPolicy = HiddenStatesPolicy.SUMMARY
    """What each record keeps of the hidden states: none; summary (per position the L2 norm and a
    fixed random projection, enough for relative L2, cosine and norm ratio); or full.
    """
    max_bytes: Quantity = Field(
        default="100Mi",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    """Most bytes one side's record of one suite may take, e.g. 100Mi. Prompts whose hidden
    states do not fit fall back to a smaller form (full, summary, none), in suite order.
    """
    sketch_dimensions: int = Field(
        default=SKETCH_DIMS_DEFAULT, ge=SKETCH_DIMS_MIN, le=SKETCH_DIMS_MAX
    )
    """Size of the per-position projection in summaries; the relative error of estimated
    relative L2 is about 1/sqrt(2 x this) (9% at 64).
    """
    retention: GoldenRetention = Field(
        default_factory=GoldenRetention, json_schema_extra={"default": {}}
    )
    """When records are deleted."""

    @model_validator(mode="after")
    def _bytes(self) -> Self:
        size = self.max_bytes_value()
        if not MIN_BYTES <= size <= MAX_BYTES_CAP:
            raise ValueError(f"maxBytes: {self.max_bytes!r} is {size} bytes; allowed 1Mi..1Ti")
        return self

    def max_bytes_value(self) -> int:
        """maxBytes in bytes."""
        return quantity_bytes("maxBytes", self.max_bytes)


class GoldenBaseline(KubeModel):
    """A stored golden record as a check's baseline: no pods of that revision need to run.

    The record comes from the operator's golden store (the operator's --golden-config; a
    check cannot name a store). It must answer the same suite and sampling as the check,
    else the check ends in Error; it never passes against a record it cannot vouch for.
    """

    inference_deployment_ref: LocalObjectReference | None = None
    """InferenceDeployment whose records to use. Unset: the candidate's."""
    revision: str = Field(default="latest", max_length=10, pattern=r"^([0-9a-f]{10}|latest)$")
    """Revision hash whose record to use, or latest: the newest record for this suite of any
    revision of the deployment other than the candidate's. A record the revision made as
    a candidate qualifies only if its outputs matched its baseline's on every prompt (else
    it was scored along the other side's sequence).
    """
    fingerprint: str | None = Field(
        default=None, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+=-]*$"
    )
    """Use only a record made with this engine fingerprint (sha256:<hex>, as `infergate golden
    list` shows). Unset: the newest record, whose fingerprints are then compared with the
    candidate's like a live side's.
    """
