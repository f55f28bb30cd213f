"""The drift watch in the API: re-check the stable revision against its own golden record.

    rollout:
      parity:
        suite: ...
        watch: {schedule: "0 3 * * *"}       # or {intervalSeconds: 86400}
        onDrift: {action: alert}             # none | alert | rollback (+ rollbackTo: <hash>)

The drift ParityChecks take the stable revision's live pods as the candidate and its
golden record as the baseline; `status.drift` and the `Drifted` condition say what they
found. None of it changes numerics: the revision hash declares rollout cosmetic.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from infergate.api.base import SHORT_TEXT_MAX, KubeModel, cel, cel_rules
from infergate.api.common import ObjectName, ShortHash
from infergate.api.cron import SCHEDULE_PATTERN, CronError, CronSchedule, parse_cron
from infergate.api.enums import VerdictOutcome
from infergate.api.parity_check import SOURCE_RULES, TEMPLATE_RULES, ParityCheckTemplate
from infergate.api.shadow import CheckSource

INTERVAL_MIN = 300
INTERVAL_MAX = 31 * 86400
_WATCH_SOURCE = (
    "watch needs source suite: a drift run replays the suite on the stable revision (a shadow "
    "check has no suite to replay)"
)
_SCHEDULE = (
    "schedule must be a cron expression of 5 fields in range (minute 0-59, hour 0-23, "
    "day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT), e.g. '0 3 * * *', "
    "or @hourly, @daily, @weekly, @monthly, @yearly"
)
GroupSeen = Annotated[str, StringConstraints(max_length=64)]
_ONE_OF = "watch: set exactly one of schedule (a 5-field cron expression, UTC) or intervalSeconds"


class DriftWatch(KubeModel):
    """When the stable revision is checked against its golden record: a cron schedule or a fixed
    interval, exactly one. A run that is still going when the next is due delays it (runs never
    overlap or pile up)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(cel("has(self.schedule) != has(self.intervalSeconds)", _ONE_OF))
    )

    schedule: str | None = Field(
        default=None,
        min_length=1,
        max_length=SHORT_TEXT_MAX,
        json_schema_extra=cel_rules(cel(f"self.matches(r'{SCHEDULE_PATTERN}')", _SCHEDULE)),
    )
    """A five-field cron expression in UTC (minute hour day-of-month month day-of-week), e.g.
    "0 3 * * *" for 03:00 every day, or @hourly, @daily, @weekly, @monthly, @yearly."""
    interval_seconds: int | None = Field(default=None, ge=INTERVAL_MIN, le=INTERVAL_MAX)
    """Seconds between runs (300 to 2678400), counted from the start of the last run, or for the
    first run from when the revision became stable."""

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_cron(value)
            except CronError as error:
                raise ValueError(f"watch.schedule: {error}") from error
        return value

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.schedule is None) == (self.interval_seconds is None):
            raise ValueError(_ONE_OF)
        return self

    def cron(self) -> CronSchedule | None:
        """The parsed schedule (None for an interval)."""
        return parse_cron(self.schedule) if self.schedule is not None else None


class DriftAction(StrEnum):
    """What a drift (a Failed drift check) does besides the Drifted condition and the metric:
    none (nothing more), alert (a Warning Event) or rollback (an Event, and the revision
    rollbackTo becomes stable)."""

    NONE = "none"
    ALERT = "alert"
    ROLLBACK = "rollback"


_ROLLBACK_TO = "onDrift.rollbackTo is required with action rollback and not allowed otherwise"


