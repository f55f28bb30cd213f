"""Golden records in the runner: a Passed check stores both sides' records.

The store is the operator's, never the tenant's: the operator renders the runner Job
with `$INFERGATE_GOLDEN_CONFIG` (a `GoldenSpec` as JSON: the store, the size policy),
mounts the store's claim or passes the S3 Secret's keys as env, and the runner reads
nothing else. A ParityCheck cannot name a store.

`GoldenRecorder` stages each measured pair as the suite runs (memory holds one pair)
and commits both records only when the verdict is Passed. A store that fails does
not change the verdict; the status says that nothing was stored and why. A record
serving as a later check's baseline is read by `runner.golden_baseline`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from infergate.api.check_status import GoldenRecordStatus
from infergate.api.golden import GoldenSpec
from infergate.api.parity_check import ParityCheckSpec
from infergate.errors import KubeError
from infergate.golden.config import policy_from_spec, store_from_spec
from infergate.golden.errors import GoldenConfigError, GoldenError
from infergate.golden.keys import engine_fingerprint, suite_digest
from infergate.golden.recording import CheckIdentity, GoldenRecording, SideIdentity
from infergate.golden.retention import (
    Deletion,
    DeploymentHistory,
    DeploymentKey,
    listed_histories,
    plan_retention,
    scope_retention,
)
from infergate.golden.settings import GOLDEN_CONFIG_ENV, WhenDeleted
from infergate.golden.store import GoldenStore
from infergate.parity.record import PromptRecord, RecordMeta
from infergate.runner.sides import SideTarget
from infergate.suite import Suite

MESSAGE_MAX: Final = 1024

DeploymentLister = Callable[[], Sequence[Mapping[str, Any]]]
"""The InferenceDeployments of the check's namespace (a list call); raises `KubeError`."""


def golden_from_env(environ: Mapping[str, str]) -> GoldenSpec | None:
    """The operator's golden settings, or None when it keeps no golden records."""
    text = environ.get(GOLDEN_CONFIG_ENV)
    if not text:
        return None
    try:
        return GoldenSpec.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        raise GoldenConfigError(
            f"${GOLDEN_CONFIG_ENV} is not a golden store setting: {err}"
        ) from err


def check_suite_digest(spec: ParityCheckSpec, suite: Suite) -> str:
    """What a record answers: the suite's prompts and every generation setting.

    The hidden-state settings are left out: which positions a record kept is in its
    entry, and a check that compares no hidden states can use any record.
    """
    return suite_digest(suite.prompts, spec.sampling.to_kube())


def side_fingerprint(meta: RecordMeta) -> str:
    """The engine fingerprint a side's record is keyed by."""
    return engine_fingerprint(
        engine=meta.engine,
        engine_version=meta.engine_version,
        dtype=meta.dtype,
        effective_config=meta.effective_config,
        fingerprints=meta.fingerprints,
    )


def _status(stored: bool, store: str | None, message: str, **extra: Any) -> dict[str, Any]:
    return GoldenRecordStatus(
        stored=stored, store=store, message=message[:MESSAGE_MAX], **extra
    ).to_kube()


