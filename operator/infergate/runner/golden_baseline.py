"""A golden record as a check's baseline: found, verified, and read prompt by prompt.

`spec.baseline.golden` names an InferenceDeployment's record in the operator's store
(a revision, or the latest other than the candidate's). `open_golden_baseline` finds
the newest record answering exactly this check's suite and sampling, verifies it holds
every prompt (and full hidden states, when the check compares them), and fails closed:
no store, no such record, or a record that cannot be vouched for is a
`GoldenBaselineError` naming which, never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from infergate.api.check_status import GoldenBaselineStatus
from infergate.api.golden import GoldenSpec
from infergate.api.parity_check import ParityCheckSpec
from infergate.golden.config import store_from_spec
from infergate.golden.entry import GoldenEntry
from infergate.golden.errors import GoldenError, GoldenUnavailableError
from infergate.golden.keys import Role
from infergate.golden.retention import IndexItem
from infergate.golden.settings import HiddenStatesPolicy
from infergate.golden.store import GoldenRecord, GoldenStore
from infergate.parity.record import PromptRecord
from infergate.runner.golden import check_suite_digest
from infergate.runner.sides import SideTarget
from infergate.suite import Suite

GOLDEN_URL_PREFIX: Final = "golden:"
"""How a golden baseline's `url` starts (nothing is called there)."""


