"""What the cluster needs once its API server answers: the simulated nodes."""

from __future__ import annotations

import time

from infergate_dev.localcluster import nodes, processes
from infergate_dev.localcluster.layout import ClusterLayout
from infergate_dev.localcluster.rest import RestClient


class BootstrapError(RuntimeError):
    """The cluster came up but did not reach a usable state."""


def _ready(node: dict[str, object]) -> bool:
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


def bootstrap(layout: ClusterLayout, components: tuple[str, ...], timeout: float = 90.0) -> None:
    client = RestClient(layout.kubeconfig)
    try:
        for shape in nodes.simulated_nodes():
            if client.get(f"/api/v1/nodes/{shape.name}") is None:
                client.create("/api/v1/nodes", nodes.node_object(shape))
        wanted = {n.name for n in nodes.NODES}
        deadline = time.monotonic() + timeout
        while True:
            ready = {n["metadata"]["name"] for n in client.list("/api/v1/nodes") if _ready(n)}
            sa = client.get("/api/v1/namespaces/default/serviceaccounts/default")
            ca = client.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            if wanted <= ready and sa is not None and ca is not None:
                return
            dead = [name for name in components if processes.running(layout.run, name) is None]
            if dead:
                logs = ", ".join(str(layout.logs / f"{name}.log") for name in dead)
                raise BootstrapError(f"{', '.join(dead)} exited; see {logs}")
            if time.monotonic() > deadline:
                raise BootstrapError(
                    f"after {timeout:.0f}s: nodes not Ready: {sorted(wanted - ready)}; "
                    f"default ServiceAccount {'present' if sa else 'missing'}, "
                    f"kube-root-ca.crt {'present' if ca else 'missing'} "
                    f"(see {layout.logs})"
                )
            time.sleep(0.5)
    finally:
        client.close()
