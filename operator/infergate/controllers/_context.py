"""Process-wide state of the operator: options, the API client, the resync loops, locks.

None of it is rollout truth: locks only keep two reconciles of one object from
interleaving, the resync schedules only say when to look again, and the client is a
connection pool. A restarted process starts with all of it empty.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from infergate.api.golden import GoldenSpec
from infergate.controllers._leader import LEADER
from infergate.controllers._resync import Schedule
from infergate.kube.background import BackgroundWrites, QueuedWrite
from infergate.kube.client import KubeClient
from infergate.kube.events import EventPoster
from infergate.plan.metadata import OwnerKey
from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE
from infergate.render.images import DEFAULT_RUNNER_IMAGE
from infergate.render.network import Peer


@dataclass
class OperatorOptions:
    """How the operator process runs; set by `infergate operator` before kopf starts."""

    resync_seconds: float = 300.0
    """Longest time between two reconciles of one deployment when nothing wakes it: a safety
    net (changes wake a reconcile, deadlines and pauses are scheduled at their time)."""
    kubeconfig: str | None = None
    """Kubeconfig for the API client; None: in-cluster credentials, else the default file."""
    workers: int = 64
    """Threads for blocking API calls: reconciles of different deployments overlap their waits
    (at least `concurrent_reconciles`, else the cap is the thread count)."""
    write_workers: int = 64
    """Threads for the independent writes of one reconcile (a canary's ConfigMap, Deployment
    and Services), sent at once instead of one after another."""
    background_workers: int = 4
    """Threads sending the writes no reconcile waits for (a Service's create and delete: the
    API server allocates cluster IPs one at a time, so more threads would only queue there)."""
    concurrent_reconciles: int = 32
    """Most deployment reconciles in flight at once: a burst of changes queues in the resync
    loop (earliest due first) instead of crowding the event loop and the threads. A reconcile
    in flight mostly waits for the API server, so the cap is what the API server takes at
    once beside the cluster's other clients (each reconcile sends up to a few writes at
    once; the API server's default limit is 200 mutating requests in flight), not the CPU."""
    check_resync_seconds: float = 300.0
    """Longest time between two reconciles of a ParityCheck when nothing wakes it (its own
    changes, its children's and its sides' wake it at once; its deadline is scheduled)."""
    leader_election: bool = False
    """Hold the Lease `<namespace>/infergate-operator` before acting (several replicas)."""
    namespace: str = ""
    """The operator's own namespace (its Lease lives there)."""
    allowed_host_paths: tuple[str, ...] = ()
    """Host directories a file:// model may name (`--allow-host-path`); none: file:// is off.
    The namespace's infergate.io/allowed-host-paths narrows it further at admission."""
    exact_namespaces: bool = False
    """Watching only namespaces named exactly (no glob): kopf then scans neither namespaces
    nor CRDs, which a namespaced install has no right to list."""
    runner_image: str = DEFAULT_RUNNER_IMAGE
    """Image of every runner Job: the operator's own (env INFERGATE_RUNNER_IMAGE), never a
    user's choice."""
    golden: GoldenSpec | None = None
    """The golden record store and size policy every runner Job gets (`--golden-config`);
    None: no records are kept. An operator setting: a tenant cannot point a runner at
    storage of its choosing."""
    runner_api_server: tuple[Peer, ...] = ()
    """Addresses of the API server the runner's NetworkPolicy lets it reach."""
    runner_namespace: str = DEFAULT_RUNNER_NAMESPACE
    """Where runner Jobs, their ServiceAccounts and NetworkPolicies live (`--runner-namespace`,
    default the operator's own): a namespace no tenant may write to or mint tokens in."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (by name) the pods of infergate's own image pull it with: runner Jobs and their
    ServiceAccounts (in the runner namespace), probe pods and mirrors (in the served
    namespaces) (`--image-pull-secret`)."""
    runner_account_annotations: dict[str, str] = field(default_factory=dict)
    """Annotations of every runner ServiceAccount (`--runner-service-account-annotation`)."""


OPTIONS = OperatorOptions()
log = logging.getLogger(__name__)
# kopf's progress and diff-base annotations live under KOPF_PREFIX (controllers/startup.py).
_client: KubeClient | None = None
_events: EventPoster | None = None
_writes: ThreadPoolExecutor | None = None
_background: BackgroundWrites | None = None