class OnDrift(KubeModel):
    """What happens when the stable revision no longer matches its golden record."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "(has(self.action) && self.action == 'rollback') == has(self.rollbackTo)",
                _ROLLBACK_TO,
                field_path=".rollbackTo",
            )
        )
    )

    action: DriftAction = DriftAction.ALERT
    """none, alert (default) or rollback."""
    rollback_to: ShortHash | None = None
    """With action rollback: the revision (10 hex digits, as in status.revisions) that becomes
    stable on a drift. It must be in the revision history (revisionHistoryLimit) and once
    promoted; otherwise nothing is rolled back and status.drift.message says why."""

    @model_validator(mode="after")
    def _target(self) -> Self:
        if (self.action is DriftAction.ROLLBACK) != (self.rollback_to is not None):
            raise ValueError(
                f"onDrift.rollbackTo: {_ROLLBACK_TO} (action is {self.action.value!r})"
            )
        return self


class DriftStatus(KubeModel):
    """The drift watch of the stable revision: its latest run and the next one."""

    revision: str | None = Field(default=None, max_length=64)
    """Stable revision the watch checks."""
    run: int | None = Field(default=None, ge=0)
    """Number of the latest run of that revision (the N of its check `<name>-<revision>-driftN`)."""
    check: ObjectName | None = None
    """The latest drift ParityCheck."""
    check_uid: str | None = Field(default=None, max_length=SHORT_TEXT_MAX)
    """uid of that ParityCheck, recorded when the operator created it: only that object's
    verdict counts, so a check of the same name and labels made by anyone else is ignored."""
    spec_digest: str | None = Field(default=None, max_length=64)
    """sha256 of the spec the operator created that run with (its infergate.io/spec-digest):
    a run whose spec differs never counts."""
    ignored: list[ObjectName] = Field(default_factory=list, max_length=16)
    """ParityChecks named and labelled like a run of the stable revision that the operator did
    not make (another uid, or another spec): their verdicts are ignored."""
    last_run: datetime | None = None
    """When the latest run started (its check was created)."""
    last_verdict: VerdictOutcome | None = None
    """Outcome of the latest run that ended: Passed (no drift), Failed (drift), Inconclusive or
    Error (neither is a pass)."""
    last_verdict_check: ObjectName | None = None
    """The run that outcome is of."""
    last_verdict_time: datetime | None = None
    """When it ended."""
    running: bool | None = None
    """The latest run is under way."""
    next_run: datetime | None = None
    """When the next run starts; unset while one runs or none can (see message)."""
    message: str | None = Field(default=None, max_length=4096)
    """What the watch is doing or why it cannot run, for people."""
    groups: list[GroupSeen] = Field(default_factory=list, max_length=256)
    """Multi-node stable revision: each group as last seen whole, `<group index>=<digest of
    its pods' names, uids and restart counts>`. A group seen whole again with another digest
    restarted (a pod replaced, or a container restarted)."""
    restarted_groups: list[GroupSeen] = Field(default_factory=list, max_length=256)
    """Group indexes of the stable revision that restarted since the latest drift run
    started: a run re-checks them as soon as one can start, ahead of the schedule."""
    held_groups: list[GroupSeen] = Field(default_factory=list, max_length=256)
    """Group indexes of the stable revision held out of serving (its leader's readiness gate
    infergate.io/checked False) since a restart, until a drift run made after the restart
    passes. A run that fails, is inconclusive or errs keeps them held."""
    hold_run: int | None = Field(default=None, ge=0)
    """Number of the drift run that re-checks the held groups (the N of `<name>-<revision>-driftN`,
    no unit): a Passed verdict of it or of a later run releases them. Unset while the
    re-check waits for a run to start."""


class RolloutParity(ParityCheckTemplate):
    """The parity check run against each canary (baseline: stable, candidate: canary), and the
    drift watch that re-checks the stable revision against its own golden record."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            *TEMPLATE_RULES,
            *SOURCE_RULES,
            cel(
                "!has(self.watch) || !has(self.source) || self.source == 'suite'",
                _WATCH_SOURCE,
                field_path=".watch",
            ),
        )
    )

    watch: DriftWatch | None = None
    """Re-run the suite on the stable revision on this schedule and compare it with the stable's
    own golden record (a record stored by a Passed check of it). Unset: no drift watch."""
    on_drift: OnDrift = Field(default_factory=OnDrift, json_schema_extra={"default": {}})
    """What a drift does besides setting the Drifted condition and the metric (default alert)."""

    def template_json(self) -> dict[str, Any]:
        """The check template alone, as a ParityCheck's spec takes it (no watch, no onDrift)."""
        return {k: v for k, v in self.to_kube().items() if k not in ("watch", "onDrift")}

    @model_validator(mode="after")
    def _watch_replays_the_suite(self) -> Self:
        if self.watch is not None and self.source is not CheckSource.SUITE:
            raise ValueError(
                f"rollout.parity.watch: not allowed with source shadow; {_WATCH_SOURCE}"
            )
        return self
