"""The API boundary without a server: error mapping, the writer's order and idempotence,
Event manifests, the resync schedule, and which handler modules the operator loads (and,
against a stub on loopback, that the transport retries nothing on its own)."""

from __future__ import annotations

import asyncio
import http.server
import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from infergate.controllers import handler_modules, load_handlers
from infergate.controllers._resync import Resyncer
from infergate.errors import (
    AlreadyExistsError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PermanentKubeError,
    RetriableKubeError,
    StaleObjectError,
    error_for_status,
    parse_retry_after,
)
from infergate.kube.client import (
    DEPLOYMENTS,
    INFERENCE_DEPLOYMENTS,
    SERVICES,
    KubeClient,
    convert_error,
)
from infergate.kube.events import event_manifest
from infergate.kube.writer import PlanWriter
from infergate.plan.deployment.sync import Create, Delete, ObjectRef, Update
from infergate.plan.metadata import OwnerKey
from infergate.retry import RetryPolicy, retry_call
from tests.unit.plan.deployment.world import NAME, NAMESPACE, World


def _api_error(status: int, message: str = "nope") -> ApiException:
    error = ApiException(status=status, reason="Reason")
    error.body = json.dumps({"message": message})
    return error


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (409, ConflictError),
        (429, RetriableKubeError),
        (500, RetriableKubeError),
        (503, RetriableKubeError),
        (404, NotFoundError),
        (403, ForbiddenError),
        (422, PermanentKubeError),
        (400, PermanentKubeError),
    ],
)
def test_api_errors_map_to_retriable_or_permanent(status: int, kind: type[Exception]) -> None:
    error = convert_error(_api_error(status, "field is immutable"), "PATCH", "Deployment a/b")
    assert type(error) is kind
    assert str(error) == f"PATCH Deployment a/b: {status} field is immutable"
    retriable = status in (409, 429) or status >= 500
    assert isinstance(error, RetriableKubeError) is retriable


