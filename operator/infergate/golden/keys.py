"""Names in a golden record store: the suite's content digest, entry names, object keys.

Pure: no I/O. An entry name carries what retention and lookups sort by, so they work
from a listing even when an index entry itself cannot be read:

    <revision>-<created, UTC, microseconds>-<role>-<token>
    3f2a9c1d0e-20261109T031500123456Z-baseline-5d41402a

The random token keeps two writers that store the same revision at the same instant
apart: no writer ever writes a name another writer could write.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from infergate.golden.errors import GoldenConfigError
from infergate.suite import PromptSpec

RECORDS: Final = "records"
INDEX: Final = "index"
STAGING: Final = ".staging"
"""Directory stores stage unfinished records here, on the same filesystem as records/."""

_REVISION = re.compile(r"^[0-9a-f]{10}$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_FINGERPRINT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+=-]{0,127}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_STAMP = "%Y%m%dT%H%M%S%fZ"
_NAME = re.compile(
    r"^(?P<revision>[0-9a-f]{10})-(?P<created>\d{8}T\d{12}Z)-(?P<role>baseline|candidate)"
    r"-(?P<token>[0-9a-f]{8})$"
)


class Role(StrEnum):
    """Which side of the Passed check the record was: the reference or the judged one."""

    BASELINE = "baseline"
    CANDIDATE = "candidate"


def suite_digest(prompts: Sequence[PromptSpec], sampling: Mapping[str, Any]) -> str:
    """sha256 (hex) of what the suite asks: every prompt in order, and the sampling.

    Two records answer the same questions exactly when their digests are equal: every
    field of every prompt (id, text, token ids, messages, its own output settings, tags)
    and the generation settings (maxTokens, topLogprobs, seed, hidden positions ...) all
    count; the suite's name does not.
    """
    document = {
        "prompts": [p.model_dump(mode="json", by_alias=True) for p in prompts],
        "sampling": dict(sampling),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_revision(revision: str) -> str:
    if not _REVISION.match(revision):
        raise GoldenConfigError(
            f"revision: {revision!r} is not a revision hash; expected 10 lowercase hex digits"
        )
    return revision


def check_name(field: str, value: str) -> str:
    """A namespace or InferenceDeployment name, safe as one path component."""
    if not _DNS.match(value) or ".." in value or len(value) > 253:
        raise GoldenConfigError(
            f"{field}: {value!r} is not a Kubernetes object name (lowercase letters, digits, "
            "'-' and '.', at most 253 characters)"
        )
    return value


def check_fingerprint(fingerprint: str) -> str:
    if not _FINGERPRINT.match(fingerprint):
        raise GoldenConfigError(
            f"fingerprint: {fingerprint!r} is not allowed; give 1-128 characters of letters, "
            "digits and . _ : + = - (e.g. sha256:<hex>)"
        )
    return fingerprint


def check_suite_digest(digest: str) -> str:
    if not _DIGEST.match(digest):
        raise GoldenConfigError(
            f"suiteDigest: {digest!r} is not a sha256 hex digest (64 lowercase hex digits)"
        )
    return digest


@dataclass(frozen=True, order=True)
class EntryName:
    """The name of one index entry and of its record's directory."""

    revision: str
    created: datetime
    role: Role
    token: str

    def __str__(self) -> str:
        stamp = self.created.astimezone(UTC).strftime(_STAMP)
        return f"{self.revision}-{stamp}-{self.role.value}-{self.token}"

    @classmethod
    def new(cls, revision: str, role: Role, created: datetime) -> EntryName:
        if created.tzinfo is None:
            raise GoldenConfigError(f"created: {created.isoformat()} has no time zone; give UTC")
        return cls(check_revision(revision), created.astimezone(UTC), role, secrets.token_hex(4))

    @classmethod
    def parse(cls, text: str) -> EntryName | None:
        """The name's parts, or None when `text` is not an entry name."""
        match = _NAME.match(text)
        if match is None:
            return None
        created = datetime.strptime(match["created"], _STAMP).replace(tzinfo=UTC)
        return cls(match["revision"], created, Role(match["role"]), match["token"])


@dataclass(frozen=True)
class EntryLocation:
    """Where one entry lives: its deployment and its name."""

    namespace: str
    deployment: str
    name: EntryName

    @property
    def index_key(self) -> str:
        return f"{INDEX}/{self.namespace}/{self.deployment}/{self.name}.json"

    @property
    def record_prefix(self) -> str:
        """Key prefix of the record's blobs, ending in '/'."""
        return f"{RECORDS}/{self.namespace}/{self.deployment}/{self.name}/"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.deployment}/{self.name}"


def index_prefix(namespace: str | None = None, deployment: str | None = None) -> str:
    """Key prefix of the index entries of a namespace, a deployment, or all."""
    if namespace is None:
        if deployment is not None:
            raise GoldenConfigError("deployment: give the namespace too")
        return f"{INDEX}/"
    check_name("namespace", namespace)
    if deployment is None:
        return f"{INDEX}/{namespace}/"
    return f"{INDEX}/{namespace}/{check_name('deployment', deployment)}/"


def parse_index_key(key: str) -> EntryLocation | None:
    """The location an index key names, or None for any other key."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != INDEX or not parts[3].endswith(".json"):
        return None
    namespace, deployment = parts[1], parts[2]
    if not _DNS.match(namespace) or not _DNS.match(deployment):
        return None
    name = EntryName.parse(parts[3].removesuffix(".json"))
    return None if name is None else EntryLocation(namespace, deployment, name)


def parse_record_key(key: str) -> EntryLocation | None:
    """The entry whose record a blob key lies under, or None for any other key."""
    parts = key.split("/")
    if len(parts) < 5 or parts[0] != RECORDS:
        return None
    namespace, deployment = parts[1], parts[2]
    if not _DNS.match(namespace) or not _DNS.match(deployment):
        return None
    name = EntryName.parse(parts[3])
    return None if name is None else EntryLocation(namespace, deployment, name)


_RUN_KEYS = ("suite.", "sampling.")


def engine_fingerprint(
    *,
    engine: str,
    engine_version: str,
    dtype: str,
    effective_config: Mapping[str, Any],
    fingerprints: Mapping[str, Any],
) -> str:
    """`sha256:<hex>` of what one side ran: engine, version, dtype, effective configuration
    and its own fingerprints (weights, tokenizer, template ...).

    What the runner asked of both sides (suite.*, sampling.*) is left out: the suite
    digest keys that. Two records with the same fingerprint came from the same engine
    with the same files and numerics as far as the side reports them.
    """
    document = {
        "engine": engine,
        "engineVersion": engine_version,
        "dtype": dtype,
        "effectiveConfig": dict(effective_config),
        "fingerprints": {k: v for k, v in fingerprints.items() if not k.startswith(_RUN_KEYS)},
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
