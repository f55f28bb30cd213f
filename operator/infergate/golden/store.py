"""Write and read golden records: `GoldenStore` over any `BlobStore`.

Writing follows a check: `begin()` returns a `GoldenRecording`
(`infergate.golden.recording`) that stages both sides prompt by prompt and publishes
them on `commit()` after a Passed verdict. Hidden states are kept as the
`StoragePolicy` says, within its byte budget (`infergate.golden.policy`).

Reading verifies: `open()` checks the size and sha256 of every blob the entry lists
before a `RecordReader` touches it (in place for a directory store, downloading into a
private folder for S3), and checks that the record's own manifest describes the same
run as the entry. Any difference raises `GoldenIntegrityError`.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Self

import safetensors.numpy

from infergate.golden.blobs import BlobStore
from infergate.golden.entry import RECORD_MANIFEST, BlobDigest, GoldenEntry
from infergate.golden.errors import GoldenIntegrityError, GoldenNotFoundError
from infergate.golden.keys import (
    RECORDS,
    STAGING,
    EntryLocation,
    Role,
    check_fingerprint,
    check_name,
    check_revision,
    check_suite_digest,
    index_prefix,
    parse_index_key,
    parse_record_key,
)
from infergate.golden.policy import StoragePolicy
from infergate.golden.recording import CheckIdentity, GoldenRecording, SideIdentity
from infergate.golden.retention import (
    Deletion,
    DeploymentHistory,
    DeploymentKey,
    IndexItem,
    plan_orphans,
    plan_retention,
)
from infergate.golden.settings import HiddenStatesPolicy, WhenDeleted
from infergate.golden.summary import HiddenSummary
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.recordio import RecordFormatError, RecordReader

__all__ = ["CheckIdentity", "GoldenRecord", "GoldenRecording", "GoldenStore", "SideIdentity"]


class GoldenStore:
    """Golden records in one store (`infergate.golden.config` builds one from settings)."""

    def __init__(
        self, blobs: BlobStore, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.blobs = blobs
        self._clock = clock

    def describe(self) -> str:
        return self.blobs.describe()

    # -- writing --------------------------------------------------------------------------

    def begin(
        self, check: CheckIdentity, policy: StoragePolicy, *, work_dir: Path | None = None
    ) -> GoldenRecording:
        """Start staging both sides' records of `check`; commit only if it Passed."""
        check_name("namespace", check.namespace)
        check_name("deployment", check.deployment)
        check_suite_digest(check.suite_digest)
        for side in (check.baseline, check.candidate):
            check_revision(side.revision)
            check_fingerprint(side.fingerprint)
        root = self.blobs.staging_root() or work_dir
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="golden-", dir=root))
        return GoldenRecording(self.blobs, check, policy, staging, self._clock())

    # -- reading --------------------------------------------------------------------------

    def list_entries(
        self, namespace: str | None = None, deployment: str | None = None
    ) -> list[IndexItem]:
        """Every index entry under the namespace/deployment (or all), oldest first.

        An entry that cannot be read is listed with `entry` None and the reason in
        `problem`, never skipped silently.
        """
        items: list[IndexItem] = []
        for blob in self.blobs.list(index_prefix(namespace, deployment)):
            location = parse_index_key(blob.key)
            if location is None:
                continue
            try:
                items.append(IndexItem(location, self.entry(location)))
            except GoldenIntegrityError as err:
                items.append(IndexItem(location, None, str(err)))
        items.sort(key=lambda item: (item.location.name.created, str(item.location)))
        return items

    def entry(self, location: EntryLocation) -> GoldenEntry:
        """The entry at `location`; `GoldenIntegrityError` when it cannot be vouched for."""
        return GoldenEntry.parse(self.blobs.get_bytes(location.index_key), location)

    def find(
        self,
        namespace: str,
        deployment: str,
        *,
        revision: str | None,
        suite_digest: str,
        fingerprint: str | None = None,
        role: Role | None = None,
    ) -> GoldenEntry:
        """The newest record of `revision` (None: of any revision) for this suite.

        Fail closed: when the newest candidate entry cannot be read, this raises
        `GoldenIntegrityError` rather than falling back to an older record.
        """
        if revision is not None:
            check_revision(revision)
        matches: list[IndexItem] = []
        for item in reversed(self.list_entries(namespace, deployment)):
            name = item.location.name
            if revision is not None and name.revision != revision:
                continue
            if role is not None and name.role is not role:
                continue
            entry = item.entry
            if entry is None:
                matches.append(item)
                continue
            if entry.suite_digest != suite_digest:
                continue
            if fingerprint is not None and entry.fingerprint != fingerprint:
                continue
            matches.append(item)
        if not matches:
            what = f"revision {revision}" if revision else "any revision"
            raise GoldenNotFoundError(
                f"{self.describe()}: no golden record of {namespace}/{deployment} {what} for "
                f"suite {suite_digest[:12]}"
                + (f" and fingerprint {fingerprint}" if fingerprint else "")
            )
        newest = matches[0]
        if newest.entry is None:
            raise GoldenIntegrityError(
                f"the newest golden record {newest.location} cannot be read: {newest.problem}"
            )
        return newest.entry

    def verify(self, entry: GoldenEntry) -> None:
        """Check every blob's size and sha256; raises `GoldenIntegrityError` on a difference."""
        prefix = entry.location.record_prefix
        for blob in entry.blobs:
            _verify_blob(self.blobs, prefix, blob, None)

    def open(self, entry: GoldenEntry, *, work_dir: Path | None = None) -> GoldenRecord:
        """The verified record (a context manager; close it to drop any download)."""
        prefix = entry.location.record_prefix
        local = self.blobs.local_path(f"{prefix}{RECORD_MANIFEST}")
        download: Path | None = None
        if local is not None:
            self.verify(entry)
            folder = local.parent
        else:
            download = Path(tempfile.mkdtemp(prefix="golden-read-", dir=work_dir))
            try:
                for blob in entry.blobs:
                    _verify_blob(self.blobs, prefix, blob, download / blob.path)
            except BaseException:
                shutil.rmtree(download, ignore_errors=True)
                raise
            folder = download
        try:
            return GoldenRecord(entry, folder, download)
        except BaseException:
            if download is not None:
                shutil.rmtree(download, ignore_errors=True)
            raise

    # -- deleting -------------------------------------------------------------------------

    def delete(self, locations: Sequence[EntryLocation]) -> None:
        """Delete records: each index entry first, so no reader is sent to a half-deleted one."""
        for location in locations:
            self.blobs.delete([location.index_key])
            keys = [blob.key for blob in self.blobs.list(location.record_prefix)]
            self.blobs.delete(keys)

    def plan_prune(
        self,
        items: Sequence[IndexItem],
        histories: Mapping[DeploymentKey, DeploymentHistory],
        *,
        when_deleted: WhenDeleted,
        records_per_revision: int = 1,
        indexed: Sequence[IndexItem] | None = None,
        namespace: str | None = None,
        orphan_grace: timedelta = timedelta(hours=6),
    ) -> PrunePlan:
        """What retention (`plan_retention` over `items`) and the orphan sweep would delete.

        `indexed`: every entry that was listed (default: `items`), so that a record whose
        entry is only out of retention's scope is no orphan. `namespace`: orphans only of
        that namespace, and no staging (which belongs to no namespace).
        """
        deletions = plan_retention(
            items, histories, when_deleted=when_deleted, records_per_revision=records_per_revision
        )
        now = self._clock()
        under = f"{RECORDS}/{namespace}/" if namespace is not None else f"{RECORDS}/"
        blobs = [
            (location, blob.modified)
            for blob in self.blobs.list(under)
            if (location := parse_record_key(blob.key)) is not None
        ]
        listed = items if indexed is None else indexed
        orphans = plan_orphans(
            blobs, [item.location for item in listed], now=now, grace=orphan_grace
        )
        deletions += [Deletion(o, "orphan: a record with no index entry") for o in orphans]
        stale = (
            []
            if namespace is not None
            else [
                blob.key
                for blob in self.blobs.list(f"{STAGING}/")
                if now - blob.modified > orphan_grace
            ]
        )
        return PrunePlan(deletions, stale)

    def apply_prune(self, plan: PrunePlan) -> None:
        """Delete what `plan_prune` planned."""
        self.delete([d.location for d in plan.deletions])
        self.blobs.delete(plan.staging)

    def prune(
        self,
        histories: dict[tuple[str, str], DeploymentHistory],
        *,
        when_deleted: WhenDeleted,
        records_per_revision: int = 1,
        orphan_grace: timedelta = timedelta(hours=6),
        dry_run: bool = False,
    ) -> list[Deletion]:
        """Apply retention (`plan_retention`) and remove orphaned records and staging."""
        plan = self.plan_prune(
            self.list_entries(),
            histories,
            when_deleted=when_deleted,
            records_per_revision=records_per_revision,
            orphan_grace=orphan_grace,
        )
        if not dry_run:
            self.apply_prune(plan)
        return plan.deletions


