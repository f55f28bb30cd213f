"""`infergate promote|abort|rollback|status|diff NAME`: manual control of a rollout.

The commands set the same annotations a person could set with kubectl
(`infergate.io/promote`, `infergate.io/abort`, `infergate.io/rollback-to`);
the operator acts on them once and removes them. `--wait` waits until the
operator has acted. Exit codes: 0 done (or requested), 1 refused or not
done in time, 2 usage errors.

  infergate status qwen -n llm
  infergate promote qwen -n llm --wait
  infergate abort qwen -n llm
  infergate rollback qwen -n llm --to 3f2a9c1d0e
  infergate diff qwen -n llm      what the canary (or the pending spec) changes
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from infergate.errors import InfergateError, NotFoundError
from infergate.jsontypes import JSON
from infergate.plan.deployment.control import ABORT, PROMOTE, ROLLBACK_TO

_POLL_SECONDS = 1.0


def register(subparsers: Any) -> None:
    """Add the promote, abort, rollback and status subcommands."""
    for name, help_text, handler in (
        ("promote", "promote the canary revision to stable", run_promote),
        (
            "abort",
            "remove the canary and reject its revision (or a promotion still scaling up)",
            run_abort,
        ),
        ("rollback", "make a retained earlier revision stable again", run_rollback),
        ("status", "show the rollout state of an InferenceDeployment", run_status),
        ("diff", "show what the canary changes against the stable revision", run_diff),
    ):
        parser = subparsers.add_parser(
            name,
            help=help_text,
            description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("name", help="InferenceDeployment name")
        parser.add_argument("-n", "--namespace", help="namespace (default: kubeconfig context's)")
        parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
        parser.add_argument("--context", help="kubeconfig context")
        if name == "rollback":
            parser.add_argument(
                "--to", metavar="REVISION", help="revision to roll back to (default: the last one)"
            )
        if name == "diff":
            parser.add_argument("--from", dest="before", metavar="REVISION", help="default: stable")
            parser.add_argument(
                "--to", dest="after", metavar="REVISION", help="default: the canary, else the spec"
            )
        if name in ("status", "diff"):
            parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
        else:
            parser.add_argument("--wait", action="store_true", help="wait until it is done")
            parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait")
        parser.set_defaults(handler=handler)


class _Target:
    """One InferenceDeployment, read and annotated through the API client."""

    def __init__(self, args: argparse.Namespace) -> None:
        from infergate.kube.client import KubeClient, kubeconfig_namespace

        self.client = KubeClient.from_environment(args.kubeconfig, args.context)
        self.namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
        self.name = args.name

    def read(self) -> JSON:
        from infergate.kube.client import INFERENCE_DEPLOYMENTS

        return self.client.get(INFERENCE_DEPLOYMENTS, self.namespace, self.name)

    def revision(self, revision: str) -> JSON | None:
        """A revision as its objects recorded it (model, engine, accelerator), or None."""
        from infergate.kube.client import CONFIG_MAPS, DEPLOYMENTS
        from infergate.plan.deployment.observed import ANNOTATION_REVISION_SPEC

        for resource in (DEPLOYMENTS, CONFIG_MAPS):
            try:
                body = self.client.get(resource, self.namespace, f"{self.name}-{revision}")
            except NotFoundError:
                continue
            text = (body["metadata"].get("annotations") or {}).get(ANNOTATION_REVISION_SPEC)
            if text:
                found: JSON = json.loads(text)
                return found
        return None

    def annotate(self, key: str, value: str) -> None:
        from infergate.kube.client import INFERENCE_DEPLOYMENTS

        self.client.merge_patch(
            INFERENCE_DEPLOYMENTS,
            self.namespace,
            self.name,
            {"metadata": {"annotations": {key: value}}},
        )

    def wait(self, done: Callable[[JSON], bool], timeout: float) -> JSON | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.read()
            if done(body):
                return body
            time.sleep(_POLL_SECONDS)
        return None

    def __str__(self) -> str:
        return f"InferenceDeployment {self.namespace}/{self.name}"


def _status(body: JSON) -> JSON:
    status: JSON = body.get("status") or {}
    return status


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except NotFoundError:
            print(f"InferenceDeployment {args.namespace or ''}/{args.name} not found")
            return 1
        except InfergateError as error:
            print(f"error: {error}")
            return 1

    return handler


def _make_stable(
    target: _Target,
    annotation: str,
    revision: str,
    args: argparse.Namespace,
    *,
    requested: str,
    failed: str,
) -> int:
    """Request `revision` be made stable through `annotation`; with --wait, see it happen.

    The operator removes the annotation once it has acted on it, so the wait ends there.
    """
    target.annotate(annotation, revision)
    print(f"{target}: {requested} requested")
    if not args.wait:
        return 0
    body = target.wait(
        lambda b: annotation not in (b["metadata"].get("annotations") or {}), args.timeout
    )
    if body is not None and _status(body).get("stableRevision") == revision:
        print(f"{target}: revision {revision} is stable")
        return 0
    print(f"{target}: {failed}; see `kubectl describe idep {args.name}`")
    return 1


@_guarded
def run_promote(args: argparse.Namespace) -> int:
    target = _Target(args)
    status = _status(target.read())
    canary = status.get("canaryRevision")
    if not canary:
        print(f"{target} has no canary to promote (phase {status.get('phase')})")
        return 1
    return _make_stable(
        target,
        PROMOTE,
        canary,
        args,
        requested=f"promotion of canary {canary}",
        failed=f"canary {canary} was not promoted",
    )


def _abortable_promotion(status: JSON) -> str | None:
    """The revision being promoted while an abort can still undo it (it scales up: no
    traffic was moved to it yet)."""
    promotion = status.get("promotion") or {}
    if promotion.get("step") == "ScalingUp" and promotion.get("revision"):
        return str(promotion["revision"])
    return None


@_guarded
def run_abort(args: argparse.Namespace) -> int:
    target = _Target(args)
    status = _status(target.read())
    canary = status.get("canaryRevision")
    promoting = None if canary else _abortable_promotion(status)
    if promoting is not None:
        return _abort_promotion(target, promoting, args)
    if not canary:
        print(f"{target} has no canary to abort (phase {status.get('phase')})")
        return 1
    target.annotate(ABORT, canary)
    print(f"{target}: abort of canary {canary} requested")
    if not args.wait:
        return 0
    body = target.wait(lambda b: _status(b).get("canaryRevision") != canary, args.timeout)
    if body is None:
        print(f"{target}: canary {canary} still runs after {args.timeout:.0f}s")
        return 1
    print(f"{target}: canary {canary} removed; stable is {_status(body).get('stableRevision')}")
    return 0


def _abort_promotion(target: _Target, revision: str, args: argparse.Namespace) -> int:
    """Abort a promotion before traffic moved: the previous stable stays."""
    target.annotate(ABORT, revision)
    print(f"{target}: abort of the promotion of {revision} requested")
    if not args.wait:
        return 0
    body = target.wait(
        lambda b: ABORT not in (b["metadata"].get("annotations") or {}), args.timeout
    )
    stable = _status(body).get("stableRevision") if body is not None else None
    if body is None or stable == revision:
        print(f"{target}: the promotion of {revision} was not aborted (traffic may have moved "
              "meanwhile); see `kubectl describe idep` or roll back")  # fmt: skip
        return 1
    print(f"{target}: promotion of {revision} aborted; stable is {stable}")
    return 0


def _previous_stable(status: JSON) -> str | None:
    stable = status.get("stableRevision")
    earlier = [
        r for r in status.get("revisions") or [] if r.get("promotedAt") and r["hash"] != stable
    ]
    earlier.sort(key=lambda r: str(r["promotedAt"]))
    return str(earlier[-1]["hash"]) if earlier else None


@_guarded
def run_rollback(args: argparse.Namespace) -> int:
    target = _Target(args)
    status = _status(target.read())
    revision = args.to or _previous_stable(status)
    if not revision:
        print(f"{target} has no earlier stable revision to roll back to")
        return 1
    if revision == status.get("stableRevision"):
        print(f"{target}: revision {revision} is already stable")
        return 1
    return _make_stable(
        target,
        ROLLBACK_TO,
        revision,
        args,
        requested=f"rollback to revision {revision}",
        failed=f"not rolled back to {revision}",
    )


@_guarded
def run_status(args: argparse.Namespace) -> int:
    target = _Target(args)
    status = _status(target.read())
    if args.output == "json":
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    print(f"{target}")
    print(f"  phase:    {status.get('phase', '-')}")
    print(f"  stable:   {status.get('stableRevision') or '-'}")
    print(f"  canary:   {status.get('canaryRevision') or '-'}")
    print(f"  traffic:  {status.get('trafficMechanism') or '-'}")
    promotion = status.get("promotion")
    if promotion:
        print(
            f"  promotion: {promotion.get('step')}: {promotion.get('previous')} -> "
            f"{promotion.get('revision')}"
            + (f", old one scaled down at {promotion['scaleDownAt']}"
               if promotion.get("scaleDownAt") else "")
        )  # fmt: skip
    print(f"  replicas: {status.get('readyReplicas', 0)}/{status.get('replicas', 0)} ready")
    check = status.get("lastParityCheck") or {}
    if check:
        print(
            f"  parity:   {check.get('name')} {check.get('phase', '')} {check.get('verdict', '')}"
        )
    print("  conditions:")
    for condition in status.get("conditions") or []:
        print(
            f"    {condition['type']:<14} {condition['status']:<8} {condition['reason']}: "
            f"{condition.get('message', '')}"
        )
    print("  revisions:")
    for record in status.get("revisions") or []:
        flags = [
            word
            for word, on in (
                ("stable", record["hash"] == status.get("stableRevision")),
                ("canary", record["hash"] == status.get("canaryRevision")),
                ("rejected", record.get("rejected")),
            )
            if on
        ]
        print(
            f"    {record['hash']}  {record.get('engine', '')}/{record.get('dtype', '')}  "
            f"verdict={record.get('verdict') or '-'}  {' '.join(flags)}  "
            f"{record.get('message') or ''}".rstrip()
        )
    return 0


@_guarded
def run_diff(args: argparse.Namespace) -> int:
    """The fields that differ between two revisions: stable and canary by default."""
    from infergate.api.inference_deployment import InferenceDeploymentSpec
    from infergate.plan.deployment.desired import revision_json, revision_of
    from infergate.plan.deployment.revision_diff import revision_changes

    target = _Target(args)
    body = target.read()
    status = _status(body)
    before = args.before or status.get("stableRevision")
    if not before:
        print(f"{target} has no stable revision yet; give --from REVISION")
        return 1
    sides: dict[str, JSON | None] = {"before": target.revision(before)}
    after = args.after or status.get("canaryRevision")
    if after:
        sides["after"] = target.revision(after)
    else:
        spec = InferenceDeploymentSpec.model_validate(body.get("spec") or {})
        after = f"{revision_of(spec)} (the spec)"
        sides["after"] = revision_json(spec)
    for side, revision in (("before", before), ("after", after)):
        if sides[side] is None:
            print(f"{target}: revision {revision} is not retained (no Deployment or ConfigMap)")
            return 1
    changes = revision_changes(sides["before"] or {}, sides["after"] or {})
    if args.output == "json":
        listed = [{"path": c.path, "from": c.before, "to": c.after} for c in changes]
        print(json.dumps({"from": before, "to": after, "changes": listed}, indent=2))
        return 0
    print(f"{target}: {before} -> {after}")
    for change in changes:
        print(f"  {change.describe()}")
    if not changes:
        print("  no field of the revision differs")
    return 0
