"""How kopf runs this operator: where it keeps its bookkeeping, what it posts, timeouts.

kopf's progress and diff-base go into annotations under `kopf.infergate.io/`:
the CRD status schema has no room for kopf's own fields (the API server would
prune them silently), and a prefix of our own keeps them apart from the
`infergate.io/` control annotations people set.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from infergate.controllers._context import close_client

KOPF_PREFIX = "kopf.infergate.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Annotations for kopf's state, explicit Events only, bounded API timeouts."""
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


@kopf.on.cleanup()
def close(**_: Any) -> None:
    """Close the API client's connections."""
    close_client()
