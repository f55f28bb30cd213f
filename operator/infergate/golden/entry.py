"""The index entry of one golden record: what it is, where its blobs are, their digests.

An entry is JSON under `index/<namespace>/<deployment>/<name>.json`, written once,
after every blob it lists. `GoldenEntry.parse` refuses anything it cannot vouch for
(`GoldenIntegrityError`): bad JSON, another format, a blob path leaving the record, or
an entry whose content names another place than the key it was read from.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from infergate.golden.errors import GoldenIntegrityError
from infergate.golden.keys import EntryLocation, EntryName, Role
from infergate.golden.settings import HiddenStatesPolicy
from infergate.parity.record import RecordMeta

ENTRY_FORMAT: Final = "infergate.io/golden-entry"
ENTRY_VERSION: Final = 1
RECORD_MANIFEST: Final = "manifest.json"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class BlobDigest(_Model):
    """One file of the record: path under the record's prefix, sha256 and size in bytes."""

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        pure = PurePosixPath(value)
        if not value or pure.is_absolute() or ".." in pure.parts or "\\" in value:
            raise ValueError(f"blob path {value!r} leaves the record")
        return value


class PromptStorage(_Model):
    """What one prompt's record keeps of its hidden states."""

    id: str
    hidden: HiddenStatesPolicy
    rows: int = Field(ge=0, description="Hidden-state positions kept (full or summary).")
    summary_file: str | None = None


class Sketch(_Model):
    """The projection the summaries were made with (`infergate.golden.summary`)."""

    dims: int
    seed: int


class GoldenEntry(_Model):
    """One side's record of one Passed check, as the index lists it."""

    format: Literal["infergate.io/golden-entry"] = ENTRY_FORMAT
    version: Literal[1] = ENTRY_VERSION
    namespace: str
    deployment: str
    name: str
    revision: str
    role: Role
    counterpart_revision: str | None = None
    check: str = ""
    suite: str
    suite_digest: str
    fingerprint: str
    created: datetime
    profile: str | None = None
    meta: RecordMeta
    hidden_states: HiddenStatesPolicy
    max_bytes: int
    sketch: Sketch | None = None
    prompts: list[PromptStorage]
    blobs: list[BlobDigest]
    size_bytes: int
    self_scored: bool = False
    """Every prompt was scored (teacher-forced) and probed along this side's own sequence:
    true of a baseline's record, and of a candidate's whose outputs all matched the
    baseline's. Only such a record can serve as a later check's baseline."""

    @field_validator("created")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("created has no time zone")
        return value.astimezone(UTC)

    @property
    def location(self) -> EntryLocation:
        name = EntryName.parse(self.name)
        if name is None:  # parse() refuses such entries; kept for the type checker
            raise GoldenIntegrityError(f"entry name {self.name!r} is not an entry name")
        return EntryLocation(self.namespace, self.deployment, name)

    def blob(self, path: str) -> BlobDigest:
        for blob in self.blobs:
            if blob.path == path:
                return blob
        raise GoldenIntegrityError(f"{self.location}: the entry lists no blob {path!r}")

    def hidden_counts(self) -> dict[str, int]:
        """How many prompts kept each form of hidden states."""
        counts = {form.value: 0 for form in HiddenStatesPolicy}
        for prompt in self.prompts:
            counts[prompt.hidden.value] += 1
        return counts

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1, sort_keys=True)

    @classmethod
    def parse(cls, data: bytes, location: EntryLocation) -> GoldenEntry:
        """An entry read from `location`'s index key; refuses what does not belong there."""
        try:
            entry = cls.model_validate_json(data)
        except ValidationError as err:
            raise GoldenIntegrityError(f"{location.index_key}: not a valid entry: {err}") from err
        if entry.location != location:
            raise GoldenIntegrityError(
                f"{location.index_key}: the entry describes {entry.location}, not this key"
            )
        if entry.revision != location.name.revision or entry.role is not location.name.role:
            raise GoldenIntegrityError(
                f"{location.index_key}: revision {entry.revision} / role {entry.role.value} "
                "differ from the entry's name"
            )
        paths = [blob.path for blob in entry.blobs]
        if RECORD_MANIFEST not in paths or len(set(paths)) != len(paths):
            raise GoldenIntegrityError(
                f"{location.index_key}: blobs must list {RECORD_MANIFEST} and no path twice"
            )
        return entry
