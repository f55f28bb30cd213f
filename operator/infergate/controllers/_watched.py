"""What the operator's watches of Kubernetes' own kinds ask the API server for.

A kopf handler's `labels=` filter is applied in the operator: without a selector of its
own, each watch lists every object of its kind in the watched namespaces (every
namespace in the default install), receives every change to any of them, and parses
each one before the filter drops it. Every object the operator makes, and every pod made
from one (engine pods from a revision's template, probe pods, runner Jobs' pods, the
runner's ServiceAccount, Role, RoleBinding and NetworkPolicy, the report ConfigMap, the
mirror's objects, the stable revision's PodDisruptionBudget, a multi-node revision's
LeaderWorkerSet), carries `app.kubernetes.io/managed-by: infergate`
(render/labels.py `revision_labels`, render/check_names.py `role_labels`,
render/mirror.py `mirror_labels`). So each watch of a kind in `WATCHED` asks the server
for those objects alone (`settings.watching.label_selectors`, set once at start up from
this one table); the handlers keep their own filters, and each of those requires
`WATCH_LABELS` (tests/unit/controllers/test_watched.py), so what reaches a handler is
what reached it before.

The label is a filter, not a trust boundary: anyone who may write an object may label
it so, and it then streams to the operator as it did before the selector. Decisions that
matter still follow the uid chain (plan/ownership.py, runner/side_pods.py), and the
admission policies (manifests/admission/managed-objects.yaml) keep objects wearing
`infergate.io/` labels or owners the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infergate.render.labels import LABEL_MANAGED_BY, MANAGED_BY

# The labels every watched object carries; every handler's `labels=` includes them.
WATCH_LABELS: Mapping[str, str] = {LABEL_MANAGED_BY: MANAGED_BY}

# (group, version, plural) of every kind not of our own API that a handler watches.
WATCHED: tuple[tuple[str, str, str], ...] = (
    ("", "v1", "pods"),
    ("", "v1", "services"),
    ("", "v1", "configmaps"),
    ("", "v1", "serviceaccounts"),
    ("apps", "v1", "deployments"),
    ("batch", "v1", "jobs"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("networking.k8s.io", "v1", "networkpolicies"),
    ("gateway.networking.k8s.io", "v1", "httproutes"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ("policy", "v1", "poddisruptionbudgets"),
)


def label_selector(labels: Mapping[str, str]) -> str:
    """`labels` as an equality-based label selector, keys sorted."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def label_selectors() -> dict[tuple[str, str, str], str]:
    """The server-side label selector of each watched kind."""
    return {resource: label_selector(WATCH_LABELS) for resource in WATCHED}


def select_on_server(settings: Any) -> None:
    """Set kopf's server-side label selector of every watched kind (`settings` is kopf's
    OperatorSettings: kopf joins the selectors of a kind with the other filters it has)."""
    for resource, selector in label_selectors().items():
        settings.watching.label_selectors[resource] = selector