class GoldenBaselineError(RuntimeError):
    """The golden baseline cannot be used; the check ends in Error with this reason (or,
    when `retry`, the attempt fails for the Job to retry: the store was unreachable)."""

    def __init__(self, reason: str, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry = retry


class GoldenBaseline:
    """A verified golden record serving as a check's baseline."""

    def __init__(
        self, store: GoldenStore, record: GoldenRecord, *, hidden: bool, suite: str
    ) -> None:
        self.store = store
        self.record = record
        self.entry = record.entry
        self.hidden = hidden
        self.meta = record.meta.model_copy(update={"suite": suite})

    def prompt(self, prompt_id: str) -> PromptRecord:
        found = self.record.get(prompt_id)
        return found if self.hidden else replace(found, hidden_states=None)

    def status(self) -> dict[str, Any]:
        entry = self.entry
        return GoldenBaselineStatus(
            entry=str(entry.location),
            store=self.store.describe(),
            revision=entry.revision,
            recorded=entry.created,
            check=entry.check or None,
        ).to_kube()

    def note(self) -> str:
        entry = self.entry
        return (
            f"Baseline: the golden record {entry.location} of revision {entry.revision} "
            f"({entry.role.value} of check {entry.check or '?'}, recorded "
            f"{entry.created.strftime('%Y-%m-%d %H:%M:%S UTC')}, engine fingerprint "
            f"{entry.fingerprint[:19]}), read from {self.store.describe()}; no baseline pods "
            "ran."
        )

    def close(self) -> None:
        self.record.close()


def _choose(
    items: list[IndexItem], *, revision: str | None, exclude: str | None, digest: str,
    fingerprint: str | None,
) -> tuple[GoldenEntry | None, list[str]]:  # fmt: skip
    """The newest matching entry (None: none), and what else that revision holds.

    Fail closed: the newest entry of the revision that cannot be read is an error, not
    a reason to fall back to an older one.
    """
    others: list[str] = []
    for item in reversed(items):
        name = item.location.name
        if revision is not None and name.revision != revision:
            continue
        if revision is None and name.revision == exclude:
            continue
        entry = item.entry
        if entry is None:
            raise GoldenBaselineError(
                "GoldenRecordCorrupt",
                f"golden record {item.location} cannot be read: {item.problem}",
            )
        if name.role is not Role.BASELINE and not entry.self_scored:
            # This candidate's outputs forked from its baseline's: it was scored along the
            # other side's sequence and kept hidden states only where the two agreed.
            others.append(f"{item.location} (a candidate's record, scored along another sequence)")
            continue
        if entry.suite_digest != digest:
            others.append(f"{entry.location} (suite {entry.suite_digest[:12]})")
            continue
        if fingerprint is not None and entry.fingerprint != fingerprint:
            others.append(f"{entry.location} (fingerprint {entry.fingerprint[:19]})")
            continue
        return entry, others
    return None, others


def open_golden_baseline(
    golden: GoldenSpec | None,
    *,
    namespace: str,
    spec: ParityCheckSpec,
    suite: Suite,
    candidate_revision: str | None,
    environ: Mapping[str, str] | None = None,
) -> GoldenBaseline:
    """The record spec.baseline.golden names, verified and matched to this check's suite.

    Never a pass against a record that cannot be vouched for: no store, no record of that
    revision for this suite and sampling, a corrupt record, or one without what the check
    compares are `GoldenBaselineError`s saying which.
    """
    ref = spec.baseline.golden
    deployment = spec.golden_deployment()
    if ref is None or deployment is None:
        raise GoldenBaselineError("InvalidSpec", "baseline.golden: no InferenceDeployment")
    if golden is None:
        raise GoldenBaselineError(
            "GoldenStoreNotConfigured",
            "baseline.golden: this operator keeps no golden records (its --golden-config is "
            "unset); ask the cluster's operator to configure a golden store",
        )
    digest = check_suite_digest(spec, suite)
    revision = None if ref.revision == "latest" else ref.revision
    try:
        store = store_from_spec(golden.store, environ=environ)
        items = store.list_entries(namespace, deployment)
    except GoldenUnavailableError as err:
        raise GoldenBaselineError("GoldenStoreUnavailable", str(err), retry=True) from err
    except (GoldenError, OSError) as err:
        raise GoldenBaselineError("GoldenStoreUnusable", str(err)) from err
    entry, others = _choose(
        items, revision=revision, exclude=candidate_revision, digest=digest,
        fingerprint=ref.fingerprint,
    )  # fmt: skip
    if entry is None:
        what = f"revision {revision}" if revision else "any revision but the candidate's"
        detail = "; other records of it: " + ", ".join(others[:5]) if others else ""
        raise GoldenBaselineError(
            "GoldenRecordNotFound",
            f"baseline.golden: {store.describe()} holds no golden record of "
            f"{namespace}/{deployment} {what} for this suite and sampling (digest "
            f"{digest[:12]}){detail}. A record answers exactly the suite and sampling of "
            "the Passed check that stored it.",
        )
    try:
        record = store.open(entry)
    except GoldenUnavailableError as err:
        raise GoldenBaselineError("GoldenStoreUnavailable", str(err), retry=True) from err
    except (GoldenError, OSError) as err:
        raise GoldenBaselineError(
            "GoldenRecordCorrupt", f"golden record {entry.location}: {err}"
        ) from err
    hidden = spec.hidden_states.enabled
    try:
        _check_coverage(entry, record, suite, hidden=hidden)
    except BaseException:
        record.close()
        raise
    return GoldenBaseline(store, record, hidden=hidden, suite=suite.name)


def _check_coverage(
    entry: GoldenEntry, record: GoldenRecord, suite: Suite, *, hidden: bool
) -> None:
    """The record answers every prompt of the suite, with hidden states if they are compared."""
    held = set(record.prompt_ids)
    missing = [p.id for p in suite.prompts if p.id not in held]
    if missing:
        raise GoldenBaselineError(
            "GoldenRecordCorrupt",
            f"golden record {entry.location} lacks prompts {', '.join(missing[:5])}",
        )
    partial = [p.id for p in entry.prompts if p.hidden is not HiddenStatesPolicy.FULL]
    if hidden and partial:
        raise GoldenBaselineError(
            "GoldenRecordWithoutHiddenStates",
            f"golden record {entry.location} keeps no full hidden states for "
            f"{len(partial)} of {len(entry.prompts)} prompts (the store's policy is "
            f"hiddenStates: {entry.hidden_states.value}); set hiddenStates.enabled: "
            "false to compare tokens and logprobs against it, or record with "
            "hiddenStates: full",
        )


def golden_target(baseline: GoldenBaseline) -> SideTarget:
    """The golden baseline as the runner describes a side (no URL: nothing is called)."""
    entry, meta = baseline.entry, baseline.meta
    return SideTarget(
        side="baseline",
        url=f"{GOLDEN_URL_PREFIX}{entry.location}",
        model=meta.model,
        engine=meta.engine,
        engine_version=meta.engine_version,
        dtype=meta.dtype,
        description=(
            f"golden record of {entry.deployment} revision {entry.revision} "
            f"({meta.engine}, {meta.dtype}), recorded {entry.created.isoformat()}"
        ),
        revision=entry.revision,
        deployment=entry.deployment,
        effective_config=dict(meta.effective_config),
        fingerprints=dict(meta.fingerprints),
    )
