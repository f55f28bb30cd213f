"""Write and read golden records: `GoldenStore` over any `BlobStore`.

Writing follows a check: `begin()` stages both sides' records locally prompt by prompt
(the runner feeds each (baseline, candidate) pair as it is measured, so memory holds
one pair), `commit()` after a Passed verdict publishes the two records and then their
index entries, `discard()` after anything else removes the staging. Hidden states are
kept as the `StoragePolicy` says, within its byte budget (`infergate.golden.policy`).

Reading verifies: `open()` checks the size and sha256 of every blob the entry lists
before a `RecordReader` touches it (in place for a directory store, downloading into a
private folder for S3), and checks that the record's own manifest describes the same
run as the entry. Any difference raises `GoldenIntegrityError`.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import safetensors.numpy

from infergate.golden.blobs import CHUNK, BlobStore
from infergate.golden.entry import (
    RECORD_MANIFEST,
    BlobDigest,
    GoldenEntry,
    PromptStorage,
    Sketch,
)
from infergate.golden.errors import (
    GoldenBudgetError,
    GoldenError,
    GoldenIntegrityError,
    GoldenNotFoundError,
)
from infergate.golden.keys import (
    RECORDS,
    STAGING,
    EntryLocation,
    EntryName,
    Role,
    check_fingerprint,
    check_name,
    check_revision,
    check_suite_digest,
    index_prefix,
    parse_index_key,
    parse_record_key,
)
from infergate.golden.policy import (
    FILE_OVERHEAD,
    HiddenStatesPolicy,
    StoragePolicy,
    base_bytes,
    choose_hidden_form,
    own_sequence_rows,
)
from infergate.golden.retention import (
    Deletion,
    DeploymentHistory,
    IndexItem,
    WhenDeleted,
    plan_orphans,
    plan_retention,
)
from infergate.golden.summary import SKETCH_SEED, HiddenSummary, summarize
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.recordio import RecordFormatError, RecordReader, RecordWriter

_HIDDEN_DIR = "hidden"
_MANIFEST_RESERVE_PER_PROMPT = 512
"""Bytes reserved per prompt for its line in the record's manifest.json."""


@dataclass(frozen=True)
class SideIdentity:
    """One side of the check as the store keys it."""

    revision: str
    fingerprint: str
    meta: RecordMeta


@dataclass(frozen=True)
class CheckIdentity:
    """The Passed check whose two sides are stored."""

    namespace: str
    deployment: str
    check: str
    suite: str
    suite_digest: str
    baseline: SideIdentity
    candidate: SideIdentity


class GoldenStore:
    """Golden records in one store (`infergate.golden.config.open_store` builds one)."""

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
        return GoldenRecording(self, check, policy, staging, self._clock())

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
        items = self.list_entries()
        deletions = plan_retention(
            items, histories, when_deleted=when_deleted, records_per_revision=records_per_revision
        )
        now = self._clock()
        blobs = [
            (location, blob.modified)
            for blob in self.blobs.list(f"{RECORDS}/")
            if (location := parse_record_key(blob.key)) is not None
        ]
        orphans = plan_orphans(
            blobs, [item.location for item in items], now=now, grace=orphan_grace
        )
        deletions += [Deletion(o, "orphan: a record with no index entry") for o in orphans]
        stale = [
            blob.key
            for blob in self.blobs.list(f"{STAGING}/")
            if now - blob.modified > orphan_grace
        ]
        if not dry_run:
            self.delete([d.location for d in deletions])
            self.blobs.delete(stale)
        return deletions


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


class _SideWriter:
    """One side's staged record: the record files plus summaries, within the budget."""

    def __init__(self, folder: Path, side: SideIdentity, role: Role, policy: StoragePolicy) -> None:
        self.folder = folder
        self.side = side
        self.role = role
        self.policy = policy
        self.writer = RecordWriter(folder, side.meta)
        self.prompts: list[PromptStorage] = []
        self.written = 0

    def _remaining(self) -> int:
        reserve = FILE_OVERHEAD + _MANIFEST_RESERVE_PER_PROMPT * (len(self.prompts) + 1)
        return self.policy.max_bytes - self.written - reserve

    def add(self, prompt: PromptRecord, rows: int) -> None:
        hidden = prompt.hidden_states
        positions = 0 if hidden is None else min(rows, int(hidden.shape[0]))
        size = 0 if hidden is None else int(hidden.shape[1])
        form = choose_hidden_form(
            self.policy, self._remaining(), base_bytes(prompt), positions, size
        )
        index = len(self.prompts)
        summary_file = None
        kept = None
        if hidden is not None and form is HiddenStatesPolicy.FULL:
            kept = np.ascontiguousarray(hidden[:positions])
        elif hidden is not None and form is HiddenStatesPolicy.SUMMARY:
            summary = summarize(hidden[:positions], self.policy.sketch_dims)
            summary_file = f"{_HIDDEN_DIR}/{index:06d}.safetensors"
            path = self.folder / summary_file
            path.parent.mkdir(parents=True, exist_ok=True)
            safetensors.numpy.save_file(
                {"norms": summary.norms, "sketch": summary.sketch},
                str(path),
                metadata={
                    "prompt_id": prompt.prompt_id,
                    "dims": str(self.policy.sketch_dims),
                    "seed": str(SKETCH_SEED),
                },
            )
            self.written += path.stat().st_size
        self.writer.add(replace(prompt, hidden_states=kept))
        self.written += (self.folder / "prompts" / f"{index:06d}.safetensors").stat().st_size
        rows_kept = positions if form is not HiddenStatesPolicy.NONE else 0
        self.prompts.append(
            PromptStorage(
                id=prompt.prompt_id, hidden=form, rows=rows_kept, summary_file=summary_file
            )
        )

    def finish(self) -> list[BlobDigest]:
        self.writer.close()
        blobs = []
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
            blobs.append(
                BlobDigest(
                    path=path.relative_to(self.folder).as_posix(),
                    sha256=digest.hexdigest(),
                    size=path.stat().st_size,
                )
            )
        total = sum(blob.size for blob in blobs)
        if total > self.policy.max_bytes:
            raise GoldenBudgetError(
                f"maxBytes {self.policy.max_bytes}: the {self.role.value} record takes {total} "
                "bytes"
            )
        return blobs


