"""Service creates and deletes go to a queue a reconcile does not wait for: sent once
while queued, failures reported with their owner."""

from __future__ import annotations

import threading
from typing import Any

from infergate.errors import RetriableKubeError
from infergate.kube.background import BackgroundWrites, QueuedWrite
from infergate.kube.writer import PlanWriter
from tests.unit.plan.deployment.test_kube_boundary import FakeClient, _body
from tests.unit.plan.deployment.world import NAME, NAMESPACE, World


class HeldServices(FakeClient):
    """Service creates wait until `release` is set; everything else answers at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def create(self, resource: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if resource.kind == "Service":
            assert self.release.wait(10), "the Service create was never released"
        return super().create(resource, namespace, body)


def test_a_reconcile_does_not_wait_for_its_service_creates() -> None:
    world = World()
    plan = world.reconcile()
    client = HeldServices()
    queue = BackgroundWrites(workers=2)
    result = PlanWriter(client, NAMESPACE, NAME, background=queue).write(plan, _body())  # type: ignore[arg-type]
    # Returned while both Service creates are still held: only they are left behind.
    assert sorted(result.queued) == sorted(
        f"create Service {w.ref.name}" for w in plan.sync.writes if w.ref.kind == "Service"
    )
    assert [kind for verb, kind, _ in client.calls if verb == "create"] == [
        "ConfigMap",
        "Deployment",
    ]
    assert queue.queued() == 2
    # Planned again before they were sent (a wake-up meanwhile): not queued twice.
    PlanWriter(client, NAMESPACE, NAME, background=queue).write(plan, _body())  # type: ignore[arg-type]
    client.release.set()
    queue.close()
    services = [name for verb, kind, name in client.calls if (verb, kind) == ("create", "Service")]
    assert sorted(services) == sorted(
        w.ref.name for w in plan.sync.writes if w.ref.kind == "Service"
    )
    assert queue.queued() == 0


def test_a_failed_background_write_is_reported_with_its_owner_and_can_be_queued_again() -> None:
    failures: list[tuple[QueuedWrite, Exception]] = []
    reported = threading.Event()

    def failed(write: QueuedWrite, error: Exception) -> None:
        failures.append((write, error))
        reported.set()

    queue = BackgroundWrites(workers=1, on_failed=failed)
    write = QueuedWrite("create", "Service", NAMESPACE, f"{NAME}-abc", NAME)
    busy = RetriableKubeError("busy", status=503)

    def refused() -> None:
        raise busy

    assert queue.submit(write, refused)
    # One thread: once the next write runs, the failed one has ended.
    after = threading.Event()
    assert queue.submit(QueuedWrite("delete", "Service", NAMESPACE, "old", NAME), after.set)
    assert after.wait(10)
    assert reported.is_set()
    assert failures == [(write, busy)]
    # The next reconcile plans it anew, and it is queued again.
    sent = threading.Event()
    assert queue.submit(write, sent.set)
    assert sent.wait(10)
    queue.close()
    assert queue.queued() == 0
