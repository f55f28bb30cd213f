"""A promotion on real engines while a client calls the stable Service, with the Service's
move refused: every write of the stable Service is answered 409 Conflict by the fault
proxy in front of the operator (fault_proxy.Conflict) until the test lifts it.

The engines are real vLLM processes of the fixture model on the local executor's GPU
node (as tests/e2e runs them); the operator is `infergate operator` as a process of the
test behind the fault proxy, as its ServiceAccount, with the admission policies installed
(fault_support). A client sends requests in a loop to the stable Service's ready endpoints
(from its EndpointSlices, as kube-proxy routes them), and each engine's own /metrics counts
the requests it finished (tests/e2e/traffic.py: the client's requests are the ones of
CLIENT_TOKENS generated tokens). What must hold: no request failed, every request the
client got an answer to was counted by the engine that answered it, the Service selected
the old stable until the move went through, and the old stable served until the
scale-down delay after the move.

The verdict is written by the test with a token of the check's runner ServiceAccount (the
real runner Job also starts; the test's verdict ends the check first), so the engines'
time goes to the client's traffic. Run under the engines' lock:

    flock /tmp/heavy.lock .venv/bin/pytest tests/integration/test_promotion_traffic.py -s

A node loss between the switch and the scale-down, on real engines with requests counted
the same way, is test_promotion_node_loss.py (a second executor GPU node added by the
test, then lost).
"""

from __future__ import annotations

import threading
import time

import pytest

from infergate.fixture.generate import default_model_dir
from tests.e2e.support import fixture_model
from tests.e2e.traffic import Client, client_requests_served, service_urls, vllm_deployment
from tests.harness import Cluster, wait_for
from tests.integration.controller_support import operator
from tests.integration.fault_proxy import Conflict, path_matches
from tests.integration.fault_support import (
    GateWatch,
    Rig,
    RunnerIdep,
    admission_policies,
    explained,
    idep_namespace,
    installed_stopped,
    rig,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.engines]
__all__ = ["admission_policies", "idep_namespace", "installed_stopped", "operator", "rig"]
NAME = "qwen"
DELAY = 15


class Counters:
    """Each engine's count of client requests, read every half second from its /metrics
    while it answers (the last read of an engine that went is from its preStop hold, after
    it left the Service's endpoints): url -> (first count read, last count read)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int]] = {}
        self.urls: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, url: str) -> None:
        with self._lock:
            self.urls.add(url)

    def _read(self) -> None:
        with self._lock:
            urls = sorted(self.urls)
        for url in urls:
            count = client_requests_served(url)
            if count is None:
                continue
            with self._lock:
                first = self.seen.get(url, (count, count))[0]
                self.seen[url] = (first, count)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(0.5)

    def __enter__(self) -> Counters:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._read()

    def served(self, url: str) -> int:
        first, last = self.seen.get(url, (0, 0))
        return last - first


def _pod_urls(cluster: Cluster, namespace: str, revision: str) -> list[str]:
    pods = cluster.get_json(
        "pods", "-n", namespace,
        "-l", f"infergate.io/deployment={NAME},infergate.io/revision={revision}",
    )["items"]  # fmt: skip
    return [f"http://{p['status']['podIP']}:8000" for p in pods if p["status"].get("podIP")]


def test_a_promotion_under_service_conflicts_serves_every_request(
    cluster: Cluster, idep_namespace: str, rig: Rig
) -> None:
    ns = idep_namespace
    models = str(default_model_dir().parent)
    fixture_model()  # fails at once naming `make engines` when the model is missing
    cluster.kubectl(
        "annotate", "namespace", ns, f"infergate.io/allowed-host-paths={models}", "--overwrite"
    )  # fmt: skip
    manifest = vllm_deployment(NAME)
    manifest["spec"]["rollout"]["scaleDownDelaySeconds"] = DELAY
    idep = RunnerIdep(cluster, ns, manifest)
    proxy = rig.proxy()
    rig.operator(proxy, "run-0", extra_args=(f"--allow-host-path={models}",))
    idep.apply()
    stable = idep.wait_stable(timeout=900)
    [stable_url] = _pod_urls(cluster, ns, stable)

    client = Client({"stable": lambda: service_urls(cluster, ns, NAME)})
    conflict = Conflict(path_matches("PATCH", rf"/namespaces/{ns}/services/{NAME}$"))
    with Counters() as counters, GateWatch(cluster, ns, NAME) as watch:
        counters.watch(stable_url)
        client.start()
        idep.apply(seed=43)  # a new revision (greedy answers unchanged)
        canary, check = idep.wait_check(timeout=300)
        with explained(idep):
            canary_url = wait_for(
                lambda: next(iter(_pod_urls(cluster, ns, canary)), None), 600, "the canary pod"
            )
            counters.watch(canary_url)
            proxy.conflicts.append(conflict)
            idep.verdict(check["metadata"]["name"], "Passed", passed=True)
            wait_for(lambda: conflict.answered >= 3, 300, "the Service's move refused, retried")
            time.sleep(5)
            assert service_urls(cluster, ns, NAME) == [stable_url]
            assert idep.status()["promotion"]["step"] == "Switching"
        refused = conflict.answered
        lifted = time.monotonic()
        conflict.lift()
        with explained(idep):
            wait_for(
                lambda: idep.revisions() == {stable: 0, canary: 1} or None,
                300,
                "the old stable scaled down",
            )
            idep.wait_phase("Stable", timeout=120)
        time.sleep(5)  # the client on the new stable alone, and the old one's preStop hold
        client.stop()
    moved = watch.first_selected(canary)
    dropped = watch.first_size(stable, 0)
    failed = [s for s in client.samples if not s.ok]
    answered: dict[str, int] = {}
    for sample in client.samples:
        if sample.ok:
            answered[sample.url] = answered.get(sample.url, 0) + 1
    assert failed == [], [f"{s.url}: {s.answer}" for s in failed[:5]]
    assert set(answered) <= {stable_url, canary_url}, set(answered)
    # Each engine counted exactly the requests the client got from it.
    assert {u: counters.served(u) for u in answered} == answered
    assert answered.get(stable_url, 0) > 0, answered
    assert answered.get(canary_url, 0) > 0, answered
    assert moved is not None
    assert moved > lifted
    assert dropped is not None
    assert dropped - moved >= DELAY - 1
    moved_wall = time.time() - (time.monotonic() - moved)  # the client stamps wall time
    assert {s.url for s in client.samples if s.at < moved_wall - 1} <= {stable_url}
    print(  # noqa: T201 - the figures, for the record
        f"promotion figures: {len(client.samples)} requests, {len(failed)} failed; old stable "
        f"{answered.get(stable_url, 0)} (engine counted {counters.served(stable_url)}), new "
        f"stable {answered.get(canary_url, 0)} (engine counted {counters.served(canary_url)}); "
        f"{refused} Service writes refused; moved {moved - lifted:.1f}s after the lift, old "
        f"stable scaled down {dropped - moved:.1f}s after the move (delay {DELAY}s)"
    )
