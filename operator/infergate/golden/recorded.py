"""The golden records Passed ParityChecks say they stored: a listing from the cluster (pure).

`infergate golden list` reads a store's own index (`--store`: a directory or a bucket the
caller can reach, with its credentials). A store on a PersistentVolumeClaim is often out
of a person's reach: a laptop cannot mount the claim. Every Passed check that stored
records says so in its `status.golden` (`api.check_status.GoldenRecordStatus`: the store,
the suite digest, the index entries written, their size), so the ParityChecks a person
may read with their own RBAC already tell what was recorded, for any store.

It is what the checks recorded, not the store's truth: a record pruned by retention since,
or damaged, still shows here, and a record of a check deleted since does not. `--store`
reads the index itself and `infergate golden verify` checks every blob.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from infergate.golden.keys import EntryName

SOURCE: Final = (
    "what Passed ParityChecks recorded (their status.golden), not read from the store: a "
    "record pruned or damaged since still shows, one of a check deleted since does not; "
    "--store reads the store's own index (authoritative; `golden verify` checks every blob)"
)
_ROLES: Final = ("baseline", "candidate")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RecordedGolden:
    """One index entry a Passed check wrote, as its status says."""

    namespace: str
    deployment: str
    revision: str
    role: str
    recorded: datetime | None
    """When the record was made (from its entry name); None if the name is not one."""
    check: str
    completed: str | None
    """The check's completionTime, as written."""
    counterpart: str | None
    """The other side's revision in that check."""
    suite_digest: str | None
    store: str | None
    pair_size_bytes: int | None
    """Bytes both records of the check take (the status gives them together)."""
    entry: str
    """namespace/deployment/name of the index entry."""


@dataclass(frozen=True)
class NotStored:
    """A Passed check whose records were not stored, and why."""

    namespace: str
    check: str
    message: str


@dataclass(frozen=True)
class RecordedListing:
    """The records the checks stored, oldest first, and the Passed checks that stored none."""

    records: tuple[RecordedGolden, ...]
    not_stored: tuple[NotStored, ...]


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _deployment_of(spec: Mapping[str, Any]) -> str | None:
    for side in ("candidate", "baseline"):
        ref = (spec.get(side) or {}).get("inferenceDeploymentRef") or {}
        if ref.get("name"):
            return str(ref["name"])
    return None


def _entries(check: Mapping[str, Any]) -> list[RecordedGolden]:
    metadata = check.get("metadata") or {}
    status = check.get("status") or {}
    golden = status.get("golden") or {}
    name = str(metadata.get("name") or "")
    revisions = {role: _text(status.get(f"{role}Revision")) for role in _ROLES}
    size = golden.get("sizeBytes")
    found = []
    # The status lists the baseline's entry, then the candidate's.
    for position, entry in enumerate(golden.get("entries") or []):
        parts = str(entry).split("/")
        if len(parts) == 3:
            namespace, deployment = parts[0], parts[1]
        else:
            namespace = str(metadata.get("namespace") or "")
            deployment = _deployment_of(check.get("spec") or {}) or "?"
        parsed = EntryName.parse(parts[-1])
        if parsed is not None:
            role, revision, recorded = parsed.role.value, parsed.revision, parsed.created
        else:
            role = _ROLES[position] if position < len(_ROLES) else "?"
            revision, recorded = revisions.get(role) or "?", None
        other = {"baseline": "candidate", "candidate": "baseline"}.get(role)
        found.append(
            RecordedGolden(
                namespace=namespace,
                deployment=deployment,
                revision=revision,
                role=role,
                recorded=recorded,
                check=name,
                completed=_text(status.get("completionTime")),
                counterpart=revisions.get(other) if other else None,
                suite_digest=_text(golden.get("suiteDigest")),
                store=_text(golden.get("store")),
                pair_size_bytes=size if isinstance(size, int) else None,
                entry=str(entry),
            )
        )
    return found


