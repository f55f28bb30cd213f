"""Which golden records to delete: a pure decision over the index and the deployments.

Records follow their InferenceDeployment's revision history: a revision that dropped out
of `status.revisions` (bounded by `revisionHistoryLimit`) loses its records; of several
records of the same revision, role, suite and fingerprint only the newest
`recordsPerRevision` are kept. A deleted InferenceDeployment keeps its records or drops
them all, as `retention.whenDeleted` says (Retain | Delete, as a StatefulSet's
persistentVolumeClaimRetentionPolicy).

Fail closed: nothing is deleted without a reason that can be stated. A deployment the
caller did not describe is unknown, and its records are kept; an entry that cannot be
read is kept for a person to look at (`infergate golden verify` reports it), unless its
whole revision or deployment is going.

`scope_retention` says which deployments are described: a deployment counts as deleted
only when a listing that covers its namespace succeeded and did not return it. A listing
that failed or was refused deletes nothing of the deployments it would have described
("could not list" is never "deleted").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from infergate.golden.entry import GoldenEntry
from infergate.golden.keys import EntryLocation
from infergate.golden.settings import WhenDeleted


@dataclass(frozen=True)
class DeploymentHistory:
    """What the cluster says of one InferenceDeployment.

    `revisions`: the hashes it still keeps, its stable revision and every entry of
    `status.revisions` (which `revisionHistoryLimit` bounds). Ignored when it no longer
    exists.
    """

    exists: bool
    revisions: frozenset[str] = field(default_factory=frozenset)


DeploymentKey = tuple[str, str]
"""(namespace, name) of an InferenceDeployment."""


def deployment_history(deployment: Mapping[str, Any] | None) -> DeploymentHistory:
    """What retention keeps of a deployment (None: it does not exist): its stable and
    canary revisions and every revision its status still lists (`revisionHistoryLimit`
    bounds that list)."""
    if deployment is None:
        return DeploymentHistory(exists=False)
    status = deployment.get("status") or {}
    hashes = {r.get("hash") for r in status.get("revisions") or [] if isinstance(r, Mapping)}
    hashes |= {status.get("stableRevision"), status.get("canaryRevision")}
    return DeploymentHistory(True, frozenset(h for h in hashes if isinstance(h, str)))


def listed_histories(
    deployments: Iterable[Mapping[str, Any]],
) -> dict[DeploymentKey, DeploymentHistory]:
    """The histories of listed InferenceDeployments (objects as the API server returns them).

    An object without a namespace and a name is a `ValueError`: a listing that cannot be
    read whole must not make its deployments look deleted.
    """
    found: dict[DeploymentKey, DeploymentHistory] = {}
    for deployment in deployments:
        metadata = deployment.get("metadata") if isinstance(deployment, Mapping) else None
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
            raise ValueError(
                f"a listed InferenceDeployment has no namespace and name: {metadata!r}"
            )
        found[(namespace, name)] = deployment_history(deployment)
    return found


@dataclass(frozen=True)
class IndexItem:
    """One listed index entry; `entry` is None when it could not be read (`problem` says why)."""

    location: EntryLocation
    entry: GoldenEntry | None = None
    problem: str = ""


@dataclass(frozen=True)
class Deletion:
    """A record to delete and why, in words for the log."""

    location: EntryLocation
    reason: str


def plan_retention(
    items: Sequence[IndexItem],
    histories: Mapping[tuple[str, str], DeploymentHistory],
    *,
    when_deleted: WhenDeleted,
    records_per_revision: int = 1,
) -> list[Deletion]:
    """The records to delete, in index order. `histories` is keyed by (namespace, name)."""
    if records_per_revision < 1:
        raise ValueError(
            f"recordsPerRevision: {records_per_revision} is not allowed; give at least 1"
        )
    deletions: list[Deletion] = []
    kept: list[IndexItem] = []
    for item in items:
        where = item.location
        history = histories.get((where.namespace, where.deployment))
        reason = _history_reason(where, history, when_deleted)
        if reason is None:
            kept.append(item)
        else:
            deletions.append(Deletion(where, reason))
    groups: dict[tuple[str, ...], list[tuple[EntryLocation, GoldenEntry]]] = defaultdict(list)
    for item in kept:
        if item.entry is None:
            continue
        entry = item.entry
        key = (
            entry.namespace,
            entry.deployment,
            entry.revision,
            entry.role.value,
            entry.suite_digest,
            entry.fingerprint,
        )
        groups[key].append((item.location, entry))
    superseded: dict[EntryLocation, str] = {}
    for members in groups.values():
        members.sort(key=lambda pair: (pair[1].created, pair[0].name.token), reverse=True)
        newest = members[0][0]
        for location, _ in members[records_per_revision:]:
            superseded[location] = (
                f"superseded: {records_per_revision} newer record(s) of revision "
                f"{location.name.revision} for the same suite and fingerprint, newest {newest.name}"
            )
    deletions += [
        Deletion(item.location, superseded[item.location])
        for item in kept
        if item.location in superseded
    ]
    order = {item.location: index for index, item in enumerate(items)}
    deletions.sort(key=lambda deletion: order[deletion.location])
    return deletions


def _history_reason(
    where: EntryLocation, history: DeploymentHistory | None, when_deleted: WhenDeleted
) -> str | None:
    if history is None:
        return None
    if not history.exists:
        if when_deleted is WhenDeleted.DELETE:
            return (
                f"InferenceDeployment {where.namespace}/{where.deployment} was deleted "
                "(retention.whenDeleted: Delete)"
            )
        return None
    if where.name.revision not in history.revisions:
        return (
            f"revision {where.name.revision} is no longer in the history of "
            f"{where.namespace}/{where.deployment} (revisionHistoryLimit)"
        )
    return None


@dataclass(frozen=True)
class RetentionScope:
    """What retention may act on: the entries of the deployments whose state is known,
    their histories, and the deployments left alone with the reason."""

    items: list[IndexItem]
    histories: dict[DeploymentKey, DeploymentHistory]
    left_alone: dict[DeploymentKey, str]


NO_REVISION_YET = "it exists but its status lists no revision yet"


def scope_retention(
    items: Sequence[IndexItem],
    listed: Mapping[DeploymentKey, DeploymentHistory] | None,
    *,
    namespaces: Collection[str] | None,
    known: Mapping[DeploymentKey, DeploymentHistory] | None = None,
) -> RetentionScope:
    """The deployments of the index `plan_retention` is told about, and their entries.

    `listed`: the InferenceDeployments a listing returned, or None when it failed;
    `namespaces`: the namespaces that listing covered whole (None: every namespace);
    `known`: histories read one by one (a `get`), used whatever the listing says.

    A deployment of the index is deleted (`exists=False`) only when a successful listing
    covered its namespace and did not return it. It is left alone, its entries out of
    scope (nothing of it is deleted, not even superseded records), when the listing
    failed, when its namespace was not listed, or when it exists but lists no revision yet
    (just created, or re-created under an old name): its history would otherwise delete
    every record it has.
    """
    known = known or {}
    histories: dict[DeploymentKey, DeploymentHistory] = {}
    left_alone: dict[DeploymentKey, str] = {}
    for item in items:
        key = (item.location.namespace, item.location.deployment)
        if key in histories or key in left_alone:
            continue
        if key in known:
            histories[key] = known[key]
        elif listed is None:
            left_alone[key] = "the InferenceDeployments could not be listed"
        elif namespaces is not None and key[0] not in namespaces:
            left_alone[key] = f"namespace {key[0]} was not listed"
        elif key not in listed:
            histories[key] = DeploymentHistory(exists=False)
        elif listed[key].exists and not listed[key].revisions:
            left_alone[key] = NO_REVISION_YET
        else:
            histories[key] = listed[key]
    return RetentionScope(
        items=[
            item
            for item in items
            if (item.location.namespace, item.location.deployment) in histories
        ],
        histories=histories,
        left_alone=left_alone,
    )


def plan_orphans(
    record_blobs: Iterable[tuple[EntryLocation, datetime]],
    indexed: Iterable[EntryLocation],
    *,
    now: datetime,
    grace: timedelta,
) -> list[EntryLocation]:
    """Records with no index entry whose newest blob is older than `grace`.

    Such a record was left by a writer that stopped before its entry (a crash, a Failed
    check that could not clean up); younger ones may still be in the middle of a write.
    """
    newest: dict[EntryLocation, datetime] = {}
    for location, modified in record_blobs:
        if location not in newest or modified > newest[location]:
            newest[location] = modified
    listed = set(indexed)
    return sorted(
        (loc for loc, at in newest.items() if loc not in listed and now - at > grace),
        key=str,
    )
