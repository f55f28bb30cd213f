"""Ready, Reconciling and Stalled: the conditions tools read, from each kind's own.

Tools that wait on or judge objects they know nothing of read a few well-known
condition types: `kubectl wait --for=condition=Ready`, Flux and Argo CD health checks
read `Ready`; kstatus (sigs.k8s.io/cli-utils, behind `kpt live` and `kubectl apply
--wait`-style tools) reads `Reconciling` and `Stalled`, abnormal-true, after checking
`status.observedGeneration`. This module says which of three states an object is in
and writes it as all three, one reason and message shared:

- ready: what the spec asks for is done (Ready=True, the other two False);
- reconciling: the operator is still working on it (Reconciling=True);
- stalled: it will not get there without a person (Stalled=True).

The states are read off the conditions each kind already has, so they never say
something those do not. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from infergate.api.common import Condition
from infergate.api.enums import ConditionStatus
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate, find_condition

TRUE = ConditionStatus.TRUE
FALSE = ConditionStatus.FALSE


class State(Enum):
    """Where an object stands, as tools that know nothing of it need to know."""

    READY = "ready"
    RECONCILING = "reconciling"
    STALLED = "stalled"


@dataclass(frozen=True)
class Readiness:
    """One state with the reason and message all three conditions carry."""

    state: State
    reason: str
    message: str

    def updates(self) -> list[ConditionUpdate]:
        """Ready, Reconciling and Stalled, exactly one of them True."""
        return [
            ConditionUpdate(
                type_,
                TRUE if self.state is state else FALSE,
                self.reason,
                self.message,
            )
            for type_, state in (
                (reasons.READY, State.READY),
                (reasons.RECONCILING, State.RECONCILING),
                (reasons.STALLED, State.STALLED),
            )
        ]


# Degraded reasons that only time or the operator clears (the stable's pods coming
# back): still in progress, not stalled.
_DEGRADED_IN_PROGRESS = frozenset({reasons.REPLICAS_UNAVAILABLE})


def deployment_readiness(
    available: ConditionUpdate,
    progressing: ConditionUpdate,
    degraded: ConditionUpdate,
    *,
    available_replicas: int,
    replicas: int,
) -> Readiness:
    """An InferenceDeployment's state, from its Available, Progressing and Degraded
    conditions and the available pods of its stable revision.

    - stalled: Degraded for a reason a person must clear (a deadline passed, an invalid
      spec, a lost revision, a child's name held by someone else's object), or the
      spec's revision was rolled back (it is not retried until the spec changes);
    - reconciling: a rollout moves (Progressing=True, a manual gate included), or the
      stable revision serves fewer pods than spec.replicas;
    - ready: the rollout is complete and the stable revision serves spec.replicas pods
      (or none, scaled to zero on purpose).

    ParityPassed, ConfigDrifted and Drifted do not count: a failed check shows as its
    rollback, a reverted edit is already undone, and a drift of the stable revision's
    answers is for its owners to judge (it has its own alert).
    """
    if degraded.status is TRUE and degraded.reason not in _DEGRADED_IN_PROGRESS:
        return Readiness(State.STALLED, degraded.reason, degraded.message)
    if progressing.status is FALSE and progressing.reason == reasons.ROLLED_BACK:
        return Readiness(State.STALLED, progressing.reason, progressing.message)
    if progressing.status is not FALSE:
        return Readiness(State.RECONCILING, progressing.reason, progressing.message)
    if available.reason == reasons.SCALED_TO_ZERO:
        return Readiness(State.READY, available.reason, available.message)
    if available.status is not TRUE:
        return Readiness(State.RECONCILING, available.reason, available.message)
    if available_replicas < replicas:
        return Readiness(State.RECONCILING, reasons.WAITING_FOR_REPLICAS, available.message)
    return Readiness(State.READY, progressing.reason, progressing.message)


def check_readiness(conditions: Sequence[Condition]) -> Readiness:
    """A ParityCheck's state, from its Complete and Passed conditions.

    Like a Job's: reconciling until it ends, ready when it ended Passed, stalled when it
    ended any other way (Failed, Inconclusive, Error: a new check is needed).
    """
    complete = find_condition(conditions, reasons.CHECK_COMPLETE)
    if complete is None:
        return Readiness(State.RECONCILING, reasons.CHECK_NOT_STARTED, "the check has not started")
    if complete.status is not TRUE:
        return Readiness(State.RECONCILING, complete.reason, complete.message)
    passed = find_condition(conditions, reasons.CHECK_PASSED)
    if passed is not None and passed.status is TRUE:
        return Readiness(State.READY, complete.reason, complete.message)
    return Readiness(State.STALLED, complete.reason, complete.message)
