"""Two operator replicas as processes of the test, each behind its own fault proxy
(fault_proxy.py), so every request each one makes is seen with its time on one clock.

- A partition of the leader's Lease traffic: its renewals are held and never forwarded
  while the process stays alive and its other requests pass, and a user keeps changing
  the deployment meanwhile. The old leader's last write has landed before the new
  leader's first write is sent: the old one stopped at its renewal deadline, well before
  the Lease could expire.
- Failover after SIGKILL and after SIGTERM of the leader, measured and printed; asserted
  only to happen within a generous bound (the Lease's term after SIGKILL, its release
  after SIGTERM, each with ample room).

The installed replicas are scaled to 0 meanwhile, so exactly the processes under test act.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from infergate.plan.leadership import DEFAULT_TIMING
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import (
    Idep,
    deployment_manifest,
    idep_namespace,
    operator,
)
from tests.integration.fault_proxy import Exchange, Partition
from tests.integration.fault_support import (
    LocalOperator,
    Rig,
    assert_no_duplicates,
    installed_stopped,
    rig,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
__all__ = ["idep_namespace", "installed_stopped", "operator", "rig"]
LEASE = "infergate-operator"
# Generous: a failover that takes longer did not happen as designed at all.
FAILOVER_BOUND = DEFAULT_TIMING.lease_seconds * 4


def _report(line: str) -> None:
    print(f"failover figures: {line}")  # noqa: T201 - the figures, for the record


def _lease_traffic(exchange: Exchange) -> bool:
    return "/leases" in exchange.path


def _writes(replica: LocalOperator) -> list[Exchange]:
    """The replica's writes the API server answered (so landed or refused there), but its
    bids for the Lease."""
    return [
        e
        for e in replica.proxy.exchanges()
        if e.write and not _lease_traffic(e) and not e.injected and e.answered
    ]


def _holder(cluster: Cluster, namespace: str) -> str | None:
    found = cluster.kubectl(
        "get", "lease", LEASE, "-n", namespace, "-o", "json", check=False
    )  # fmt: skip
    if found.returncode != 0:
        return None
    return json.loads(found.stdout)["spec"].get("holderIdentity") or None


def _two_replicas(cluster: Cluster, rig: Rig) -> tuple[LocalOperator, LocalOperator]:
    """Two replicas, each behind a proxy of its own: (the leader, the follower)."""
    cluster.kubectl("delete", "lease", LEASE, "-n", rig.install.namespace, "--ignore-not-found")
    replicas = [rig.operator(rig.proxy(), f"replica-{i}", leader_election=True) for i in (0, 1)]
    held = wait_for(
        lambda: _holder(cluster, rig.install.namespace), 90, "a replica holding the Lease"
    )
    [leader] = [r for r in replicas if held.startswith(f"{r.name}_")]
    [follower] = [r for r in replicas if r is not leader]
    wait_for(lambda: leader.metric("infergate_leader") == 1.0 or None, 30, "the leader's gauge")
    return leader, follower


class Churn:
    """A user scaling the deployment back and forth about once a second: every change is a
    status write and a Deployment patch for whoever leads."""

    def __init__(self, idep: Idep) -> None:
        self.idep = idep
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.changes = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.idep.apply(replicas=2 + self.changes % 2)
            self.changes += 1
            self._stop.wait(1.0)

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_leader_cut_off_from_its_lease_stops_writing_before_the_new_leader_starts(
    cluster: Cluster, rig: Rig, idep_namespace: str
) -> None:
    # A scale is no new revision: the writes are status and the stable Deployment's size.
    idep = Idep(cluster, idep_namespace, deployment_manifest(parity=False))
    leader, follower = _two_replicas(cluster, rig)
    idep.apply()
    stable = idep.wait_stable(timeout=90)
    assert _writes(follower) == []

    partition = Partition(matches=_lease_traffic)
    leader.proxy.partitions.append(partition)
    with Churn(idep) as churn:
        partition.start()
        cut_at = partition.started
        assert cut_at is not None
        took_over = wait_for(
            lambda: (
                (_holder(cluster, rig.install.namespace) or "").startswith(f"{follower.name}_")
                or None
            ),
            FAILOVER_BOUND,
            "the follower holding the Lease",
        )
        assert took_over
        taken_at = time.monotonic()
        first_new = wait_for(
            lambda: next(iter(_writes(follower)), None), 60, "the new leader's first write"
        )
        time.sleep(3)  # a few more changes, for both to act on
    assert partition.held, "no request of the leader's Lease was held"
    assert churn.changes > 5

    old = _writes(leader)
    during = [e for e in old if e.at >= cut_at]
    assert during, "the old leader wrote nothing once cut off: the test showed nothing"
    last_old = max(old, key=lambda e: e.answered)
    # The old leader's last write was answered (so had landed) before the new leader sent
    # its first: they never wrote at the same time.
    assert last_old.answered < first_new.at, (
        f"the old leader's {last_old.method} {last_old.path} was answered "
        f"{last_old.answered - cut_at:.2f}s after the cut, the new leader's first write "
        f"{first_new.method} {first_new.path} sent {first_new.at - cut_at:.2f}s after it"
    )
    # It stopped by its renewal deadline (counted from its last renewal, before the cut).
    deadline = DEFAULT_TIMING.renew_deadline_seconds
    assert max(e.at for e in old) < cut_at + deadline + 1.0
    # Nothing of the old leader's (but its Lease requests) reached the API server after.
    late = [e for e in leader.proxy.exchanges() if e.write and e.at > cut_at + deadline + 1.0]
    assert all(_lease_traffic(e) for e in late), [f"{e.method} {e.path}" for e in late]
    wait_for(
        lambda: (leader.process is not None and leader.process.poll() is not None) or None,
        60,
        "the old leader stopping (to restart as a follower)",
    )
    assert "leadership lost" in leader.log()
    assert_no_duplicates(idep, {stable}, None)
    _report(
        f"partition of the Lease: old leader's last write landed "
        f"{last_old.answered - cut_at:.1f}s after the cut ({len(during)} writes meanwhile), "
        f"the Lease taken {taken_at - cut_at:.1f}s after it, the new leader's first write "
        f"{first_new.at - cut_at:.1f}s after it (gap {first_new.at - last_old.answered:.1f}s)"
    )


def _failover(
    cluster: Cluster, namespace: str, follower: LocalOperator, since: float
) -> tuple[float, float]:
    """(seconds to the follower holding the Lease, to its first write), from `since`."""
    wait_for(
        lambda: (_holder(cluster, namespace) or "").startswith(f"{follower.name}_") or None,
        FAILOVER_BOUND,
        f"{follower.name} holding the Lease",
    )
    held = time.monotonic() - since
    first = wait_for(
        lambda: next((e for e in _writes(follower) if e.at >= since), None),
        FAILOVER_BOUND,
        f"{follower.name}'s first write",
    )
    return held, first.at - since


def test_failover_after_sigkill_and_after_sigterm_of_the_leader(
    cluster: Cluster, rig: Rig, idep_namespace: str
) -> None:
    namespace = rig.install.namespace
    idep = Idep(cluster, idep_namespace, deployment_manifest(parity=False))
    leader, follower = _two_replicas(cluster, rig)
    idep.apply()
    stable = idep.wait_stable(timeout=90)

    # SIGKILL: nothing is released; the follower waits out the Lease's term.
    killed = time.monotonic()
    leader.kill()
    idep.apply(replicas=3)  # something for the new leader to write
    kill_held, kill_wrote = _failover(cluster, namespace, follower, killed)
    # Not a speed figure: the follower must have waited out the term from the last renewal
    # it read (at most a renewal period and a read before the kill).
    floor = DEFAULT_TIMING.lease_seconds - DEFAULT_TIMING.renew_seconds - 1
    assert kill_held >= floor
    assert kill_held < FAILOVER_BOUND

    # A new follower; then SIGTERM: the leader gives the Lease up as it stops.
    leader, follower = follower, rig.operator(rig.proxy(), "replica-2", leader_election=True)
    wait_for(lambda: follower.metric("infergate_leader") == 0.0 or None, 60, "a new follower")
    terminated = time.monotonic()
    leader.stop()
    idep.apply(replicas=2)
    term_held, term_wrote = _failover(cluster, namespace, follower, terminated)
    assert term_held < FAILOVER_BOUND
    assert_no_duplicates(idep, {stable}, None)
    _report(
        f"after SIGKILL: Lease held by the follower {kill_held:.1f}s later, first write "
        f"{kill_wrote:.1f}s (Lease {DEFAULT_TIMING.lease_seconds}s); after SIGTERM: "
        f"{term_held:.1f}s, first write {term_wrote:.1f}s"
    )
