"""A restart inside the stable revision's groups, seen by the drift watch (pure).

A multi-node revision (spec.topology.nodes above 1) serves from groups of a leader and
workers. A pod of a group that is replaced (deleted, evicted, its node lost) or whose
container restarts makes the LWS controller recreate the group (RecreateGroupOnPodRestart),
and the group is not ready until it is whole again (`plan.deployment.groups`). Whole again,
it runs processes that no drift run has seen: the latest verdict does not speak for them.

With the drift watch on (`rollout.parity.watch`, the deployment asking for re-checks),
`status.drift.groups` records each group of the stable revision as last seen whole (a
digest of its pods' names, uids and restart counts). A group seen whole with another
digest restarted:

- it is named in `status.drift.restartedGroups` and `Drifted` turns Unknown with reason
  `GroupRestarted`, whatever the previous verdict said;
- a drift run starts as soon as one can, ahead of the schedule: at once when no run is in
  flight, after the one in flight otherwise (it started before the restart); the usual
  holds stand (no run while a canary rolls out, none without a golden record);
- once that run is made, the restart is its to judge: restartedGroups empties and the
  run's verdict sets Drifted (and onDrift acts on it) as for any run;
- the group is held out of serving meanwhile: it is named in `status.drift.heldGroups`
  from the sighting on, and `hold_run` records the run that re-checks it. Only a Passed
  verdict of that run or a later one releases it; Failed, Inconclusive and Error keep it
  held (fail closed), and a new restart while held waits for a run made after it. The
  hold itself is the leader's readiness gate (`plan.deployment.gates`).

A group never seen whole before (the first sighting after the revision became stable, a
group added by scaling) is recorded, not taken as restarted. Without a watch nothing is
recorded.

    observe_restarts(recorded, current, replicas) -> Restarts
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from infergate.api.drift import DriftStatus
from infergate.api.enums import ConditionStatus, VerdictOutcome
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.drift.state import DriftPlan, run_number
from infergate.plan.notices import Notice


@dataclass(frozen=True)
class Restarts:
    """The stable revision's groups as the watch records them after this sighting."""

    groups: tuple[str, ...]
    """status.drift.groups: `<index>=<digest>` of each group as last seen whole."""
    restarted: tuple[str, ...]
    """Group indexes awaiting a re-check: those pending before and those found now."""
    found: tuple[str, ...]
    """Group indexes found restarted by this sighting (announced once)."""
    held: tuple[str, ...] = ()
    """status.drift.heldGroups as recorded (of this revision, groups still wanted)."""
    hold_run: int | None = None
    """status.drift.holdRun as recorded."""


