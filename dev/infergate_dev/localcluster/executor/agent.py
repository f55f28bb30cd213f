"""The executor's main loop: register its nodes, heartbeat, run their pods.

Besides the default executor nodes it registers, it takes on executor nodes added at
run time and treats one whose Node object is deleted as a lost machine (nodeset).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import signal
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from infergate.jsontypes import JSON
from infergate_dev.localcluster import nodes
from infergate_dev.localcluster.executor import dns, endpoints, images, nodeset, ownership
from infergate_dev.localcluster.executor.container import kill_leftovers, now_rfc3339
from infergate_dev.localcluster.executor.pod import PodRunner, Site
from infergate_dev.localcluster.executor.volumes import remove_pod_dir
from infergate_dev.localcluster.layout import EXECUTOR_POD_CIDR, cache_dir
from infergate_dev.localcluster.rest import RestClient

log = logging.getLogger("infergate.executor")

_HEARTBEAT = 10.0
_POLL = 0.5


class ExecutorApi:
    """The API calls of the executor (a node agent of the local cluster)."""

    def __init__(self, client: RestClient) -> None:
        self.client = client

    def configmap(self, namespace: str, name: str) -> JSON | None:
        return self.client.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def secret(self, namespace: str, name: str) -> JSON | None:
        return self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def service_account_token(
        self, pod: JSON, audience: str | None, expiration_seconds: int
    ) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": expiration_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
        token: str = self.client.create(path, body)["status"]["token"]
        return token

    def patch_pod_status(self, pod: JSON, status: JSON) -> None:
        meta = pod["metadata"]
        # Strategic: conditions merge by type, so a readiness gate's (written by whoever
        # owns it) survives every report.
        self.client.strategic_patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {"metadata": {"uid": meta["uid"]}, "status": status},
        )

    def delete_pod_now(self, pod: JSON) -> None:
        meta = pod["metadata"]
        self.client.delete(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
        )


class IpAllocator:
    """Loopback pod IPs, handed out in turn so a just-freed address rests a while."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.ip_network(cidr)
        loopback = ipaddress.IPv4Network("127.0.0.0/8")
        if not (isinstance(network, ipaddress.IPv4Network) and network.subnet_of(loopback)):
            raise ValueError(f"pod IP range {cidr} is not inside loopback (127.0.0.0/8)")
        self._hosts = [str(ip) for ip in network.hosts()][1:]
        self._next = 0
        self._used: set[str] = set()

    def reserve(self, ip: str) -> None:
        self._used.add(ip)

    def release(self, ip: str) -> None:
        self._used.discard(ip)

    def allocate(self) -> str:
        for _ in range(len(self._hosts)):
            ip = self._hosts[self._next]
            self._next = (self._next + 1) % len(self._hosts)
            if ip not in self._used:
                self._used.add(ip)
                return ip
        raise RuntimeError(f"no free pod IP left in {EXECUTOR_POD_CIDR}")


