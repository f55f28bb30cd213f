"""How engine pods survive voluntary disruption: spread over nodes, and a budget on evictions.

- **Spread.** A revision's pods prefer distinct nodes (preferred pod anti-affinity on the
  node's hostname label, over the pods of the same revision): a node that fails or is
  drained takes one replica, not all. Preferred, never required: accelerator nodes are
  few, and a required rule would leave replicas Pending where a node has room for two.
  `placement.affinity` replaces it.
- **Budget.** The stable revision's pods get a PodDisruptionBudget `<name>`, which
  follows the stable revision (its selector moves at promotion): an eviction (a node
  drain, the cluster autoscaler) takes at most one serving pod at a time, so a
  stable revision of several replicas keeps all but one serving. With one replica it
  still lets the drain through: a budget that blocks every drain of an accelerator node
  is worse than the restart. An unhealthy pod (not Ready) may always be evicted, so a
  crash-looping replica never blocks a drain.
- **No budget on a canary.** A canary carries no traffic (dark) or a small share of it
  and exists to be checked: evicting it at worst makes its check end Inconclusive or
  Error (fail closed: never Passed), and the rollout decides again. A budget on it would
  hold a node drain for a pod that serves nobody, for as long as the check lasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infergate.render.labels import engine_pod_selector, stable_labels

HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
SPREAD_WEIGHT = 100
MAX_UNAVAILABLE = 1


def spread_affinity(selector: Mapping[str, str]) -> dict[str, Any]:
    """Preferred anti-affinity between the pods `selector` matches, by node."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": SPREAD_WEIGHT,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": dict(selector)},
                        "topologyKey": HOSTNAME_TOPOLOGY,
                    },
                }
            ]
        }
    }


def stable_disruption_budget(name: str, namespace: str, stable: str) -> dict[str, Any]:
    """The PodDisruptionBudget `<name>` over the stable revision's engine pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": stable_labels(name)},
        "spec": {
            "maxUnavailable": MAX_UNAVAILABLE,
            "selector": {"matchLabels": engine_pod_selector(name, stable)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
