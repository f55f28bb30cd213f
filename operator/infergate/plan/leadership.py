"""Leader election over a coordination.k8s.io Lease, decided on plain data (pure).

Two operator replicas run; only the holder of the Lease acts. The rules are
client-go's `leaderelection`: the holder renews every few seconds; a candidate takes
the Lease only once it has seen no renewal for a whole `leaseDurationSeconds`, timed
by its own clock from when it last saw the record change (so clocks that disagree
between machines do not matter); every write carries the resourceVersion it was
decided from, so of two candidates exactly one wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from infergate.jsontypes import JSON, JSONMap


class LeaseAction(StrEnum):
    CREATE = "create"
    """No Lease yet: create it holding it."""
    RENEW = "renew"
    """We hold it: move renewTime."""
    TAKE = "take"
    """Free or expired: write ourselves in (a transition)."""
    WAIT = "wait"
    """Someone else holds it and renews it: follow."""


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says."""

    holder: str | None
    duration_seconds: int
    renew_time: str | None
    transitions: int
    resource_version: str

    @property
    def generation_mark(self) -> tuple[str | None, str | None, str]:
        """What changes on every write: seeing it change means the holder is alive."""
        return self.holder, self.renew_time, self.resource_version


def lease_record(body: JSONMap | None) -> LeaseRecord | None:
    if body is None:
        return None
    spec = body.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
    )


def lease_action(
    lease: LeaseRecord | None, me: str, *, now: datetime, last_change_seen: datetime | None
) -> LeaseAction:
    """What this candidate does with the Lease now."""
    if lease is None:
        return LeaseAction.CREATE
    if lease.holder == me:
        return LeaseAction.RENEW
    if lease.holder is None:
        return LeaseAction.TAKE
    seen = last_change_seen if last_change_seen is not None else now
    if now - seen >= timedelta(seconds=max(lease.duration_seconds, 1)):
        return LeaseAction.TAKE
    return LeaseAction.WAIT


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(
    me: str, *, duration_seconds: int, now: datetime, previous: LeaseRecord | None
) -> JSON:
    """The Lease spec that says `me` holds it (a renewal keeps the acquire time)."""
    renewing = previous is not None and previous.holder == me
    spec: JSON = {
        "holderIdentity": me,
        "leaseDurationSeconds": duration_seconds,
        "renewTime": _micro(now),
        "leaseTransitions": 0
        if previous is None
        else previous.transitions + (0 if renewing else 1),
    }
    if not renewing:
        spec["acquireTime"] = _micro(now)
    return spec


def election_pause(
    *, leading: bool, renewed: bool, renew_seconds: float, retry_seconds: float
) -> float:
    """Seconds until the next round of the election: a holder that just renewed waits the
    renewal period; a holder whose renewal failed, and a candidate, retry sooner."""
    if leading and renewed:
        return renew_seconds
    return retry_seconds