def test_resource_paths() -> None:
    assert DEPLOYMENTS.path("ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
    assert SERVICES.path("ns") == "/api/v1/namespaces/ns/services"
    assert (
        INFERENCE_DEPLOYMENTS.path("ns", "q", "status")
        == "/apis/infergate.io/v1alpha1/namespaces/ns/inferencedeployments/q/status"
    )
    assert (
        INFERENCE_DEPLOYMENTS.every_namespace()
        == "/apis/infergate.io/v1alpha1/inferencedeployments"
    )
    assert SERVICES.every_namespace() == "/api/v1/services"


class FakeClient:
    """Records requests; answers from a script of errors by (verb, name)."""

    def __init__(self, failures: dict[tuple[str, str], Exception] | None = None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.patches: list[Any] = []
        self.failures = failures or {}

    def _do(self, verb: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
        assert namespace == NAMESPACE
        self.calls.append((verb, kind, name))
        failure = self.failures.get((verb, name))
        if failure is not None:
            raise failure
        return {}

    def create(self, resource: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._do("create", resource.kind, body["metadata"]["name"], namespace)

    def merge_patch(
        self, resource: Any, namespace: str, name: str, patch: Any, **_: Any
    ) -> dict[str, Any]:
        self.patches.append(patch)
        return self._do("patch", resource.kind, name, namespace)

    def replace_status(self, resource: Any, namespace: str, name: str, body: Any) -> dict[str, Any]:
        assert body["metadata"]["resourceVersion"] == "41"
        return self._do("status", resource.kind, name, namespace)

    def delete(self, resource: Any, namespace: str, name: str, **_: Any) -> None:
        self._do("delete", resource.kind, name, namespace)


def _body() -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u", "resourceVersion": "41"},
        "spec": {},
    }


def test_writer_commits_status_first_then_children() -> None:
    world = World()
    plan = world.reconcile()
    client = FakeClient()
    PlanWriter(client, NAMESPACE, NAME).write(plan, _body())  # type: ignore[arg-type]
    verbs = [verb for verb, _, _ in client.calls]
    assert verbs[0] == "status"
    kinds = [kind for verb, kind, _ in client.calls if verb == "create"]
    assert kinds == ["ConfigMap", "Deployment", "Service", "Service"]


def test_a_stale_status_write_stops_the_whole_write() -> None:
    world = World()
    plan = world.reconcile()
    client = FakeClient({("status", NAME): ConflictError("stale", status=409)})
    with pytest.raises(ConflictError):
        PlanWriter(client, NAMESPACE, NAME).write(plan, _body())  # type: ignore[arg-type]
    assert len(client.calls) == 1


def test_a_stale_status_write_is_told_apart_from_a_child_conflict() -> None:
    world = World()
    plan = world.reconcile()
    client = FakeClient({("status", NAME): ConflictError("stale", status=409)})
    with pytest.raises(StaleObjectError):
        PlanWriter(client, NAMESPACE, NAME).write(plan, _body())  # type: ignore[arg-type]
    canary = f"{NAME}-{plan.status.revisions[0].hash}"
    client = FakeClient({("create", canary): ConflictError("taken", status=409)})
    with pytest.raises(ConflictError) as raised:
        PlanWriter(client, NAMESPACE, NAME).write(plan, _body())  # type: ignore[arg-type]
    assert not isinstance(raised.value, StaleObjectError)


class MeetingClient(FakeClient):
    """Every create waits until all `parties` creates have been sent: written one after
    another, the first would wait for the others in vain (BrokenBarrierError)."""

    def __init__(self, parties: int, failures: dict[tuple[str, str], Exception]) -> None:
        super().__init__(failures)
        self.meeting = threading.Barrier(parties, timeout=10)

    def create(self, resource: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.meeting.wait()
        return super().create(resource, namespace, body)


def test_a_canarys_children_are_written_at_once_and_every_one_is_tried() -> None:
    world = World()
    plan = world.reconcile()
    creates = [w for w in plan.sync.writes if type(w).__name__ == "Create"]
    assert len(creates) == 4  # ConfigMap, Deployment, its Service, the stable Service
    deployment = next(w.ref.name for w in creates if w.ref.kind == "Deployment")
    broken = RetriableKubeError("busy", status=503)
    client = MeetingClient(len(creates), {("create", NAME): broken})
    with ThreadPoolExecutor(max_workers=8) as pool:
        writer = PlanWriter(client, NAMESPACE, NAME, pool=pool)  # type: ignore[arg-type]
        with pytest.raises(RetriableKubeError):
            writer.write(plan, _body())  # type: ignore[arg-type]
    assert ("status", "InferenceDeployment", NAME) in client.calls
    # The failing Service create did not keep the others from being sent.
    assert sorted(kind for verb, kind, _ in client.calls if verb == "create") == [
        "ConfigMap", "Deployment", "Service", "Service",
    ]  # fmt: skip
    assert ("create", "Deployment", deployment) in client.calls

    client = MeetingClient(len(creates), {})
    with ThreadPoolExecutor(max_workers=8) as pool:
        result = PlanWriter(client, NAMESPACE, NAME, pool=pool).write(plan, _body())  # type: ignore[arg-type]
    # Reported in plan order, whatever order the answers came in.
    assert result.created == [str(w.ref) for w in creates]


def test_repeated_creates_and_deletes_count_as_done() -> None:
    world = World()
    plan = world.reconcile()
    failures: dict[tuple[str, str], Exception] = {
        ("create", name): AlreadyExistsError("exists", status=409, reason="AlreadyExists")
        for name in (f"{NAME}-{plan.status.revisions[0].hash}", NAME)
    }
    result = PlanWriter(FakeClient(failures), NAMESPACE, NAME).write(plan, _body())  # type: ignore[arg-type]
    assert result.created == []
    world.status = type(world.status)()
    gone = NotFoundError("gone", status=404)
    client = FakeClient({("delete", "anything"): gone})
    PlanWriter(client, NAMESPACE, NAME)._delete("Deployment", "anything")
    assert client.calls == [("delete", "Deployment", "anything")]


class HeldNamesClient(FakeClient):
    """Answers AlreadyExists for names in `held`, and a GET with the object holding each."""

    def __init__(self, held: dict[str, dict[str, Any]]) -> None:
        exists = AlreadyExistsError("exists", status=409, reason="AlreadyExists")
        super().__init__({("create", name): exists for name in held})
        self.held = held

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        self._do("get", resource.kind, name, namespace)
        return self.held[name]


def test_a_create_tells_whose_object_holds_the_name_and_frees_it_once_made() -> None:
    world = World()
    plan = world.reconcile()
    revision = f"{NAME}-{plan.status.revisions[0].hash}"
    ours = next(w.manifest for w in plan.sync.writes if w.ref == ObjectRef("Service", revision))
    held = {
        # Someone's own Service under the stable Service's name, with no owner at all.
        NAME: {"kind": "Service", "metadata": {"name": NAME}},
        # An earlier write of ours (a repeated create after a stale read): not taken.
        revision: ours,
    }
    said: list[tuple[str, str | None]] = []
    writer = PlanWriter(HeldNamesClient(held), NAMESPACE, NAME,  # type: ignore[arg-type]
                        on_name=lambda ref, holder: said.append((ref, holder)))  # fmt: skip
    writer.write(plan, _body())  # type: ignore[arg-type]
    assert (f"Service {NAME}", "it has no controller") in said
    assert (f"Service {revision}", None) in said
    config_map = next(str(w.ref) for w in plan.sync.writes if w.ref.kind == "ConfigMap")
    assert (config_map, None) in said  # created: its name is ours

    held = {NAME: {"kind": "Service", "metadata": {"name": NAME, "ownerReferences": [
        {"kind": "Deployment", "name": "web", "uid": "w1", "controller": True}]}}}  # fmt: skip
    said.clear()
    PlanWriter(HeldNamesClient(held), NAMESPACE, NAME,  # type: ignore[arg-type]
               on_name=lambda ref, holder: said.append((ref, holder))).write(plan, _body())  # type: ignore[arg-type]  # fmt: skip
    assert (f"Service {NAME}", "its controller is Deployment web (uid w1)") in said


def test_event_manifest_names_the_object_and_cuts_long_messages() -> None:
    manifest = event_manifest(
        _body(), warning=True, reason="DriftReverted", message="x" * 5000,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    assert manifest["apiVersion"] == "events.k8s.io/v1"
    assert manifest["type"] == "Warning"
    assert manifest["regarding"]["kind"] == "InferenceDeployment"
    assert manifest["regarding"]["uid"] == "u"
    assert manifest["eventTime"] == "2026-01-01T00:00:00.000000Z"
    assert manifest["action"]
    assert manifest["reportingController"]
    assert manifest["reportingInstance"]
    assert len(manifest["note"]) == 1024


def test_resync_runs_each_known_deployment_and_wakes_early() -> None:
    async def scenario() -> list[OwnerKey]:
        calls: list[OwnerKey] = []
        running: set[OwnerKey] = set()
        a, b = OwnerKey("ns", "a"), OwnerKey("ns", "b")

        async def reconcile(key: OwnerKey) -> float | None:
            assert key not in running, "two reconciles of one deployment at once"
            running.add(key)
            calls.append(key)
            await asyncio.sleep(0.05)
            running.discard(key)
            return None

        resyncer = Resyncer(reconcile, interval=60, wake_delay=0.01)
        task = asyncio.create_task(resyncer.run(lambda: [a, b]))
        await asyncio.sleep(0.2)  # both reconciled once at start, then not for 60s
        resyncer.wake(a)
        resyncer.wake(a)  # woken twice while idle: one more reconcile
        await asyncio.sleep(0.3)
        task.cancel()
        await resyncer.stop()
        return calls

    calls = asyncio.run(scenario())
    assert sorted(k.name for k in calls) == ["a", "a", "b"]


def test_a_failing_reconcile_backs_off_with_jitter_and_a_permanent_one_waits() -> None:
    async def scenario() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"busy": [], "refused": []}
        loop = asyncio.get_running_loop()
        busy, refused = OwnerKey("ns", "busy"), OwnerKey("ns", "refused")

        async def reconcile(key: OwnerKey) -> float | None:
            times[key.name].append(loop.time())
            if key == busy:
                raise RetriableKubeError("429", status=429, retry_after=0.1)
            raise PermanentKubeError("403", status=403)

        # draw=1: the bound itself; the server's Retry-After (0.1s) is the floor.
        resyncer = Resyncer(reconcile, interval=60, draw=lambda: 1.0)
        task = asyncio.create_task(resyncer.run(lambda: [busy, refused]))
        await asyncio.sleep(2.0)
        task.cancel()
        await resyncer.stop()
        return times

    times = asyncio.run(scenario())
    # RECONCILES: 0.5s after the first failure, then 1s (doubling), never below Retry-After.
    gaps = [b - a for a, b in itertools.pairwise(times["busy"])]
    assert len(gaps) >= 1
    assert gaps[0] >= 0.45
    assert all(later >= 1.9 * gaps[0] for later in gaps[1:2])
    # A permanent error is not retried before the usual interval (60s).
    assert len(times["refused"]) == 1


def test_a_throttled_answer_reaches_the_retry_policy_at_once(tmp_path: Path) -> None:
    """No retry hides in the HTTP transport (urllib3 would retry a 429 with Retry-After
    three times, sleeping in the caller's thread): one request, one error carrying the
    server's Retry-After, for `infergate.retry` to act on."""
    hits: list[float] = []

    class Throttling(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(time.monotonic())
            body = b'{"kind":"Status","reason":"TooManyRequests","code":429,"message":"later"}'
            self.send_response(429)
            self.send_header("Retry-After", "2")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Throttling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    client = KubeClient.from_environment(str(kubeconfig))
    try:
        with pytest.raises(RetriableKubeError) as raised:
            client.get(INFERENCE_DEPLOYMENTS, "ns", "qwen")
    finally:
        client.close()
        server.shutdown()
    assert raised.value.retry_after == 2.0
    assert len(hits) == 1


def test_a_wake_up_never_cuts_a_backoff_or_a_retry_after_short() -> None:
    """A change seen while a reconcile fails (a child's event, say) is acted on once the
    backoff ends, not at once: the server asked for Retry-After seconds of quiet."""

    async def scenario() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        times: list[float] = []
        key = OwnerKey("ns", "throttled")

        async def reconcile(_: OwnerKey) -> float | None:
            times.append(loop.time())
            if len(times) < 3:
                resyncer.wake(key)  # something changed meanwhile
                raise RetriableKubeError("429", status=429, retry_after=0.3)
            return None

        resyncer = Resyncer(reconcile, interval=60, wake_delay=0.01, draw=lambda: 0.0)
        task = asyncio.create_task(resyncer.run(lambda: [key]))
        await asyncio.sleep(1.0)
        woken = loop.time()
        resyncer.wake(key)  # after a success, a wake-up is prompt again
        await asyncio.sleep(0.2)
        task.cancel()
        await resyncer.stop()
        return times, woken

    times, woken = asyncio.run(scenario())
    # draw=0: no backoff of its own, so the Retry-After (0.3s) is the wait, wake-ups or not.
    assert len(times) == 4, times
    assert [round(b - a, 1) >= 0.3 for a, b in itertools.pairwise(times[:3])] == [True, True]
    assert times[3] - woken < 0.1


def test_a_background_failure_keeps_its_retry_after_whatever_else_happens() -> None:
    """A write the reconcile left to the background (a Service's create) is answered 429
    with Retry-After while the reconcile itself succeeds, or fails again with a shorter
    delay: neither brings the next reconcile, which sends that write again, forward."""

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        times: list[float] = []
        key = OwnerKey("ns", "busy")

        async def reconcile(_: OwnerKey) -> float | None:
            times.append(loop.time())
            if len(times) == 1:
                resyncer.failed(key, RetriableKubeError("429", status=429, retry_after=0.4))
                return None  # the reconcile's own writes went through
            if len(times) == 2:
                resyncer.failed(key, RetriableKubeError("429", status=429, retry_after=0.4))
                raise RetriableKubeError("500", status=500)  # no Retry-After of its own
            return None

        resyncer = Resyncer(reconcile, interval=60, draw=lambda: 0.0)
        task = asyncio.create_task(resyncer.run(lambda: [key]))
        await asyncio.sleep(1.2)
        task.cancel()
        await resyncer.stop()
        return times

    times = asyncio.run(scenario())
    assert len(times) == 3, times
    assert [round(b - a, 2) >= 0.4 for a, b in itertools.pairwise(times)] == [True, True]


def test_a_failed_wave_backs_off_for_the_longest_retry_after_it_was_answered() -> None:
    """Several writes of one wave fail: the error the reconcile backs off on is the first in
    plan order, with the longest Retry-After any of them got; so is a status write's
    failure beside a wave of creates."""
    world = World()
    plan = world.reconcile()
    revision = f"{NAME}-{plan.status.revisions[0].hash}"  # its ConfigMap, Deployment, Service
    failures: dict[tuple[str, str], Exception] = {
        ("create", revision): RetriableKubeError("500", status=500),
        ("create", NAME): RetriableKubeError("429", status=429, retry_after=2.0),  # the Service
    }
    with ThreadPoolExecutor(max_workers=8) as pool:
        writer = PlanWriter(FakeClient(dict(failures)), NAMESPACE, NAME, pool=pool)  # type: ignore[arg-type]
        with pytest.raises(RetriableKubeError) as raised:
            writer.write(plan, _body())  # type: ignore[arg-type]
    assert raised.value.status == 500
    assert raised.value.retry_after == 2.0

    for status_error, kind in (
        (RetriableKubeError("500", status=500), RetriableKubeError),
        (ConflictError("stale", status=409), StaleObjectError),
    ):
        client = FakeClient({**failures, ("status", NAME): status_error})
        with ThreadPoolExecutor(max_workers=8) as pool:
            writer = PlanWriter(client, NAMESPACE, NAME, pool=pool)  # type: ignore[arg-type]
            with pytest.raises(kind) as raised:
                writer.write(plan, _body())  # type: ignore[arg-type]
        assert raised.value.retry_after == 2.0


def test_retry_policy_doubles_with_full_jitter_and_honours_retry_after() -> None:
    policy = RetryPolicy(initial=0.2, maximum=5.0, multiplier=2.0, attempts=4)
    assert [policy.bound(n) for n in (1, 2, 3, 6)] == [0.2, 0.4, 0.8, 5.0]
    assert policy.delay(3, draw=lambda: 0.5) == 0.4
    assert policy.delay(1, retry_after=3.0, draw=lambda: 0.5) == 3.0
    assert policy.delay(1, retry_after=99.0, draw=lambda: 0.5) == 5.0  # capped by maximum
    slept: list[float] = []
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConflictError("stale", status=409)
        return "ok"

    assert retry_call(flaky, policy, sleep=slept.append, draw=lambda: 1.0) == "ok"
    assert slept == [0.2, 0.4]

    def refused() -> str:
        raise PermanentKubeError("no", status=422)

    with pytest.raises(PermanentKubeError):
        retry_call(refused, policy, sleep=slept.append)
    assert slept == [0.2, 0.4]  # never retried

    def always_busy() -> str:
        raise RetriableKubeError("busy", status=503)

    with pytest.raises(RetriableKubeError):
        retry_call(always_busy, policy, sleep=slept.append, draw=lambda: 0.0)
    assert len(slept) == 2 + 3  # attempts bound the tries


def test_answers_map_to_one_error_tree_with_retry_after() -> None:
    assert isinstance(error_for_status(409, "m", reason="AlreadyExists"), AlreadyExistsError)
    assert isinstance(error_for_status(409, "m", reason="Conflict"), ConflictError)
    throttled = error_for_status(429, "m", retry_after=parse_retry_after("7"))
    assert isinstance(throttled, RetriableKubeError)
    assert throttled.retry_after == 7.0
    assert isinstance(error_for_status(0, "no answer"), RetriableKubeError)
    assert isinstance(error_for_status(422, "m"), PermanentKubeError)
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None


def test_handler_modules_are_discovered_and_can_be_left_out() -> None:
    modules = handler_modules()
    assert {"children", "inference_deployment", "startup"} <= set(modules)
    assert all(not name.startswith("_") for name in modules)
    with pytest.raises(ValueError, match="no controller module nope"):
        load_handlers(exclude=["nope"])


def test_the_deployment_index_keeps_no_managed_fields_nor_kopfs_copy_of_the_spec() -> None:
    from infergate.controllers.inference_deployment import slim_body

    body = {
        "metadata": {
            "name": "qwen",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {
                "kopf.infergate.io/last-handled-configuration": '{"spec": "copy"}',
                "infergate.io/promote": "true",
            },
        },
        "spec": {"replicas": 2},
    }
    slim = slim_body(body)
    assert "managedFields" not in slim["metadata"]
    assert slim["metadata"]["annotations"] == {"infergate.io/promote": "true"}
    assert slim["spec"] == {"replicas": 2}
    assert "managedFields" in body["metadata"]  # the watched object is left as it is


def test_a_burst_runs_at_most_the_concurrency_limit_of_reconciles_at_once() -> None:
    async def scenario() -> tuple[int, list[OwnerKey]]:
        keys = [OwnerKey("ns", f"d{i:02d}") for i in range(40)]
        in_flight: set[OwnerKey] = set()
        most = 0
        calls: list[OwnerKey] = []

        async def reconcile(key: OwnerKey) -> float | None:
            nonlocal most
            in_flight.add(key)
            most = max(most, len(in_flight))
            calls.append(key)
            await asyncio.sleep(0.01)
            in_flight.discard(key)
            return None

        resyncer = Resyncer(reconcile, interval=60, concurrency=4)
        task = asyncio.create_task(resyncer.run(lambda: keys))
        while len(calls) < len(keys):
            await asyncio.sleep(0.01)
        task.cancel()
        await resyncer.stop()
        return most, calls

    most, calls = asyncio.run(scenario())
    assert most == 4
    # Each once (the next resync is 60 s away), none left out.
    assert len(calls) == len(set(calls)) == 40


def test_a_reconcile_runs_again_when_it_asked_to_without_any_wake_up() -> None:
    """A deadline is scheduled: the reconcile says when, the loop sleeps until then."""

    async def scenario() -> list[float | None]:
        key = OwnerKey("ns", "waiting")
        asked: list[float | None] = [0.05, 0.05, None]
        answered: list[float | None] = []

        async def reconcile(_: OwnerKey) -> float | None:
            answer = asked[len(answered)] if len(answered) < len(asked) else None
            answered.append(answer)
            return answer

        resyncer = Resyncer(reconcile, interval=60)
        task = asyncio.create_task(resyncer.run(lambda: [key]))
        while len(answered) < len(asked):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        task.cancel()
        await resyncer.stop()
        return answered

    # Twice asked to run again: three reconciles, then none until the 60 s resync.
    assert asyncio.run(scenario()) == [0.05, 0.05, None]


def _order_after_a_spec_change(*, urgent_lead: float, backlog_age: float) -> list[str]:
    """One reconcile at a time: five follow-ups wait behind the one in flight, then a spec
    change arrives (woken at once) `backlog_age` seconds after they became due."""

    async def scenario() -> list[str]:
        keys = [OwnerKey("ns", f"follow-up-{i}") for i in range(5)]
        changed = OwnerKey("ns", "changed-spec")
        known = list(keys)
        calls: list[str] = []
        gate = asyncio.Event()

        async def reconcile(key: OwnerKey) -> float | None:
            calls.append(key.name)
            if len(calls) == 1:
                await gate.wait()
            return None

        resyncer = Resyncer(reconcile, interval=60, concurrency=1, urgent_lead=urgent_lead)
        task = asyncio.create_task(resyncer.run(lambda: known))
        while not calls:
            await asyncio.sleep(0.01)
        await asyncio.sleep(backlog_age)
        known.append(changed)
        resyncer.wake(changed, delay=0)
        gate.set()
        while len(calls) < 6:
            await asyncio.sleep(0.01)
        task.cancel()
        await resyncer.stop()
        return calls

    return asyncio.run(scenario())


def test_a_spec_change_goes_ahead_of_the_follow_ups_queued_before_it() -> None:
    calls = _order_after_a_spec_change(urgent_lead=30.0, backlog_age=0.1)
    # The one in flight ends, then the change the rollout acts on, then the backlog.
    assert calls[1] == "changed-spec"
    assert sorted(calls[2:]) == sorted(set(calls[2:]))


def test_a_follow_up_waits_past_its_due_time_at_most_the_lead() -> None:
    calls = _order_after_a_spec_change(urgent_lead=0.05, backlog_age=0.3)
    # The follow-ups were due 0.3 s before the change: more than its 0.05 s lead.
    assert calls[-1] == "changed-spec"


class MeetingStatusClient(MeetingClient):
    """The status write also waits for every create: sent after them, it would wait in vain."""

    def replace_status(self, resource: Any, namespace: str, name: str, body: Any) -> dict[str, Any]:
        self.meeting.wait()
        return super().replace_status(resource, namespace, name, body)


def test_a_wave_of_creates_goes_out_beside_the_status_write() -> None:
    world = World()
    plan = world.reconcile()
    creates = [w for w in plan.sync.writes if isinstance(w, Create)]
    assert creates
    assert len(creates) == len(plan.sync.writes)
    client = MeetingStatusClient(len(creates) + 1, {})
    with ThreadPoolExecutor(max_workers=8) as pool:
        result = PlanWriter(client, NAMESPACE, NAME, pool=pool).write(plan, _body())  # type: ignore[arg-type]
    assert result.status_written
    assert result.created == [str(w.ref) for w in creates]


def test_a_stale_status_beside_creates_still_stops_the_write_and_says_stale() -> None:
    world = World()
    plan = world.reconcile()
    client = FakeClient({("status", NAME): ConflictError("stale", status=409)})
    with ThreadPoolExecutor(max_workers=8) as pool, pytest.raises(StaleObjectError):
        PlanWriter(client, NAMESPACE, NAME, pool=pool).write(plan, _body())  # type: ignore[arg-type]
    # The creates were sent (a revision the fresh state does not keep is deleted then);
    # nothing else was.
    assert {verb for verb, _, _ in client.calls} == {"status", "create"}


def test_a_wave_that_deletes_or_updates_waits_for_the_status_write() -> None:
    world = World()
    plan = world.reconcile()
    old = ObjectRef("Deployment", f"{NAME}-old")
    for extra in (Delete(old), Update({"kind": "Deployment", "metadata": {"name": old.name}}, "7")):
        mixed = replace(plan, sync=replace(plan.sync, writes=[*plan.sync.writes, extra]))
        client = FakeClient({("status", NAME): ConflictError("stale", status=409)})
        with ThreadPoolExecutor(max_workers=8) as pool, pytest.raises(StaleObjectError):
            PlanWriter(client, NAMESPACE, NAME, pool=pool).write(mixed, _body())  # type: ignore[arg-type]
        assert client.calls == [("status", "InferenceDeployment", NAME)]


def test_a_stale_write_beside_throttled_creates_backs_off_instead_of_reading_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A status write found stale ends the attempt from the watch's copy, and the reconcile
    reads the object and decides again at once: unless a create sent beside it was told to
    wait (Retry-After), which the retry policy then honours."""
    from types import SimpleNamespace

    from infergate.controllers import inference_deployment as controller

    plan = SimpleNamespace(quiet=False, due=None)
    monkeypatch.setattr(controller, "_state", lambda *_: object())
    monkeypatch.setattr(controller, "plan_reconcile", lambda _: plan)
    monkeypatch.setattr(controller, "_with_suites", lambda _, p: p)

    def stale(retry_after: float | None) -> Any:
        def write(*_: object) -> None:
            raise StaleObjectError("stale", status=409, retry_after=retry_after)

        return write

    monkeypatch.setattr(controller, "_write", stale(None))
    assert controller._from_watched({}, None, may_write=True) is None  # type: ignore[arg-type]
    monkeypatch.setattr(controller, "_write", stale(2.0))
    with pytest.raises(StaleObjectError) as raised:
        controller._from_watched({}, None, may_write=True)  # type: ignore[arg-type]
    assert raised.value.retry_after == 2.0