class Executor:
    def __init__(self, client: RestClient, cluster_dir: Path) -> None:
        self.client = client
        self.api = ExecutorApi(client)
        self.cluster_dir = cluster_dir
        server = urlparse(client.server)
        self.images_file = cluster_dir / "executor.yaml"
        images.write_default(self.images_file)
        self.site = Site(
            pods_root=cluster_dir / "pods",
            logs_root=cluster_dir / "logs" / "pods",
            pvc_root=cache_dir() / "pvc",
            api_host=server.hostname or "127.0.0.1",
            api_port=server.port or 443,
            images=[],
            hosts_file=cluster_dir / "hosts",
        )
        # Written in place from now on: containers see it through a bind mount of its inode.
        self.site.hosts_file.write_text(dns.BASE)
        # Replaced, never changed in place: the heartbeat thread reads it.
        self.node_names: frozenset[str] = frozenset(n.name for n in nodes.executor_nodes())
        self.lost_nodes: frozenset[str] = frozenset()
        self.runners: dict[str, PodRunner] = {}
        self.ips = IpAllocator(EXECUTOR_POD_CIDR)
        self.stopping = threading.Event()

    # -- nodes ----------------------------------------------------------------

    def register_nodes(self) -> None:
        for shape in nodes.executor_nodes():
            body = nodes.node_object(shape)
            body["status"].update(self._node_status(shape.name))
            if self.client.get(f"/api/v1/nodes/{shape.name}") is None:
                self.client.create("/api/v1/nodes", body)
            self.client.merge_patch(
                f"/api/v1/nodes/{shape.name}/status", {"status": body["status"]}
            )

    def _node_status(self, name: str) -> JSON:
        return {
            "conditions": self._node_conditions(),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
        }

    def discover_nodes(self) -> None:
        """Take on the executor nodes added since the last loop (Ready at once, as a
        kubelet that just registered reports), and note the ones lost."""
        listed = self.client.list("/api/v1/nodes", labelSelector=nodeset.EXECUTOR_SELECTOR)
        changes = nodeset.node_changes(self.node_names, listed)
        for name in sorted(changes.added):
            log.info("node %s: taken on", name)
            self._renew_lease(name)
            self.client.merge_patch(
                f"/api/v1/nodes/{name}/status", {"status": self._node_status(name)}
            )
        for name in sorted(changes.lost):
            log.info("node %s: Node object gone, its pods' processes die with it", name)
        if changes.added or changes.lost:
            self.lost_nodes = (self.lost_nodes - changes.added) | changes.lost
            self.node_names = (self.node_names - changes.lost) | changes.added

    @staticmethod
    def _node_conditions() -> list[JSON]:
        now = now_rfc3339()
        healthy = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": "local executor",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, status, reason in healthy
        ]

    def heartbeat(self) -> None:
        while not self.stopping.wait(_HEARTBEAT):
            # Each node on its own: one that was just deleted fails alone.
            for name in sorted(self.node_names):
                try:
                    self._renew_lease(name)
                    self.client.merge_patch(
                        f"/api/v1/nodes/{name}/status",
                        {"status": {"conditions": self._node_conditions()}},
                    )
                except Exception:
                    log.exception("heartbeat of node %s failed", name)

    def _renew_lease(self, name: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}
        if self.client.get(path) is None:
            self.client.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {"metadata": {"name": name}, "spec": spec},
            )
        else:
            self.client.merge_patch(path, {"spec": spec})

    # -- pods -----------------------------------------------------------------

    def _pods(self) -> nodeset.PodSplit:
        pods: list[JSON] = []
        for name in sorted(self.node_names | self.lost_nodes):
            pods += self.client.list("/api/v1/pods", fieldSelector=f"spec.nodeName={name}")
        split = nodeset.split_pods(pods, self.node_names, self.lost_nodes)
        # A lost node is forgotten once the pod garbage collector deleted its pods.
        self.lost_nodes = frozenset(p["spec"]["nodeName"] for p in split.orphaned)
        return split

    def publish_endpoints(self, pods: list[JSON], services: list[JSON]) -> None:
        services = [s for s in services if s["spec"].get("selector")]
        managed = self.client.list(
            "/apis/discovery.k8s.io/v1/endpointslices",
            labelSelector=f"endpointslice.kubernetes.io/managed-by={endpoints.MANAGED_BY}",
        )
        current = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in managed}
        wanted = set()
        for service in services:
            desired = endpoints.desired_slice(service, pods)
            if desired is None:
                continue
            key = (desired["metadata"]["namespace"], desired["metadata"]["name"])
            wanted.add(key)
            base = f"/apis/discovery.k8s.io/v1/namespaces/{key[0]}/endpointslices"
            existing = current.get(key)
            if existing is None:
                self.client.create(base, desired)
            elif not endpoints.same_content(existing, desired):
                self.client.request("PUT", f"{base}/{key[1]}", body={
                    **desired,
                    "metadata": {**desired["metadata"],
                                 "resourceVersion": existing["metadata"]["resourceVersion"]},
                })  # fmt: skip
        for key in set(current) - wanted:
            self.client.delete(
                f"/apis/discovery.k8s.io/v1/namespaces/{key[0]}/endpointslices/{key[1]}"
            )

    def publish_dns(self, pods: list[JSON], services: list[JSON]) -> None:
        """The pods' cluster DNS names, in the hosts file group pods see (dns.py)."""
        text = dns.hosts_file(pods, services)
        if self.site.hosts_file.read_text() != text:
            # Truncated and rewritten, never replaced: the bind mounts hold this inode.
            with self.site.hosts_file.open("w") as hosts:
                hosts.write(text)

    def sync(self) -> None:
        self.discover_nodes()
        split = self._pods()
        services = self.client.list("/api/v1/services")
        self.publish_endpoints(split.run + split.orphaned, services)
        self.publish_dns(split.run, services)
        seen = set()
        for pod in split.run:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            runner = self.runners.get(uid)
            if pod["metadata"].get("deletionTimestamp"):
                grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                if runner is None or not runner.is_alive():
                    # Nothing of ours runs (never started, or its process ended):
                    # confirm the deletion as the kubelet does.
                    kill_leftovers(self.site.pods_root / uid)
                    self.api.delete_pod_now(pod)
                    remove_pod_dir(self.site.pods_root / uid)
                    if runner is not None:
                        self.ips.release(runner.pod_ip)
                        del self.runners[uid]
                elif not runner.stop_requested:
                    runner.request_stop(grace, delete=True)
                continue
            if runner is not None:
                runner.observe(pod)
            if runner is None and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                ip = (pod.get("status") or {}).get("podIP") or self.ips.allocate()
                self.ips.reserve(ip)
                site = dataclasses.replace(self.site, images=images.load(self.images_file))
                runner = PodRunner(pod, ip, self.api, site)
                self.runners[uid] = runner
                runner.start()
        for uid, runner in list(self.runners.items()):
            if uid not in seen:
                if runner.node_name not in self.node_names and not runner.stop_requested:
                    runner.request_kill()
                elif not runner.stop_requested:
                    runner.request_stop(0, delete=False)
                if not runner.is_alive():
                    self.ips.release(runner.pod_ip)
                    del self.runners[uid]

    def run(self) -> None:
        # What still runs of a previous executor's pods (one killed before it stopped
        # them) would hold their ports against the containers this one starts again.
        left = ownership.kill_owned(self.site.pods_root)
        if left:
            log.info("killed %d processes left by a previous executor's pods", left)
        self.register_nodes()
        threading.Thread(target=self.heartbeat, name="heartbeat", daemon=True).start()
        while not self.stopping.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("sync failed")
            self.stopping.wait(_POLL)
        self.shutdown()

    def shutdown(self) -> None:
        for runner in self.runners.values():
            runner.request_stop(5.0, delete=False)
        for runner in self.runners.values():
            runner.join(timeout=20)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="local executor of the infergate test cluster")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--cluster-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    executor = Executor(RestClient(args.kubeconfig), args.cluster_dir)
    signal.signal(signal.SIGTERM, lambda *_: executor.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: executor.stopping.set())
    executor.run()
