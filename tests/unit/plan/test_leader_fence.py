"""A leader that lost its Lease writes nothing more: the write fence in front of every
write, the election loop that shuts it at the renewal deadline even while a renewal is
stuck, and the timeouts that keep each request inside the Lease's term."""

from __future__ import annotations

import argparse
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from infergate.commands import operator as operator_command
from infergate.controllers import _context, _leader
from infergate.controllers._leader import LeaderElection
from infergate.controllers._resync import Resyncer
from infergate.errors import ConflictError, NotLeaderError, RetriableKubeError
from infergate.kube.client import INFERENCE_DEPLOYMENTS, KubeClient
from infergate.kube.events import EventPoster
from infergate.kube.fence import WriteFence
from infergate.kube.lease import LeaseClient
from infergate.kube.writer import PlanWriter
from infergate.plan.leadership import DEFAULT_TIMING, LeaderTiming
from infergate.plan.metadata import OwnerKey
from tests.unit.plan.deployment.world import NAME, NAMESPACE, World

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
DEADLINE = DEFAULT_TIMING.renew_deadline_seconds


class FakeClock:
    """Monotonic seconds and the wall clock, moved by the test (or by a fake request)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)


class _Answer:
    def __init__(self, body: Any) -> None:
        self.status = 200
        self._data = json.dumps(body).encode()

    def read(self) -> bytes:
        return self._data


class RecordingApi:
    """Stands for the `kubernetes` ApiClient: records what was sent, with its timeout, and
    answers with the body sent (a resourceVersion added); `on_send` runs before answering."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []
        self.on_send: Any = None

    def param_serialize(
        self, *, method: str, resource_path: str, body: Any = None, **_: Any
    ) -> tuple[str, str, Any]:
        return method, resource_path, body

    def call_api(self, method: str, path: str, body: Any, *, _request_timeout: Any) -> _Answer:
        self.sent.append((method, path, _request_timeout))
        if self.on_send is not None:
            self.on_send(method, path)
        answer = dict(body or {})
        answer["metadata"] = {**(answer.get("metadata") or {}), "resourceVersion": "42"}
        return _Answer(answer)

    def close(self) -> None:
        pass


def _body() -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u", "resourceVersion": "41"},
        "spec": {},
    }


def _fenced_client(clock: FakeClock, valid_until: float) -> tuple[KubeClient, RecordingApi]:
    fence = WriteFence(clock.monotonic)
    fence.open_until(valid_until)
    api = RecordingApi()
    return KubeClient(api, write_timeout=DEFAULT_TIMING.write_request.pair, fence=fence), api


# -- the fence in front of the writer ------------------------------------------------------


def test_a_writer_writes_while_the_lease_is_valid_and_sends_nothing_once_it_lapsed() -> None:
    plan = World().reconcile()
    clock = FakeClock()
    client, api = _fenced_client(clock, valid_until=DEADLINE)
    clock.seconds = DEADLINE - 0.001
    PlanWriter(client, NAMESPACE, NAME).write(plan, _body())
    assert [method for method, _, _ in api.sent][:1] == ["PUT"]  # the status first
    assert len(api.sent) > 1
    api.sent.clear()

    clock.seconds = DEADLINE  # valid_until passed: no renewal since
    with pytest.raises(NotLeaderError):
        PlanWriter(client, NAMESPACE, NAME).write(plan, _body())
    assert api.sent == []
    # Reads are not fenced: a follower keeps reading.
    client.get(INFERENCE_DEPLOYMENTS, NAMESPACE, NAME)
    assert [method for method, _, _ in api.sent] == ["GET"]


def test_a_reconcile_whose_lease_lapses_mid_write_sends_nothing_after_that() -> None:
    """The status write goes; while it is under way the deadline passes: not one child."""
    plan = World().reconcile()
    clock = FakeClock()
    client, api = _fenced_client(clock, valid_until=DEADLINE)

    def slow_status(method: str, path: str) -> None:
        if path.endswith("/status"):
            clock.seconds = DEADLINE + 1

    api.on_send = slow_status
    with pytest.raises(NotLeaderError):
        PlanWriter(client, NAMESPACE, NAME).write(plan, _body())
    assert [(method, path.rsplit("/", 1)[-1]) for method, path, _ in api.sent] == [
        ("PUT", "status")
    ]


def test_the_writes_of_the_operator_end_within_the_lease_and_reads_keep_their_timeout() -> None:
    clock = FakeClock()
    client, api = _fenced_client(clock, valid_until=DEADLINE)
    client.merge_patch(INFERENCE_DEPLOYMENTS, NAMESPACE, NAME, {"metadata": {}})
    client.get(INFERENCE_DEPLOYMENTS, NAMESPACE, NAME)
    [(_, _, write), (_, _, read)] = api.sent
    assert write == (1.0, 4.0)
    connect, answer = write
    assert DEADLINE + connect * 2 + answer < DEFAULT_TIMING.lease_seconds
    assert read == 30.0