@dataclass(frozen=True)
class PrunePlan:
    """Records to delete with the reason, and stale staging blobs (keys)."""

    deletions: list[Deletion]
    staging: list[str]


def _verify_blob(blobs: BlobStore, prefix: str, blob: BlobDigest, copy_to: Path | None) -> None:
    key = f"{prefix}{blob.path}"
    digest = hashlib.sha256()
    size = 0
    handle = None
    if copy_to is not None:
        copy_to.parent.mkdir(parents=True, exist_ok=True)
        handle = copy_to.open("wb")

    def sink(chunk: bytes) -> None:
        nonlocal size
        digest.update(chunk)
        size += len(chunk)
        if handle is not None:
            handle.write(chunk)

    try:
        blobs.read_chunks(key, sink)
    finally:
        if handle is not None:
            handle.close()
    if size != blob.size or digest.hexdigest() != blob.sha256:
        raise GoldenIntegrityError(
            f"{blobs.describe()}: {key} is corrupt: {size} bytes sha256 {digest.hexdigest()[:16]}, "
            f"the index entry says {blob.size} bytes sha256 {blob.sha256[:16]}"
        )


class GoldenRecord:
    """A verified golden record: a `RecordReader` plus its hidden-state summaries."""

    def __init__(self, entry: GoldenEntry, folder: Path, download: Path | None) -> None:
        self.entry = entry
        self._folder = folder
        self._download = download
        try:
            self.reader = RecordReader(folder)
        except RecordFormatError as err:
            raise GoldenIntegrityError(f"{entry.location}: {err}") from err
        if self.reader.meta != entry.meta:
            raise GoldenIntegrityError(
                f"{entry.location}: the record's manifest describes another run than its entry"
            )
        self._storage = {prompt.id: prompt for prompt in entry.prompts}
        if list(self._storage) != self.reader.prompt_ids:
            raise GoldenIntegrityError(
                f"{entry.location}: the record's prompts differ from its entry's"
            )

    @property
    def meta(self) -> RecordMeta:
        return self.reader.meta

    @property
    def prompt_ids(self) -> list[str]:
        return self.reader.prompt_ids

    def get(self, prompt_id: str) -> PromptRecord:
        return self.reader.get(prompt_id)

    def hidden_form(self, prompt_id: str) -> HiddenStatesPolicy:
        return self._storage[prompt_id].hidden

    def hidden_summary(self, prompt_id: str) -> HiddenSummary | None:
        """The prompt's hidden-state summary, or None when it kept full states or none."""
        storage = self._storage[prompt_id]
        if storage.summary_file is None:
            return None
        try:
            tensors = safetensors.numpy.load_file(str(self._folder / storage.summary_file))
            return HiddenSummary(tensors["norms"], tensors["sketch"])
        except (OSError, KeyError, ValueError) as err:
            raise GoldenIntegrityError(
                f"{self.entry.location}: summary of {prompt_id!r} is unreadable: {err}"
            ) from err

    def close(self) -> None:
        if self._download is not None:
            shutil.rmtree(self._download, ignore_errors=True)
            self._download = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