def _order(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def parse_groups(entries: Sequence[str]) -> dict[str, str]:
    """status.drift.groups as a mapping (entries without `=` are dropped)."""
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def observe_restarts(
    recorded: DriftStatus | None,
    stable: str,
    current: Mapping[str, str] | None,
    replicas: int,
) -> Restarts | None:
    """What the watch records of the stable revision's groups now (see the module docstring).

    `recorded` is status.drift as written last (ignored when it is of another revision),
    `current` the whole groups now by index (None: a one-node revision, nothing to record),
    `replicas` the groups the LeaderWorkerSet asks for: a group index beyond it was scaled
    away and is forgotten. A group that is not whole now keeps its record, so its return
    is compared with how it was before it broke.
    """
    if current is None:
        return None
    same = recorded is not None and recorded.revision == stable
    before = parse_groups(recorded.groups) if same and recorded is not None else {}
    pending = set(recorded.restarted_groups) if same and recorded is not None else set()
    found = sorted(
        (i for i, digest in current.items() if i in before and before[i] != digest), key=_order
    )
    kept = {**before, **current}
    kept = {i: d for i, d in kept.items() if not i.isdigit() or int(i) < replicas}
    pending = {i for i in pending | set(found) if i in kept}
    held = {i for i in (recorded.held_groups if same and recorded is not None else []) if i in kept}
    return Restarts(
        groups=tuple(f"{i}={kept[i]}" for i in sorted(kept, key=_order)),
        restarted=tuple(sorted(pending, key=_order)),
        found=tuple(found),
        held=tuple(sorted(held, key=_order)),
        hold_run=recorded.hold_run if same and recorded is not None else None,
    )


def hold_after(
    restarts: Restarts, *, created: int | None, verdict: DriftStatus
) -> tuple[tuple[str, ...], int | None]:
    """(status.drift.heldGroups, holdRun) after this reconcile (pure).

    A group is held from the sighting of its restart on. While a restart waits for its run,
    no verdict releases anything (`hold_run` None: a run in flight started before it); the
    run made for it (`created`) becomes `hold_run`, and a Passed verdict of that run or a
    later one (`verdict`, status.drift as judged now) releases every held group.
    """
    held = set(restarts.held) | set(restarts.restarted)
    hold_run = restarts.hold_run
    if restarts.restarted:
        hold_run = created
    if not held:
        return (), None
    judged = run_number(verdict.last_verdict_check or "")
    if (
        hold_run is not None
        and verdict.last_verdict is VerdictOutcome.PASSED
        and judged is not None
        and judged >= hold_run
    ):
        return (), None
    return tuple(sorted(held, key=_order)), hold_run


def held_words(stable: str, held: Sequence[str]) -> str:
    """Which groups of the stable revision do not serve, and until when, for the Drifted
    condition (whose verdict part says what the latest run found)."""
    noun = "group" if len(held) == 1 else "groups"
    return (
        f"{noun} {', '.join(held)} of stable revision {stable} held out of serving until a "
        "drift run made after the restart passes"
    )


def restart_words(stable: str, groups: Sequence[str]) -> str:
    """'group 0 of stable revision X restarted' for a condition or an Event."""
    which = ", ".join(groups)
    noun = "group" if len(groups) == 1 else "groups"
    return (
        f"{noun} {which} of stable revision {stable} restarted (a pod replaced or a container "
        "restarted) after the latest drift run started"
    )


def with_restarts(plan: DriftPlan, stable: str, restarts: Restarts) -> DriftPlan:
    """`plan` with the groups recorded in status.drift, and while a restart awaits its
    re-check, Drifted saying so: Unknown (GroupRestarted), or still True after a drift was
    seen (a restart clears no alarm). A run made now takes the restart over."""
    if plan.status is None:
        return plan
    created = plan.create_run is not None
    held, hold_run = hold_after(restarts, created=plan.create_run, verdict=plan.status)
    status = plan.status.model_copy(
        update={
            "groups": list(restarts.groups),
            "restarted_groups": [] if created else list(restarts.restarted),
            "held_groups": list(held),
            "hold_run": hold_run,
        }
    )
    condition = plan.condition
    if restarts.restarted and plan.rollback_to is None:
        words = restart_words(stable, restarts.restarted)
        if created:
            said = f"{words}: drift run {status.check} re-checks it; it serves once that passes"
        else:
            said = (
                f"{words}: a drift run re-checks it as soon as one can start "
                f"({status.message}); held out of serving until it passes"
            )
        if condition is not None and condition.status is ConditionStatus.TRUE:
            condition = replace(condition, message=f"{condition.message} | {said}")
        else:
            condition = ConditionUpdate(
                reasons.DRIFTED, ConditionStatus.UNKNOWN, reasons.GROUP_RESTARTED, said
            )
    elif (
        held
        and condition is not None
        and condition.reason != reasons.GROUP_RESTARTED  # which says so already
        and plan.rollback_to is None
    ):
        words = held_words(stable, held)
        if words not in condition.message:
            condition = replace(condition, message=f"{condition.message} | {words}")
    notices = plan.notices
    if restarts.found:
        notices = (
            *notices,
            Notice(True, reasons.GROUP_RESTARTED, restart_words(stable, restarts.found)),
        )
    return replace(plan, status=status, condition=condition, notices=notices)
