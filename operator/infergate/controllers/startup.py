"""How kopf runs this operator: where it keeps its bookkeeping, what it posts, timeouts.

The controllers use only kopf's indexes and event handlers, which keep no state on the
objects (a replica that does not lead must write nothing). Should a stateful handler be
added, kopf's progress and diff-base go into annotations under `kopf.infergate.io/`:
the CRD status schema has no room for kopf's own fields (the API server would
prune them silently), and a prefix of our own keeps them apart from the
`infergate.io/` control annotations people set.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from infergate import metrics
from infergate.controllers._context import (
    CHECK_SCHEDULE,
    OPTIONS,
    SCHEDULE,
    client,
    close_client,
)
from infergate.controllers._leader import LEADER
from infergate.controllers._watched import select_on_server
from infergate.kube.client import kubeconfig_credentials
from infergate.kube.lease import LeaseClient
from infergate.plan.deployment.wake import KOPF_PREFIX


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Annotations for kopf's state, explicit Events only, bounded API timeouts, server-side
    label selectors."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    # Events come from the controllers' explicit calls, not from every log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # A namespaced install may not list namespaces or CRDs; with exact names kopf needs
    # neither (resources come from API discovery once, at start).
    settings.scanning.disabled = OPTIONS.exact_namespaces
    # Watches of Kubernetes' own kinds list and stream only the objects infergate made.
    select_on_server(settings)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's credentials are those of the operator's own API client: the kubeconfig given
    with `--kubeconfig` when there is one (kopf's default login would prefer in-cluster
    credentials, and read $KUBECONFIG as it was when the client library was imported),
    else in-cluster ones, else the default kubeconfig."""
    if OPTIONS.kubeconfig is None:
        return kopf.login_via_client(**kwargs)
    found = kubeconfig_credentials(OPTIONS.kubeconfig)
    return kopf.ConnectionInfo(
        server=found.server,
        ca_path=found.ca_path,
        insecure=found.insecure,
        scheme=found.scheme,
        token=found.token,
        certificate_path=found.certificate_path,
        private_key_path=found.private_key_path,
    )


LEASE_NAME = "infergate-operator"


@kopf.on.startup()
async def elect(**_: Any) -> None:
    """With several replicas: act only while holding the Lease (one replica: act at once)."""
    if not OPTIONS.leader_election:
        return

    def lead() -> None:
        SCHEDULE.wake_all()
        CHECK_SCHEDULE.wake_all()

    # Its own thread: a busy event loop cannot make the holder miss a renewal.
    leases = LeaseClient(
        client(), OPTIONS.namespace, LEASE_NAME, timeout=LEADER.timing.lease_request
    )
    LEADER.start(leases, lead)


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    """Say not ready, give up the Lease (a follower takes over at once), close the API client."""
    metrics.READY.clear()
    if OPTIONS.leader_election:
        await asyncio.to_thread(LEADER.close)
        leases = LeaseClient(client(), OPTIONS.namespace, LEASE_NAME)
        await asyncio.to_thread(LEADER.release, leases)
    close_client()
