"""Leader election over a coordination.k8s.io Lease, decided on plain data (pure).

Two operator replicas run; only the holder of the Lease acts. The rules are
client-go's `leaderelection`: the holder renews every few seconds; a candidate takes
the Lease only once it has seen no renewal for a whole `leaseDurationSeconds`, timed
by its own monotonic clock from when it last saw the record change (so clocks that
disagree between machines, or a wall clock that jumps, do not matter); every write
carries the resourceVersion it was decided from, so of two candidates exactly one wins.

Why an old leader cannot write after a new one started (`LeaderTiming`, and the fence of
`kube.fence`): the holder stamps each renewal with the monotonic time it *sent* it, and
may write until `renew_deadline` after that stamp. A candidate starts its count of
`lease_seconds` no earlier than it *read* that renewal, which is after it was sent, so
it takes the Lease no sooner than `lease_seconds` after the stamp. A write checked
against the deadline at time t is sent then and reaches the API server while the client
still waits for it, at most `write_request.longest` later, or never. So the last write of
the old holder lands before `stamp + renew_deadline + write_request.longest`, which
`timing_refusal` keeps strictly below `stamp + lease_seconds`, the earliest moment the
next holder exists. The assumptions: the two machines' clocks tick at about the same
rate (the margin left under `lease_seconds` absorbs drift), and nothing between this
process and the API server holds a request back and delivers it after this process gave
up on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
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
    lease: LeaseRecord | None, me: str, *, now: float, last_change_seen: float | None
) -> LeaseAction:
    """What this candidate does with the Lease now; `now` and `last_change_seen` are its
    own monotonic seconds, `last_change_seen` taken once the read that saw the change had
    answered (never before: the holder may have renewed while that read was under way)."""
    if lease is None:
        return LeaseAction.CREATE
    if lease.holder == me:
        return LeaseAction.RENEW
    if lease.holder is None:
        return LeaseAction.TAKE
    seen = last_change_seen if last_change_seen is not None else now
    if now - seen >= max(lease.duration_seconds, 1):
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


# -- timing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestTimeout:
    """How long one API request may take: its connect and read timeouts, and how many
    times a connection that could not be opened is tried (`kube.client`'s transport tries
    once more)."""

    connect: float
    read: float
    connect_attempts: int = 2

    @property
    def longest(self) -> float:
        """The longest this process waits for one request before giving it up."""
        return self.connect * self.connect_attempts + self.read

    @property
    def pair(self) -> tuple[float, float]:
        """(connect, read), as the API client takes them."""
        return self.connect, self.read


@dataclass(frozen=True)
class LeaderTiming:
    """The numbers of the election and of the write fence, and the order they keep:

        renew_seconds < renew_deadline_seconds
        lease_request.longest < renew_deadline_seconds
        renew_deadline_seconds + write_request.longest < lease_seconds

    A renewal is tried every `renew_seconds`; each try gives up within
    `lease_request.longest`, so several fit before the deadline, and the election thread is
    never stuck past it. The holder writes only until `renew_deadline_seconds` after the
    last renewal it sent, and a write gives up within `write_request.longest`: the last
    write lands before another replica may take the Lease (see the module's docstring).
    """

    lease_seconds: int = 15
    """How long a Lease not renewed keeps candidates waiting (`--lease-seconds`)."""
    renew_deadline_seconds: float = 8.0
    """How long after the last renewal it sent the holder still acts
    (`--renew-deadline-seconds`)."""
    renew_seconds: float = 2.0
    """How often the holder renews."""
    retry_seconds: float = 2.0
    """How often a candidate reads the Lease, and a holder whose renewal failed tries again."""
    lease_request: RequestTimeout = RequestTimeout(connect=1.0, read=2.0)
    """Each request of the election (read, create, renew, release)."""
    write_request: RequestTimeout = RequestTimeout(connect=1.0, read=4.0)
    """Each write of the operator (status, children, checks, Events)."""


DEFAULT_TIMING = LeaderTiming()
_FLAGS = {
    "lease_seconds": "--lease-seconds",
    "renew_deadline_seconds": "--renew-deadline-seconds",
}


def _name(field: str) -> str:
    """The command-line flag that sets `field`, else the field's own name."""
    return _FLAGS.get(field, field)


def timing_refusal(timing: LeaderTiming) -> str | None:
    """Why `timing` cannot fence the leader's writes (a message naming the flag or field at
    fault, its value and what it must be below), or None when it can."""
    positive = {
        "lease_seconds": timing.lease_seconds,
        "renew_deadline_seconds": timing.renew_deadline_seconds,
        "renew_seconds": timing.renew_seconds,
        "retry_seconds": timing.retry_seconds,
        "lease_request.connect": timing.lease_request.connect,
        "lease_request.read": timing.lease_request.read,
        "write_request.connect": timing.write_request.connect,
        "write_request.read": timing.write_request.read,
    }
    for field, value in positive.items():
        if not value > 0:
            return f"{_name(field)}: {value} is not allowed; give a positive number"
    deadline = timing.renew_deadline_seconds
    flag = _name("renew_deadline_seconds")
    if timing.renew_seconds >= deadline:
        return (
            f"{flag}: {deadline:g} must be above the renewal period ({timing.renew_seconds:g}s), "
            "or the holder never renews before its deadline"
        )
    if timing.lease_request.longest >= deadline:
        return (
            f"{flag}: {deadline:g} must be above the longest Lease request "
            f"({timing.lease_request.longest:g}s), or one stuck renewal outlives the deadline"
        )
    if deadline + timing.write_request.longest >= timing.lease_seconds:
        return (
            f"{_name('lease_seconds')}: {timing.lease_seconds} must be above "
            f"{flag} ({deadline:g}) plus the longest write request "
            f"({timing.write_request.longest:g}s), or a write of the old leader may land "
            f"after a new one took over: give --lease-seconds above "
            f"{deadline + timing.write_request.longest:g} or a lower {flag}"
        )
    return None