def client() -> KubeClient:
    """The process's API client, made on first use: its writes pass the leader's fence and
    end within the leader's write timeout (`plan.leadership.LeaderTiming`)."""
    global _client  # noqa: PLW0603 - one connection pool per process, made lazily
    if _client is None:
        _client = KubeClient.from_environment(
            OPTIONS.kubeconfig,
            write_timeout=LEADER.timing.write_request.pair,
            fence=LEADER.fence,
        )
    return _client


def events() -> EventPoster:
    """The process's Event poster, started on first use."""
    global _events  # noqa: PLW0603 - one posting thread per process, started lazily
    if _events is None:
        _events = EventPoster(client())
    return _events


def write_pool() -> ThreadPoolExecutor:
    """The process's threads for a reconcile's independent writes, started on first use
    (apart from the reconciles' own threads: a reconcile waits on them while holding one)."""
    global _writes  # noqa: PLW0603 - one pool per process, started lazily
    if _writes is None:
        _writes = ThreadPoolExecutor(
            max_workers=OPTIONS.write_workers, thread_name_prefix="infergate-write"
        )
    return _writes


class TakenNames:
    """Children's names that someone else's objects hold, by owning deployment, as each
    one's last create found (`kube.writer`'s `on_name`). Not rollout truth: a restarted
    process learns them again from its first creates, which keep failing until then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[OwnerKey, dict[str, str]] = {}
        self.changed: Callable[[OwnerKey], None] | None = None
        """Called (from any thread) when a deployment's taken names change."""

    def note(self, key: OwnerKey, ref: str, holder: str | None) -> None:
        """`ref` ("Service web") is held by `holder`, or (None) free for ours."""
        with self._lock:
            names = self._names.setdefault(key, {})
            before = names.get(ref)
            if holder is None:
                names.pop(ref, None)
            else:
                names[ref] = holder
            if not names:
                del self._names[key]
        if before == holder:
            return
        if holder is not None:
            log.warning("%s/%s: %s exists and was not made by infergate: %s",
                        key.namespace, key.name, ref, holder)  # fmt: skip
        if self.changed is not None:
            self.changed(key)

    def of(self, key: OwnerKey) -> dict[str, str]:
        with self._lock:
            return dict(self._names.get(key, {}))

    def forget(self, key: OwnerKey) -> None:
        with self._lock:
            self._names.pop(key, None)


TAKEN = TakenNames()


def start_background_writes(loop: asyncio.AbstractEventLoop) -> None:
    """Start the queue of writes no reconcile waits for; a failed one backs its owner off
    and reconciles it again (through `loop`, the resync loop's). A name found taken (or
    freed) by any write reconciles its owner too, to say so."""
    global _background  # noqa: PLW0603 - one queue per process, started with the resync loop

    def failed(write: QueuedWrite, error: Exception) -> None:
        loop.call_soon_threadsafe(SCHEDULE.failed, OwnerKey(write.namespace, write.owner), error)

    def name_changed(key: OwnerKey) -> None:
        loop.call_soon_threadsafe(SCHEDULE.wake, key)

    TAKEN.changed = name_changed

    if _background is None:
        _background = BackgroundWrites(OPTIONS.background_workers, failed)


def background_writes() -> BackgroundWrites | None:
    """The queue of writes no reconcile waits for, once started."""
    return _background


def close_client() -> None:
    global _client, _events, _writes, _background  # noqa: PLW0603 - see the functions above
    if _background is not None:
        _background.close()
        _background = None
    if _writes is not None:
        _writes.shutdown(wait=True)
        _writes = None
    if _events is not None:
        _events.close()
        _events = None
    if _client is not None:
        _client.close()
        _client = None


LOCKS: defaultdict[OwnerKey, asyncio.Lock] = defaultdict(asyncio.Lock)


# The process's resync loops over InferenceDeployments and ParityChecks, once started.
SCHEDULE = Schedule()
CHECK_SCHEDULE = Schedule()
# Checks by the InferenceDeployments their sides name, so a change of a deployment (its
# stable revision, a revision becoming available) wakes the checks waiting on it.
CHECKS_OF_DEPLOYMENT: defaultdict[OwnerKey, set[OwnerKey]] = defaultdict(set)


def wake(key: OwnerKey, *, delay: float | None = None) -> None:
    """Reconcile this deployment after `delay` seconds (default: the debounce; a child of it
    changed), and the checks of its sides."""
    SCHEDULE.wake(key, delay=delay)
    for check in tuple(CHECKS_OF_DEPLOYMENT.get(key, ())):
        CHECK_SCHEDULE.wake(check)


def wake_check(key: OwnerKey) -> None:
    """Reconcile this check soon (it or a child of it changed)."""
    CHECK_SCHEDULE.wake(key)
