"""Rollout steps that tidy up: which revisions keep their objects at what size, which
checks go, and the Progressing condition when nothing else set it (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from infergate.api.deployment_status import RevisionRecord
from infergate.api.enums import ConditionStatus
from infergate.plan import reasons
from infergate.plan.conditions import ConditionUpdate
from infergate.plan.deployment.state import (
    ROLE_CANARY,
    ROLE_PENDING,
    ROLE_RETIRED,
    ROLE_STABLE,
    Context,
    KeptRevision,
    Rollout,
)


def _created(ctx: Context, record: RevisionRecord) -> datetime:
    return record.created_at or datetime.min.replace(tzinfo=ctx.now.tzinfo)


def history(ctx: Context, rollout: Rollout) -> list[RevisionRecord]:
    """Records of stable, canary, desired and the stable a promotion replaces, plus the newest
    `revisionHistoryLimit` others."""
    previous = rollout.promotion.previous if rollout.promotion is not None else None
    pinned = {r for r in (rollout.stable, rollout.canary, ctx.desired, previous) if r is not None}
    others = sorted(
        (r for r in rollout.records.values() if r.hash not in pinned),
        key=lambda r: _created(ctx, r),
        reverse=True,
    )[: ctx.spec.revision_history_limit]
    kept = [*(rollout.records[r] for r in pinned if r in rollout.records), *others]
    return sorted(kept, key=lambda r: _created(ctx, r))


def sizes(
    ctx: Context, rollout: Rollout, records: list[RevisionRecord]
) -> tuple[Rollout, list[KeptRevision]]:
    """The revisions whose objects stay, with sizes: stable at spec.replicas, canary at
    canaryReplicas, the stable a promotion replaces at its size until the promotion ends
    (`plan.deployment.promotion`), other earlier stables kept until the stable is fully
    rolled out, then at 0."""
    kept: list[KeptRevision] = []
    stable_ready = False
    stable = rollout.stable
    if stable is not None:
        stable_spec = ctx.revision_spec(stable)
        if stable_spec is None:
            rollout = replace(
                rollout,
                progress=ConditionUpdate(
                    reasons.PROGRESSING,
                    ConditionStatus.FALSE,
                    reasons.REVISION_LOST,
                    f"stable revision {stable}: its Deployment and ConfigMap were "
                    "deleted, so its configuration is lost; set the spec back to it or roll "
                    "back to a retained revision",
                ),
            )
        else:
            kept.append(KeptRevision(stable, stable_spec, ctx.spec.replicas, ROLE_STABLE))
        stable_ready = ctx.ready(stable, ctx.spec.replicas)
    else:
        kept.append(KeptRevision(ctx.desired, ctx.spec, ctx.spec.replicas, ROLE_PENDING))
    if rollout.canary is not None:
        kept.append(
            KeptRevision(rollout.canary, ctx.spec, ctx.spec.rollout.canary_replicas, ROLE_CANARY)
        )
    draining: list[str] = []
    running = {k.revision for k in kept}
    previous = rollout.promotion.previous if rollout.promotion is not None else None
    earlier = [r.hash for r in records if r.promoted_at is not None]
    # The stable being replaced stays even without a record (a status lost midway).
    if previous is not None and previous not in earlier:
        earlier.append(previous)
    for revision in earlier:
        spec = ctx.revision_spec(revision)
        if revision in running or spec is None:
            continue
        deployment = ctx.observed.deployments.get(revision)
        current = deployment.spec_replicas if deployment is not None else 0
        # It serves until traffic has moved and the delay passed: never scaled down before.
        replicas = current if revision == previous or not stable_ready else 0
        if replicas and revision != previous:
            draining.append(revision)
        kept.append(KeptRevision(revision, spec, replicas, ROLE_RETIRED))
    if draining and rollout.progress is None:
        rollout = replace(
            rollout,
            progress=ConditionUpdate(
                reasons.PROGRESSING,
                ConditionStatus.TRUE,
                reasons.PROMOTING,
                f"revision {rollout.stable} is stable: "
                f"{ctx.availability(rollout.stable or '')}; revision {', '.join(draining)} is "
                "scaled down once it is rolled out",
            ),
        )
    return rollout, kept


def prune_checks(ctx: Context, rollout: Rollout, records: list[RevisionRecord]) -> Rollout:
    """Delete the deployment's own checks of revisions out of history, or superseded
    before they ended (a check someone else made is never deleted). Drift runs of a revision
    in history are the drift watch's to delete (`plan.drift.watch`), never superseded by a
    canary."""
    known = {r.hash for r in records}
    owner = ctx.state.owner.uid
    gone = list(rollout.delete_checks)
    for check in ctx.observed.checks.values():
        if check.owner_uid != owner or check.name in gone:
            continue
        stale = check.candidate_revision not in known
        superseded = (
            not check.drift and check.candidate_revision != rollout.canary and not check.terminal
        )
        if stale or superseded:
            gone.append(check.name)
    return replace(rollout, delete_checks=tuple(gone))


def settle(ctx: Context, rollout: Rollout) -> ConditionUpdate:
    """Progressing as the steps left it; else rolled back or complete."""
    if rollout.progress is not None:
        return rollout.progress
    record = rollout.records.get(ctx.desired)
    if record is not None and record.rejected:
        return rollout.rolled_back(ctx, ctx.desired)
    return ConditionUpdate(
        reasons.PROGRESSING,
        ConditionStatus.FALSE,
        reasons.ROLLOUT_COMPLETE,
        f"revision {rollout.stable} is stable: {ctx.availability(rollout.stable or '')}",
    )