def test_the_process_client_is_fenced_by_the_leader_and_bounded_by_its_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: dict[str, Any] = {}

    def from_environment(kubeconfig: str | None, **kwargs: Any) -> KubeClient:
        made.update(kwargs)
        return KubeClient(RecordingApi(), **kwargs)

    monkeypatch.setattr(_context, "_client", None)
    monkeypatch.setattr(KubeClient, "from_environment", staticmethod(from_environment))
    _context.client()
    assert made["fence"] is _leader.LEADER.fence
    assert made["write_timeout"] == _leader.LEADER.timing.write_request.pair


def test_the_lease_requests_are_never_fenced_and_end_before_the_renewal_deadline() -> None:
    fence = WriteFence()
    fence.retire()
    api = RecordingApi()
    leases = LeaseClient(KubeClient(api, fence=fence), "ops", "infergate-operator")
    leases.create({"holderIdentity": "me"})
    leases.read()
    [(_, _, create), (_, _, read)] = api.sent
    assert create == read == DEFAULT_TIMING.lease_request.pair
    connect, answer = create
    assert connect * 2 + answer < DEADLINE


# -- the election loop ---------------------------------------------------------------------


class StallingLease:
    """One Lease held by one replica; once `stall()`ed, every request blocks until
    `give_up()`, then fails as a timed-out request does."""

    def __init__(self, clock: FakeClock, *, delay: float = 0.0) -> None:
        self.clock = clock
        self.delay = delay
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.stalled = False
        self.entered = threading.Event()
        self.released = threading.Event()

    def stall(self) -> None:
        self.stalled = True

    def give_up(self) -> None:
        self.released.set()

    def _request(self) -> None:
        if self.stalled:
            self.entered.set()
            self.released.wait(10)
            raise RetriableKubeError("PUT Lease: no answer: read timed out")
        self.clock.seconds += self.delay

    def read(self) -> dict[str, Any] | None:
        self._request()
        return self.body

    def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        self._request()
        return self._store(spec)

    def write(self, current: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        self._request()
        assert self.body is not None
        if current["metadata"]["resourceVersion"] != self.body["metadata"]["resourceVersion"]:
            raise ConflictError("stale", status=409)
        return self._store({**self.body["spec"], **spec})

    def _store(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.body = {"metadata": {"resourceVersion": str(self.version)}, "spec": spec}
        return self.body


def _election(clock: FakeClock) -> LeaderElection:
    # Fast rounds in real time; the deadline is timed by the fake clock.
    timing = LeaderTiming(renew_seconds=0.01, retry_seconds=0.01)
    return LeaderElection(identity="a", timing=timing, clock=clock.monotonic, wall=clock.wall)


def test_a_leader_whose_renewals_stall_stops_leading_at_the_deadline_not_later() -> None:
    clock = FakeClock()
    leases = StallingLease(clock)
    election = _election(clock)
    led = threading.Event()
    loop = threading.Thread(target=election.run_blocking, args=(leases, led.set), daemon=True)
    loop.start()
    try:
        assert led.wait(5)
        assert election.leading
        assert REGISTRY.get_sample_value("infergate_leader") == 1
        leases.stall()
        assert leases.entered.wait(5)  # a renewal is stuck in its request, sent at 0

        clock.seconds = DEADLINE - 0.001
        assert election.leading
        with election.fence.write("PATCH Deployment a/b"):
            pass
        clock.seconds = DEADLINE
        # The loop is still stuck in the renewal; leadership lapsed all the same.
        assert loop.is_alive()
        assert not election.stop.is_set()
        assert not election.leading
        with pytest.raises(NotLeaderError), election.fence.write("PATCH Deployment a/b"):
            pass

        leases.give_up()
        assert election.stop.wait(5)  # the process stops, to restart as a follower
        loop.join(5)
        assert not loop.is_alive()
        assert REGISTRY.get_sample_value("infergate_leader") == 0
        leases.stalled = False
        clock.seconds = DEADLINE + 100
        # A renewal that got through after all does not reopen a retired fence.
        election.fence.open_until(clock.seconds + DEADLINE)
        assert not election.leading
    finally:
        leases.give_up()
        election.close()


def test_a_renewal_counts_from_when_it_was_sent_not_from_when_it_was_answered() -> None:
    clock = FakeClock()
    clock.seconds = 100.0
    leases = StallingLease(clock, delay=3.0)  # every request takes 3 seconds
    election = _election(clock)
    assert election.step(leases)  # type: ignore[arg-type]
    sent = 100.0 + 3.0  # after the read; the create then took 3 more seconds
    assert clock.seconds == sent + 3.0
    assert election.fence.valid_until == sent + DEADLINE


def test_a_candidate_counts_the_term_from_when_its_read_answered() -> None:
    """The holder may renew while a slow read is under way: the candidate's count starts
    once it has the answer, so it never takes the Lease early by that read's length."""
    clock = FakeClock()
    leases = StallingLease(clock)
    holder = _election(clock)
    assert holder.step(leases)  # type: ignore[arg-type]
    candidate = LeaderElection(identity="b", clock=clock.monotonic, wall=clock.wall)
    leases.delay = 3.0
    clock.seconds = 10.0
    assert not candidate.step(leases)  # type: ignore[arg-type]  # answered at 13
    leases.delay = 0.0
    clock.seconds = 13.0 + DEFAULT_TIMING.lease_seconds - 0.001
    assert not candidate.step(leases)  # type: ignore[arg-type]
    clock.seconds = 13.0 + DEFAULT_TIMING.lease_seconds
    assert candidate.step(leases)  # type: ignore[arg-type]


def test_a_clean_release_waits_for_the_writes_under_way_before_freeing_the_lease() -> None:
    clock = FakeClock()
    leases = StallingLease(clock)
    election = _election(clock)
    assert election.step(leases)  # type: ignore[arg-type]
    order: list[str] = []
    inside, finish = threading.Event(), threading.Event()

    def one_write() -> None:
        with election.fence.write("POST Deployment a/b"):
            inside.set()
            finish.wait(5)
            order.append("write ended")

    writer = threading.Thread(target=one_write)
    writer.start()
    assert inside.wait(5)
    released = threading.Thread(target=election.release, args=(leases,))
    released.start()
    released.join(0.2)
    assert released.is_alive()  # waiting for the write
    with pytest.raises(NotLeaderError), election.fence.write("POST Service a/b"):
        pass  # no new write starts meanwhile
    finish.set()
    writer.join(5)
    released.join(5)
    assert leases.body is not None
    order.append(f"released to {leases.body['spec']['holderIdentity']!r}")
    assert order == ["write ended", "released to ''"]


# -- what a refused write means to the rest of the operator ------------------------------------


def test_a_refused_write_stops_the_reconcile_with_no_retry() -> None:
    async def reconcile(_: OwnerKey) -> float | None:
        return None

    resyncer = Resyncer(reconcile, 60.0)
    key = OwnerKey(NAMESPACE, NAME)
    resyncer.failed(key, NotLeaderError("PUT InferenceDeployment: not sent"))
    assert resyncer._hold == {}
    assert resyncer._failures == {}


def test_an_event_refused_for_want_of_leadership_is_dropped_and_the_poster_goes_on() -> None:
    # The first Event is asked for past the deadline, the second (a renewal came) before it.
    times = iter([DEADLINE, 0.0])
    fence = WriteFence(lambda: next(times))
    fence.open_until(DEADLINE)
    api = RecordingApi()
    poster = EventPoster(KubeClient(api, fence=fence))
    involved = {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u"}}
    involved |= {"apiVersion": "infergate.io/v1alpha1", "kind": "InferenceDeployment"}
    poster.post(involved, warning=False, reason="Refused", message="not sent")
    poster.post(involved, warning=False, reason="Sent", message="sent")
    poster.close()
    assert [method for method, _, _ in api.sent] == ["POST"]


# -- the flags ---------------------------------------------------------------------------------


def _operator_args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    operator_command.register(parser.add_subparsers())
    return parser.parse_args(["operator", "--leader-election", *flags])


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        ((), None),
        (("--lease-seconds=30", "--renew-deadline-seconds=20"), None),
        (("--lease-seconds=10",), "--lease-seconds: 10 must be above"),
        (("--renew-deadline-seconds=12",), "--lease-seconds: 15 must be above"),
        (("--renew-deadline-seconds=3",), "--renew-deadline-seconds: 3 must be above"),
    ],
)
def test_the_operator_refuses_leader_flags_that_cannot_fence_its_writes(
    monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], refusal: str | None
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "infergate-system")
    monkeypatch.setattr(_context, "OPTIONS", _context.OperatorOptions())
    election = LeaderElection()
    monkeypatch.setattr(_leader, "LEADER", election)
    found = operator_command._set_options(_operator_args(*flags))
    if refusal is None:
        assert found is None
        assert not election.leading  # it follows until it holds the Lease
    else:
        assert found is not None
        assert found.startswith(refusal), found
        assert election.leading  # nothing was set
        assert election.timing == DEFAULT_TIMING
