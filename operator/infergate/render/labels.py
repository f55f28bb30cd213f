"""Names, labels and selectors of rendered objects.

Revision objects (Deployment, Service, ConfigMap) are named `<name>-<revision>`; a
multi-node revision's LeaderWorkerSet is named `<name>-<revision>-group` (`group_set_name`);
the stable Service is named `<name>`. Every object carries
`app.kubernetes.io/managed-by: infergate` and `infergate.io/deployment`;
revision objects also carry `infergate.io/revision`.
"""

from __future__ import annotations

from infergate.api.enums import EngineKind

MANAGED_BY = "infergate"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_DEPLOYMENT = "infergate.io/deployment"
LABEL_REVISION = "infergate.io/revision"
LABEL_ENGINE = "infergate.io/engine"
# Why the operator made a ParityCheck: unset for a canary's check (and a gateway step's
# re-check), `drift` for a drift watch's run on the stable revision.
LABEL_CHECK_PURPOSE = "infergate.io/check-purpose"
PURPOSE_DRIFT = "drift"
ANNOTATION_REVISION_HASH = "infergate.io/revision-hash"
COMPONENT_ENGINE = "engine"


GROUP_SET_SUFFIX = "group"


def revision_object_name(name: str, revision: str) -> str:
    """Name of a revision's Deployment, Service and ConfigMap."""
    return f"{name}-{revision}"


def group_set_name(name: str, revision: str) -> str:
    """Name of a multi-node revision's LeaderWorkerSet: `<name>-<revision>-group`.

    Not the revision's own name: the LWS controller names the group's headless Service
    after the LeaderWorkerSet (lws pkg/controllers/leaderworkerset_controller.go,
    CreateHeadlessServiceIfNotExists), and that Service is what publishes the DNS names of
    the group's pods, `LWS_LEADER_ADDRESS` among them. Under `<name>-<revision>` it met the
    revision Service: whichever was created first won, and when it was ours no headless
    Service existed and no worker could find its leader. "group" is no hex digit, so this
    name is never the object name of another revision.
    """
    return f"{revision_object_name(name, revision)}-{GROUP_SET_SUFFIX}"


def workload_name(name: str, revision: str, *, group: bool) -> str:
    """Name of a revision's workload: its Deployment, or with `group` (a multi-node
    revision) its LeaderWorkerSet. The operator finds and adopts a workload only under
    exactly this name."""
    return group_set_name(name, revision) if group else revision_object_name(name, revision)


def engine_pod_selector(name: str, revision: str | None = None) -> dict[str, str]:
    """Selects the engine pods of a deployment, or of one of its revisions."""
    selector = {LABEL_DEPLOYMENT: name, LABEL_COMPONENT: COMPONENT_ENGINE}
    if revision is not None:
        selector[LABEL_REVISION] = revision
    return selector


def stable_labels(name: str) -> dict[str, str]:
    """Labels of the deployment-wide objects (the stable Service)."""
    return {
        LABEL_NAME: name,
        LABEL_COMPONENT: COMPONENT_ENGINE,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: name,
    }


def revision_labels(name: str, revision: str, engine: EngineKind) -> dict[str, str]:
    """Labels of every object of one revision, pods included."""
    return {
        **stable_labels(name),
        LABEL_INSTANCE: revision_object_name(name, revision),
        LABEL_REVISION: revision,
        LABEL_ENGINE: engine.value,
    }
