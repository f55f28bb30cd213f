"""Writes a reconcile plan: status first (the decision), then children, then annotations.

The status carries the rollout's truth (stable revision, rejected revisions),
so it is committed first, guarded by the resourceVersion the plan was made
from: if the object changed meanwhile, nothing else is written and the
reconcile runs again on fresh state. Child writes are idempotent (AlreadyExists
and NotFound count as done), so a write repeated after a restart is harmless.

One exception to "status first": a wave that only creates (a new canary's ConfigMap and
Deployment) is sent beside the status write, not after it, which halves the time from a
spec change to its canary. A create changes no object that exists, deletes nothing and
moves no traffic; if the status write then finds the copy stale, the reconcile decides
again on fresh state, and a revision that state no longer wants is deleted like any
other revision it does not keep (`plan.deployment.sync`). Updates, deletions, checks and annotations
still wait for the status write.

The children of one plan are independent objects (a canary's ConfigMap, Deployment and
Services; an old revision's deletions), so with a thread pool they are written at once,
not one after another: a reconcile then waits for the slowest request, not for the sum
of them. With a background queue (`kube.background`), a Service's create and delete are
left to it: the API server allocates cluster IPs one Service at a time, and a reconcile
that waited for that held up the next deployments' canaries. Every write of a wave is
attempted; the first failure (in plan order) is raised after the others ended, and the
next reconcile repeats what is missing. The checks come
after their children, the check uids after the checks, then the readiness gates of group
leaders (`plan.deployment.gates`: after the status that holds a restarted group, never
before it), the annotations last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, TypeVar

from infergate.api.deployment_status import InferenceDeploymentStatus
from infergate.errors import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
    NotFoundError,
    StaleObjectError,
)
from infergate.jsontypes import JSON
from infergate.kube.background import BackgroundWrites, QueuedWrite
from infergate.kube.client import (
    BY_KIND,
    INFERENCE_DEPLOYMENTS,
    PARITY_CHECKS,
    PODS,
    SERVICES,
    KubeClient,
)
from infergate.plan.deployment.gates import GateWrite
from infergate.plan.deployment.observed import holder_of
from infergate.plan.deployment.reconcile import ReconcilePlan, with_check_uids
from infergate.plan.deployment.sync import Create, Delete, Recreate, Update, Write
from infergate.render.group import CHECKED_GATE

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_I = TypeVar("_I")


def _run_now(write: Callable[[_I], _T], item: _I) -> Future[_T]:
    """`write(item)` run here, as a finished Future (the writes without a pool)."""
    future: Future[_T] = Future()
    try:
        future.set_result(write(item))
    except Exception as error:  # noqa: BLE001 - kept in the Future, raised by `_each`
        future.set_exception(error)
    return future


def _longest_retry_after(raised: BaseException, futures: Sequence[Future[Any]]) -> None:
    """Give `raised` the longest Retry-After any of the ended `futures` was answered with:
    the reconcile backs off on the one error it raises, and a request the server asked to
    wait for must not be sent again sooner because another write failed first."""
    if not isinstance(raised, KubeError):
        return
    waits = [raised.retry_after] + [
        failure.retry_after
        for future in futures
        if isinstance(failure := future.exception(), KubeError)
    ]
    known = [w for w in waits if w is not None]
    if known:
        raised.retry_after = max(known)


def _answers(futures: Sequence[Future[_T]]) -> list[_T]:
    """The answers in order; the first failure, in order, raised once every one has ended,
    carrying the longest Retry-After of them all."""
    wait(futures)
    for future in futures:
        failure = future.exception()
        if failure is not None:
            _longest_retry_after(failure, futures)
            raise failure
    return [future.result() for future in futures]


@dataclass
class WriteResult:
    """What was actually done (for Events: only what happened is reported)."""

    status_written: bool = False
    created: list[str] = field(default_factory=list)
    created_checks: dict[str, str] = field(default_factory=dict)
    """Name -> uid of each ParityCheck created."""
    reverted: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    """Writes left to the background queue (not waited for)."""


def _patch_body(manifest: JSON, resource_version: str) -> JSON:
    metadata = manifest["metadata"]
    body: JSON = {
        "metadata": {
            "labels": metadata.get("labels", {}),
            "annotations": metadata.get("annotations", {}),
            "ownerReferences": metadata.get("ownerReferences", []),
            "resourceVersion": resource_version,
        }
    }
    # A Role's rules and a RoleBinding's subjects live beside metadata, not under spec.
    for key in ("spec", "rules", "subjects"):
        if key in manifest:
            body[key] = manifest[key]
    return body


class PlanWriter:
    """Applies `ReconcilePlan`s for one InferenceDeployment (with `pool`: each wave of
    independent writes at once)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        pool: Executor | None = None,
        background: BackgroundWrites | None = None,
        on_status_written: Callable[[str], None] | None = None,
        on_name: Callable[[str, str | None], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.pool = pool
        self.background = background
        # Told the owner's resourceVersion after each status write (the copy to decide from
        # next must be at least as new: `plan.freshness`).
        self.on_status_written = on_status_written
        # Told, after each child create, whether its name is someone else's ("Service web",
        # who made it) or free for ours ("Service web", None): `DeploymentState.taken`.
        self.on_name = on_name

    def write(self, plan: ReconcilePlan, body: JSON) -> WriteResult:
        """Status, children, checks (and their uids, into status), then the consumed control
        annotations. A stale `body` fails the status write with `StaleObjectError`, before
        anything but a wave of creates was sent (see the module's docstring)."""
        result = WriteResult()
        current = body
        background = [w for w in plan.sync.writes if self._background_takes(w)]
        waited = [w for w in plan.sync.writes if not self._background_takes(w)]
        early: list[Future[tuple[bool, bool]]] | None = None
        if (
            plan.status_changed
            and self.pool is not None
            and waited
            and all(isinstance(w, Create) for w in waited)
        ):
            early = [self.pool.submit(self._write_child, w) for w in waited]
        if plan.status_changed:
            try:
                current = self.write_status(plan.status, body)
            except KubeError as error:
                if early is not None:
                    wait(early)  # ended, whatever they answered: the next reconcile decides
                    _longest_retry_after(error, early)
                if isinstance(error, ConflictError):
                    raise StaleObjectError(
                        str(error), status=error.status, retry_after=error.retry_after
                    ) from error
                raise
            result.status_written = True
        for write in background:
            self._leave_to_background(write, result)
        answers = _answers(early) if early is not None else self._each(self._write_child, waited)
        for write, (created, reverted) in zip(waited, answers, strict=True):
            if created:
                result.created.append(str(write.ref))
            if reverted:
                result.reverted.append(str(write.ref))
        self._each(self._delete_check, plan.delete_checks)
        for manifest, check in zip(
            plan.create_checks, self._each(self._create_check, plan.create_checks), strict=True
        ):
            if check is not None:
                result.created_checks[manifest["metadata"]["name"]] = check["metadata"]["uid"]
        if result.created_checks:
            # Bind the attempt to the objects just made; a crash before this write leaves
            # them unbound, and the next reconcile replaces them.
            current = self.write_status(
                with_check_uids(plan.status, result.created_checks), current
            )
        self._each(self._write_gate, plan.gates)
        if plan.remove_annotations:
            self.client.merge_patch(
                INFERENCE_DEPLOYMENTS,
                self.namespace,
                self.name,
                {"metadata": {"annotations": dict.fromkeys(plan.remove_annotations)}},
            )
        return result

    def _each(self, write: Callable[[_I], _T], items: Sequence[_I]) -> list[_T]:
        """`write` of every item (at once with a pool), the answers in order; the first
        failure, in order, is raised once every write has ended."""
        if self.pool is None or len(items) < 2:
            futures = [_run_now(write, item) for item in items]
        else:
            futures = [self.pool.submit(write, item) for item in items]
        return _answers(futures)

    def write_status(self, status: InferenceDeploymentStatus, body: JSON) -> JSON:
        """Replace the status, guarded by the resourceVersion of `body` (409 when stale);
        the object as written."""
        replacement: dict[str, Any] = {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": body["metadata"]["resourceVersion"],
            },
            "spec": body.get("spec", {}),
            "status": status.to_kube(),
        }
        written = self.client.replace_status(
            INFERENCE_DEPLOYMENTS, self.namespace, self.name, replacement
        )
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version and self.on_status_written is not None:
            self.on_status_written(str(version))
        return written

    def _background_takes(self, write: Write) -> bool:
        """A Service's create or delete goes to the background queue, if there is one."""
        return (
            self.background is not None
            and write.ref.kind == SERVICES.kind
            and isinstance(write, (Create, Delete))
        )

    def _leave_to_background(self, write: Write, result: WriteResult) -> None:
        """Queue a Service's create or delete in the background."""
        if self.background is None:
            raise RuntimeError("no background queue")  # _background_takes said there is one
        verb = "create" if isinstance(write, Create) else "delete"
        queued = QueuedWrite(verb, write.ref.kind, self.namespace, write.ref.name, self.name)
        self.background.submit(queued, lambda: self._write_child(write))
        result.queued.append(f"{verb} {write.ref}")

    def _write_child(self, write: Write) -> tuple[bool, bool]:
        """One child write: (created, reverted a drift)."""
        if isinstance(write, Create):
            return self._create(write.ref.kind, write.manifest) is not None, False
        if isinstance(write, Update):
            self.client.merge_patch(
                BY_KIND[write.ref.kind],
                self.namespace,
                write.ref.name,
                _patch_body(write.manifest, write.resource_version),
            )
            return False, bool(write.drift)
        if isinstance(write, Recreate):
            self._delete(write.ref.kind, write.ref.name)
            self._create(write.ref.kind, write.manifest)
            return False, True
        if isinstance(write, Delete):
            self._delete(write.ref.kind, write.ref.name)
        return False, False

    def _create(self, kind: str, manifest: JSON) -> JSON | None:
        """Create; None when the name is taken: a repeated write after a stale read, or
        someone else's object, which is read to tell which and never overwritten."""
        name = manifest["metadata"]["name"]
        try:
            created = self.client.create(BY_KIND[kind], self.namespace, manifest)
        except AlreadyExistsError:
            log.debug("%s %s already exists", kind, name)
            if self.on_name is not None and kind != PARITY_CHECKS.kind:
                self._note_holder(kind, manifest)
            return None
        if self.on_name is not None:
            self.on_name(f"{kind} {name}", None)
        return created

    def _note_holder(self, kind: str, manifest: JSON) -> None:
        """Tell `on_name` who holds the name a create found taken (None: ours already)."""
        assert self.on_name is not None  # noqa: S101 - only called with a listener
        name = manifest["metadata"]["name"]
        try:
            existing = self.client.get(BY_KIND[kind], self.namespace, name)
        except NotFoundError:
            return  # gone meanwhile: the next reconcile's create takes the name
        except KubeError as error:
            # Unread, nothing is known: the next reconcile's create asks again.
            log.warning("%s %s exists and could not be read: %s", kind, name, error)
            return
        holder = holder_of(existing, manifest)
        if holder is not None:
            log.debug("%s %s exists and was not made by infergate: %s", kind, name, holder)
        self.on_name(f"{kind} {name}", holder)

    def _create_check(self, manifest: JSON) -> JSON | None:
        return self._create(PARITY_CHECKS.kind, manifest)

    def _write_gate(self, gate: GateWrite) -> None:
        """Set the readiness gate condition of a group leader; a pod gone meanwhile is made
        again with the gate unset (not Ready), so NotFound is done."""
        condition = {
            "type": CHECKED_GATE,
            "status": "True" if gate.status else "False",
            "reason": gate.reason,
            "message": gate.message,
            "lastTransitionTime": gate.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            self.client.strategic_patch(
                PODS, self.namespace, gate.pod, {"status": {"conditions": [condition]}},
                subresource="status",
            )  # fmt: skip
        except NotFoundError:
            log.info("pod %s/%s is gone: its gate goes with it", self.namespace, gate.pod)

    def _delete_check(self, name: str) -> None:
        self._delete(PARITY_CHECKS.kind, name)

    def _delete(self, kind: str, name: str) -> None:
        try:
            self.client.delete(BY_KIND[kind], self.namespace, name)
        except NotFoundError:
            log.debug("%s %s already gone", kind, name)
