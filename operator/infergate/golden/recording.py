"""Staging both sides of a check as golden records, then publishing them on Passed.

`GoldenStore.begin()` returns a `GoldenRecording`: the runner feeds it each (baseline,
candidate) pair as it is measured, so memory holds one pair; each side is written to a
local staging folder as a `ParityRecord` (the `infergate.recordio` format) plus, under
the summary policy, one summary file per prompt, within the policy's byte budget.
`commit()` publishes both records and then their index entries; `discard()` removes the
staging. A pair that failed half-way (one side stored, the other refused) can never be
committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import safetensors.numpy

from infergate.golden.blobs import CHUNK, BlobStore
from infergate.golden.entry import BlobDigest, GoldenEntry, PromptStorage, Sketch
from infergate.golden.errors import GoldenBudgetError, GoldenError
from infergate.golden.keys import EntryName, Role
from infergate.golden.policy import (
    FILE_OVERHEAD,
    StoragePolicy,
    base_bytes,
    choose_hidden_form,
    own_sequence_rows,
)
from infergate.golden.settings import HiddenStatesPolicy
from infergate.golden.summary import SKETCH_SEED, summarize
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.recordio import RecordWriter

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
                # On disk before its index entry can name it (a crash must not leave an
                # entry whose blobs were never flushed).
                os.fsync(handle.fileno())
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
        blobs: BlobStore,
        check: CheckIdentity,
        policy: StoragePolicy,
        staging: Path,
        started: datetime,
    ) -> None:
        self._blobs = blobs
        self._check = check
        self._policy = policy
        self._staging = staging
        self._started = started
        self._done = False
        self._failed = False
        self._candidate_self_scored = True
        """Every candidate sequence so far equals the baseline's (see GoldenEntry.self_scored)."""
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
            probed = [*baseline.prompt_token_ids.tolist(), *baseline.output_token_ids.tolist()]
            own = [*candidate.prompt_token_ids.tolist(), *candidate.output_token_ids.tolist()]
            if own != probed:
                self._candidate_self_scored = False
            if candidate.hidden_states is not None:
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
                self._blobs.publish(side.folder, entry.location.record_prefix, files)
            for entry in entries:
                self._blobs.put_bytes(entry.location.index_key, entry.to_json().encode())
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
            self_scored=role is Role.BASELINE or self._candidate_self_scored,
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