class GoldenRecorder:
    """Both sides of one check staged for the store; `finish()` commits them on Passed."""

    def __init__(
        self,
        store: GoldenStore | None,
        recording: GoldenRecording | None,
        digest: str | None,
        skipped: str | None,
        *,
        golden: GoldenSpec | None = None,
        where: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self._recording = recording
        self._digest = digest
        self._problem = skipped
        self._golden = golden
        self.where = where
        """(namespace, deployment) the records go under."""

    @classmethod
    def start(
        cls,
        golden: GoldenSpec | None,
        *,
        namespace: str,
        check: str,
        spec: ParityCheckSpec,
        suite: Suite,
        baseline: tuple[SideTarget, RecordMeta],
        candidate: tuple[SideTarget, RecordMeta],
        environ: Mapping[str, str] | None = None,
    ) -> GoldenRecorder | None:
        """A recorder, or None when the operator keeps no golden records.

        A check whose sides are not two revisions of one InferenceDeployment is not
        recorded (a record is keyed by its revision); the recorder then only says why.
        """
        if golden is None:
            return None
        digest = check_suite_digest(spec, suite)
        try:
            store = store_from_spec(golden.store, environ=environ)
        except GoldenError as err:
            return cls(None, None, digest, f"golden store unusable: {err}")
        (base, base_meta), (cand, cand_meta) = baseline, candidate
        if base.revision is None or cand.revision is None or base.deployment != cand.deployment:
            return cls(
                store, None, digest,
                "not recorded: golden records are kept for two revisions of one "
                "InferenceDeployment, and this check compares "
                f"{base.description} with {cand.description}",
            )  # fmt: skip
        assert base.deployment is not None  # noqa: S101 - a revision side names its deployment
        identity = CheckIdentity(
            namespace=namespace,
            deployment=base.deployment,
            check=check,
            suite=suite.name,
            suite_digest=digest,
            baseline=SideIdentity(base.revision, side_fingerprint(base_meta), base_meta),
            candidate=SideIdentity(cand.revision, side_fingerprint(cand_meta), cand_meta),
        )
        try:
            recording = store.begin(identity, policy_from_spec(golden))
        except (GoldenError, OSError) as err:
            return cls(store, None, digest, f"golden store unusable: {err}")
        return cls(
            store, recording, digest, None, golden=golden, where=(namespace, base.deployment)
        )

    def add(self, baseline: PromptRecord, candidate: PromptRecord) -> None:
        """Stage one measured pair; a store problem stops recording, never the check."""
        if self._recording is None:
            return
        try:
            self._recording.add(baseline, candidate)
        except (GoldenError, OSError) as err:
            self._problem = f"not recorded: {err}"
            self._recording.discard()
            self._recording = None

    def finish(
        self,
        passed: bool,
        *,
        outcome: str,
        profile: str,
        history: DeploymentHistory | None = None,
        list_deployments: DeploymentLister | None = None,
    ) -> dict[str, Any]:
        """Commit both records if the check Passed, then apply retention (`history`: what
        the deployment still keeps; `list_deployments`: the namespace's deployments, asked
        only under `whenDeleted: Delete`); the status `golden` field."""
        where = self.store.describe() if self.store is not None else None
        recording, self._recording = self._recording, None
        if not passed:
            if recording is not None:
                recording.discard()
            return _status(
                False, where, f"only a Passed check stores golden records; this one is {outcome}",
                suite_digest=self._digest,
            )  # fmt: skip
        if recording is None:
            return _status(False, where, self._problem or "not recorded", suite_digest=self._digest)
        try:
            base, cand = recording.commit(profile=profile)
        except (GoldenError, OSError) as err:
            return _status(False, where, f"not recorded: {err}", suite_digest=self._digest)
        pruned = self._retain(history, list_deployments)
        forms = ", ".join(
            f"{entry.role.value}: "
            + " ".join(f"{n} {form}" for form, n in entry.hidden_counts().items() if n)
            for entry in (base, cand)
        )
        return _status(
            True,
            where,
            f"hidden states kept per prompt ({forms}){pruned}",
            suite_digest=self._digest,
            entries=[str(base.location), str(cand.location)],
            size_bytes=base.size_bytes + cand.size_bytes,
        )

    def _retain(
        self, history: DeploymentHistory | None, list_deployments: DeploymentLister | None
    ) -> str:
        """Delete the records retention no longer keeps; a note for the status.

        The deployment's own records follow `history`. Under `whenDeleted: Delete` the
        other deployments of the namespace are listed too, after the index is read (a
        record indexed before the listing belongs to a deployment that existed before
        it), and the records of those the listing did not return are deleted. A listing
        that fails deletes nothing of the other deployments and says so. Nothing outside
        the check's namespace is read or deleted.
        """
        if history is None or self.store is None or self._golden is None or self.where is None:
            return ""
        retention = self._golden.retention
        namespace = self.where[0]
        others = retention.when_deleted is WhenDeleted.DELETE and list_deployments is not None
        note = ""
        try:
            items = self.store.list_entries(namespace, None if others else self.where[1])
            listed = None
            if others:
                assert list_deployments is not None  # noqa: S101 - `others` says so
                try:
                    listed = listed_histories(list_deployments())
                except (KubeError, ValueError) as err:
                    note = (
                        "; records of deleted InferenceDeployments not pruned: could not list "
                        f"the InferenceDeployments of {namespace} ({err}), so nothing of other "
                        "deployments was deleted"
                    )
            scope = scope_retention(
                items, listed, namespaces={namespace}, known={self.where: history}
            )
            deletions = [
                d
                for d in plan_retention(
                    scope.items,
                    scope.histories,
                    when_deleted=retention.when_deleted,
                    records_per_revision=retention.records_per_revision,
                )
                if d.location.namespace == namespace
            ]
            self.store.delete([d.location for d in deletions])
        except (GoldenError, OSError) as err:
            return f"; retention not applied: {err}{note}"
        return _retention_note(deletions, scope.histories) + note

    def discard(self) -> None:
        """Drop whatever was staged (the run ended without a verdict)."""
        if self._recording is not None:
            self._recording.discard()
            self._recording = None


def _retention_note(
    deletions: Sequence[Deletion], histories: Mapping[DeploymentKey, DeploymentHistory]
) -> str:
    if not deletions:
        return ""
    deleted = sorted(
        {f"{d.location.namespace}/{d.location.deployment}" for d in deletions
         if not histories[(d.location.namespace, d.location.deployment)].exists}
    )  # fmt: skip
    which = f", of deleted InferenceDeployments {', '.join(deleted)}" if deleted else ""
    return f"; retention removed {len(deletions)} older record(s){which}"