class GoldenRecording:
    """Both sides of one check being staged; `commit()` on Passed, else `discard()`."""

    def __init__(
        self,
        store: GoldenStore,
        check: CheckIdentity,
        policy: StoragePolicy,
        staging: Path,
        started: datetime,
    ) -> None:
        self._store = store
        self._check = check
        self._policy = policy
        self._staging = staging
        self._started = started
        self._done = False
        self._failed = False
        self._names = {
            Role.BASELINE: EntryName.new(check.baseline.revision, Role.BASELINE, started),
            Role.CANDIDATE: EntryName.new(check.candidate.revision, Role.CANDIDATE, started),
        }
        self._sides = {
            role: _SideWriter(staging / str(name), side, role, policy)
            for (role, name), side in zip(
                self._names.items(), (check.baseline, check.candidate), strict=True
            )
        }

    @property
    def bytes_written(self) -> dict[Role, int]:
        return {role: side.written for role, side in self._sides.items()}

    def add(self, baseline: PromptRecord, candidate: PromptRecord) -> None:
        """Stage one prompt of both sides (the pair the runner just compared)."""
        if self._done or self._failed:
            raise GoldenError("golden recording: already committed, discarded or failed")
        if baseline.prompt_id != candidate.prompt_id:
            raise GoldenError(
                f"golden recording: baseline {baseline.prompt_id!r} paired with candidate "
                f"{candidate.prompt_id!r}"
            )
        try:
            base_rows = (
                0 if baseline.hidden_states is None else int(baseline.hidden_states.shape[0])
            )
            self._sides[Role.BASELINE].add(baseline, base_rows)
            cand_rows = 0
            if candidate.hidden_states is not None:
                probed = [*baseline.prompt_token_ids.tolist(), *baseline.output_token_ids.tolist()]
                own = [*candidate.prompt_token_ids.tolist(), *candidate.output_token_ids.tolist()]
                cand_rows = own_sequence_rows(own, probed, int(candidate.hidden_states.shape[0]))
            self._sides[Role.CANDIDATE].add(candidate, cand_rows)
        except BaseException:
            # One side may hold the prompt and the other not: never commit such a pair.
            self._failed = True
            raise

    def commit(self, *, profile: str | None = None) -> tuple[GoldenEntry, GoldenEntry]:
        """Publish both records, then their index entries (the entries make them visible)."""
        if self._done or self._failed:
            raise GoldenError("golden recording: already committed, discarded or failed")
        try:
            entries = []
            for role, side in self._sides.items():
                blobs = side.finish()
                entries.append(self._entry(role, side, blobs, profile))
            for entry, side in zip(entries, self._sides.values(), strict=True):
                files = [blob.path for blob in entry.blobs]
                self._store.blobs.publish(side.folder, entry.location.record_prefix, files)
            for entry in entries:
                self._store.blobs.put_bytes(entry.location.index_key, entry.to_json().encode())
        finally:
            self.discard()
        return entries[0], entries[1]

    def _entry(
        self, role: Role, side: _SideWriter, blobs: list[BlobDigest], profile: str | None
    ) -> GoldenEntry:
        check = self._check
        other = check.candidate if role is Role.BASELINE else check.baseline
        summaries = any(p.hidden is HiddenStatesPolicy.SUMMARY for p in side.prompts)
        return GoldenEntry(
            namespace=check.namespace,
            deployment=check.deployment,
            name=str(self._names[role]),
            revision=side.side.revision,
            role=role,
            counterpart_revision=other.revision,
            check=check.check,
            suite=check.suite,
            suite_digest=check.suite_digest,
            fingerprint=side.side.fingerprint,
            created=self._started,
            profile=profile,
            meta=side.side.meta,
            hidden_states=self._policy.hidden_states,
            max_bytes=self._policy.max_bytes,
            sketch=Sketch(dims=self._policy.sketch_dims, seed=SKETCH_SEED) if summaries else None,
            prompts=side.prompts,
            blobs=blobs,
            size_bytes=sum(blob.size for blob in blobs),
        )

    def discard(self) -> None:
        """Remove what was staged (idempotent)."""
        self._done = True
        shutil.rmtree(self._staging, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.discard()
