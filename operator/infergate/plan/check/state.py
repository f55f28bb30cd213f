"""What one reconcile of a ParityCheck decides from, and what it decides (plain records).

`CheckState` is gathered by the controller from its indexes; `CheckPlan` is what
`plan.check.lifecycle.decide` hands back for `kube.check_writer` to carry out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from infergate.api.golden import GoldenSpec
from infergate.jsontypes import JSON
from infergate.plan.check.observed import CheckChild, ObservedParityCheck
from infergate.plan.check.sides import SideView
from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE, SideName
from infergate.render.network import Peer


@dataclass(frozen=True)
class CheckState:
    """Everything one reconcile of a check decides from."""

    check: ObservedParityCheck
    sides: Mapping[SideName, SideView]
    children: Sequence[CheckChild]
    runner_image: str
    now: datetime
    previous_report: str | None = None
    """Report ConfigMap of the last passing check of the same deployment (regression)."""
    golden: GoldenSpec | None = None
    """The operator's golden record store, handed to every runner Job (never the tenant's)."""
    api_server: tuple[Peer, ...] = ()
    """Where the runner reaches the API server (its NetworkPolicy allows these)."""
    runner_namespace: str = DEFAULT_RUNNER_NAMESPACE
    """Where the runner's Job, ServiceAccount and NetworkPolicy live: the operator's
    namespace (or `--runner-namespace`), which no tenant can write to."""
    pull_secrets: tuple[str, ...] = ()
    """Pull secrets of infergate's own image (`--image-pull-secret`): runner and probe pods."""
    runner_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations of every runner ServiceAccount (`--runner-service-account-annotation`),
    e.g. a cloud identity for the golden store."""


@dataclass
class CheckPlan:
    """What the controller should do now."""

    status: JSON | None = None
    """Fields to merge into status (non-terminal), only when something changed."""
    terminal: JSON | None = None
    """Terminal status fields, written only if the check has not ended meanwhile."""
    create: list[JSON] = field(default_factory=list)
    delete: list[CheckChild] = field(default_factory=list)
    """Children the check owns (deleted only while their uid is still the one seen)."""
    events: list[tuple[bool, str, str]] = field(default_factory=list)
    """(warning, reason, message) Events to post on the check."""
    wake_in: float | None = None
    """Seconds until something time-based happens (the check's deadline)."""

    @property
    def quiet(self) -> bool:
        return not (self.status or self.terminal or self.create or self.delete or self.events)