def recorded_golden(
    checks: Iterable[Mapping[str, Any]],
    *,
    deployment: str | None = None,
    revision: str | None = None,
) -> RecordedListing:
    """From ParityChecks as the API returns them: the entries Passed checks stored (of one
    deployment or revision when given), oldest first, and the Passed checks that stored none.

    Only a Passed check stores records; any other phase, or a status without `golden`
    (a check of an operator keeping no store, a drift run), contributes nothing.
    """
    records: list[RecordedGolden] = []
    not_stored: list[NotStored] = []
    for check in checks:
        status = check.get("status") or {}
        golden = status.get("golden")
        if status.get("phase") != "Passed" or not isinstance(golden, Mapping):
            continue
        metadata = check.get("metadata") or {}
        if not golden.get("stored"):
            if deployment is None or _deployment_of(check.get("spec") or {}) == deployment:
                not_stored.append(
                    NotStored(
                        str(metadata.get("namespace") or ""),
                        str(metadata.get("name") or ""),
                        str(golden.get("message") or "no reason given"),
                    )
                )
            continue
        records += [
            r
            for r in _entries(check)
            if (deployment is None or r.deployment == deployment)
            and (revision is None or r.revision == revision)
        ]
    # Oldest first; a check's pair (one instant) baseline first, as the status lists it.
    records.sort(
        key=lambda r: (r.recorded is None, r.recorded or _EPOCH, r.check, r.role != "baseline")
    )
    not_stored.sort(key=lambda n: (n.namespace, n.check))
    return RecordedListing(tuple(records), tuple(not_stored))


_HEADER: Final = (
    "DEPLOYMENT",
    "REVISION",
    "ROLE",
    "RECORDED (UTC)",
    "CHECK",
    "SUITE",
    "PAIR SIZE",
    "STORE",
    "ENTRY",
)


def size_text(count: int) -> str:
    """Bytes for people: 512B, 1.5KiB, 3.0MiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{count}B"


def _row(record: RecordedGolden) -> tuple[str, ...]:
    recorded = record.recorded.strftime("%Y-%m-%d %H:%M:%S") if record.recorded else "-"
    return (
        f"{record.namespace}/{record.deployment}",
        record.revision,
        record.role,
        recorded,
        record.check,
        (record.suite_digest or "-")[:12],
        size_text(record.pair_size_bytes) if record.pair_size_bytes is not None else "-",
        record.store or "-",
        record.entry.rsplit("/", 1)[-1],
    )


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [_HEADER, *rows]
    ]


def listing_text(listing: RecordedListing, where: str) -> str:
    """The listing for a terminal: a table, what it is (and is not), and the checks that
    stored nothing. `where` names the scope, e.g. "namespace llm"."""
    lines = (
        _table([_row(r) for r in listing.records])
        if listing.records
        else [f"no golden records recorded by Passed ParityChecks in {where}"]
    )
    lines += [
        f"Passed check {n.namespace}/{n.check} stored no records: {n.message}"
        for n in listing.not_stored
    ]
    lines.append(f"source: {SOURCE}")
    return "\n".join(lines)


def listing_json(listing: RecordedListing, where: str) -> str:
    """The listing as one JSON document, with what it is."""
    document = {
        "scope": where,
        "source": SOURCE,
        "records": [
            {
                "entry": r.entry,
                "namespace": r.namespace,
                "deployment": r.deployment,
                "revision": r.revision,
                "role": r.role,
                "recorded": r.recorded.isoformat() if r.recorded else None,
                "check": r.check,
                "checkCompleted": r.completed,
                "counterpartRevision": r.counterpart,
                "suiteDigest": r.suite_digest,
                "store": r.store,
                "pairSizeBytes": r.pair_size_bytes,
            }
            for r in listing.records
        ],
        "notStored": [
            {"namespace": n.namespace, "check": n.check, "message": n.message}
            for n in listing.not_stored
        ],
    }
    return json.dumps(document, indent=1)
