"""Cluster DNS names of pods, as a hosts file the executor's group pods read (pure).

A pod that names a `subdomain` (as the LeaderWorkerSet webhook makes every pod of a group:
hostname `<leader>` or `<leader>-<index>`, subdomain the LWS's name) is reachable on a real
cluster at `<hostname>.<subdomain>.<namespace>.svc.cluster.local` once a headless Service
named after the subdomain exists in its namespace; its peers use the short form
`<hostname>.<subdomain>.<namespace>` (LWS_LEADER_ADDRESS), which the pod's resolv.conf
search list (`svc.cluster.local`) completes. This machine has no cluster DNS: the executor
writes those records, every spelling, into one hosts file and mounts it over /etc/hosts in
the containers of pods with a subdomain. Names resolve to the pods' loopback IPs.
Kubernetes DNS publishes a record for a pod behind a headless Service while it is ready,
or at once where the Service publishes not-ready addresses (the LWS's does: a worker
must reach its leader before the leader is ready).
"""

from __future__ import annotations

from infergate.jsontypes import JSON

CLUSTER_DOMAIN = "cluster.local"
BASE = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pod_names(pod: JSON) -> list[str]:
    """Every spelling of the pod's own DNS name under its subdomain; none without one."""
    meta, spec = pod["metadata"], pod["spec"]
    subdomain = spec.get("subdomain")
    if not subdomain:
        return []
    short = f"{spec.get('hostname') or meta['name']}.{subdomain}.{meta['namespace']}"
    return [short, f"{short}.svc", f"{short}.svc.{CLUSTER_DOMAIN}"]


def hosts_file(pods: list[JSON], services: list[JSON]) -> str:
    """/etc/hosts text: localhost, then one line per pod with a published DNS record."""
    headless = {
        (s["metadata"]["namespace"], s["metadata"]["name"]): bool(
            s["spec"].get("publishNotReadyAddresses")
        )
        for s in services
        if s["spec"].get("clusterIP") == "None"
    }
    lines = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        names = pod_names(pod)
        if not ip or not names:
            continue
        key = (pod["metadata"]["namespace"], pod["spec"]["subdomain"])
        if key not in headless:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if headless[key] or _ready(pod):
            lines.append(f"{ip}\t{' '.join(names)}\n")
    return BASE + "".join(sorted(lines))
