"""`infergate golden list|show|verify|prune`: the golden records in a store.

The store is a directory (the PVC's folder, mounted or copied) or an S3-compatible
bucket, given with --store (default $INFERGATE_GOLDEN_STORE):

  infergate golden list --store /var/lib/infergate/golden -n llm
  infergate golden show 3f2a9c1d0e-20261109T031500123456Z-baseline-5d41402a --store ...
  infergate golden verify --store s3://golden/prod --s3-endpoint https://s3.example.com
  infergate golden prune --store s3://golden/prod --s3-endpoint ... --when-deleted Delete

Without --store, `list` asks the cluster instead (kubeconfig, your own RBAC: get/list
paritychecks; no store credentials, no volume to mount), for any store, a PVC's too:

  infergate golden list -n llm [--deployment qwen] [--revision 3f2a9c1d0e]

It lists what the namespace's Passed ParityChecks recorded (their status.golden: entry,
revision, role, time, suite digest, store, size), not the store's content: a record
pruned or damaged since still shows, one of a check deleted since does not. --store
reads the store's own index (authoritative), and verify checks every blob.

S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. verify checks the
size and sha256 of every blob of every listed record. prune asks the cluster (kubeconfig)
which InferenceDeployments exist, all namespaces or -n's, and prints what retention
deletes and why: revisions that left a deployment's history, superseded records, the
records of deleted deployments under whenDeleted: Delete, orphans; it deletes them only
with --apply. If the deployments cannot be listed it deletes nothing. Exit codes: 0 all
good, 1 a record is corrupt, missing or not found, 2 the store cannot be used
(configuration, network) or the cluster cannot be asked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from typing import Any, Final

from infergate.api.golden import GoldenRetention
from infergate.errors import KubeError
from infergate.golden.entry import GoldenEntry
from infergate.golden.errors import (
    GoldenConfigError,
    GoldenError,
    GoldenIntegrityError,
    GoldenNotFoundError,
    GoldenUnavailableError,
)
from infergate.golden.recorded import size_text
from infergate.golden.retention import (
    IndexItem,
    RetentionScope,
    listed_histories,
    scope_retention,
)
from infergate.golden.settings import WhenDeleted
from infergate.golden.store import GoldenStore, PrunePlan
from infergate.jsontypes import JSON

STORE_ENV: Final = "INFERGATE_GOLDEN_STORE"
EXIT_OK, EXIT_BAD_RECORD, EXIT_STORE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add `golden` with its list, show, verify and prune subcommands."""
    golden = subparsers.add_parser(
        "golden",
        help="list, show, verify and prune golden records",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = golden.add_subparsers(dest="golden_command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        help=f"directory or s3://bucket[/prefix] (default: ${STORE_ENV})",
    )
    common.add_argument("--s3-endpoint", help="S3 service URL, e.g. https://s3.example.com")
    common.add_argument("--s3-region", default="us-east-1", help="region the signature names")
    common.add_argument("-o", "--output", choices=("text", "json"), default="text")
    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument("-n", "--namespace", help="only records of this namespace")
    scope.add_argument("--deployment", help="only records of this InferenceDeployment")

    listing = commands.add_parser(
        "list",
        parents=[common, scope],
        help="list the store's index, oldest first; without --store, what the namespace's "
        "Passed ParityChecks recorded (from the cluster)",
        description="With --store: the store's own index (authoritative), oldest first. "
        "Without --store: what the Passed ParityChecks of -n's namespace (default: the "
        "kubeconfig context's; -A: every namespace) recorded, from their status.golden, "
        "read with your own credentials; a record pruned or damaged since still shows there, "
        "so --store and `golden verify` remain the store's truth.",
    )
    listing.add_argument("--revision", help="only records of this revision hash")
    listing.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="without --store: the ParityChecks of every namespace",
    )
    listing.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    listing.add_argument("--context", help="kubeconfig context")
    listing.set_defaults(handler=run_list)
    show = commands.add_parser("show", parents=[common, scope], help="show one record's entry")
    show.add_argument("entry", metavar="ENTRY", help="entry name, or a unique prefix of it")
    show.set_defaults(handler=run_show)
    verify = commands.add_parser(
        "verify", parents=[common, scope], help="check every blob's size and sha256"
    )
    verify.add_argument("entries", nargs="*", metavar="ENTRY", help="entries (default: all)")
    verify.set_defaults(handler=run_verify)
    prune = commands.add_parser(
        "prune",
        parents=[common],
        help="delete what retention no longer keeps (a dry run unless --apply)",
    )
    prune.add_argument(
        "-n",
        "--namespace",
        help="only records and InferenceDeployments of this namespace (default: every one)",
    )
    prune.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    prune.add_argument("--context", help="kubeconfig context")
    prune.add_argument(
        "--golden-config",
        metavar="FILE|JSON",
        help="the operator's golden settings, whose retention applies (default: whenDeleted "
        "Retain, recordsPerRevision 1)",
    )
    prune.add_argument(
        "--when-deleted",
        choices=[w.value for w in WhenDeleted],
        help="records of deleted InferenceDeployments: Retain or Delete (overrides "
        "--golden-config)",
    )
    prune.add_argument(
        "--records-per-revision",
        type=_positive,
        help="newest records kept per revision, role, suite and fingerprint (overrides "
        "--golden-config)",
    )
    prune.add_argument(
        "--orphan-grace",
        type=float,
        default=6.0,
        metavar="HOURS",
        help="a record without an index entry is an orphan once this old (default: 6)",
    )
    prune.add_argument("--apply", action="store_true", help="delete (default: only print)")
    prune.set_defaults(handler=run_prune)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give at least 1")
    return value


def _store(args: argparse.Namespace) -> GoldenStore:
    from infergate.golden.config import store_from_url

    if not args.store:
        raise GoldenConfigError(
            f"--store: give a directory or s3://bucket[/prefix] (or ${STORE_ENV})"
        )
    return store_from_url(args.store, endpoint=args.s3_endpoint, region=args.s3_region)


def _items(store: GoldenStore, args: argparse.Namespace) -> list[IndexItem]:
    items = store.list_entries(args.namespace, args.deployment)
    revision = getattr(args, "revision", None)
    return [item for item in items if revision is None or item.location.name.revision == revision]


def _pick(items: list[IndexItem], wanted: str) -> IndexItem:
    matches = [
        item
        for item in items
        if str(item.location.name).startswith(wanted) or str(item.location).startswith(wanted)
    ]
    if not matches:
        raise GoldenNotFoundError(f"no entry named {wanted!r} (see `infergate golden list`)")
    if len(matches) > 1:
        names = ", ".join(str(item.location) for item in matches[:5])
        raise GoldenNotFoundError(f"{wanted!r} names {len(matches)} entries: {names}")
    return matches[0]


def _guarded(run: Any) -> Any:
    def handler(args: argparse.Namespace) -> int:
        try:
            code: int = run(args)
        except (GoldenConfigError, GoldenUnavailableError) as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_STORE
        except GoldenError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_RECORD
        return code

    return handler


def _row(item: IndexItem) -> list[str]:
    where, entry = item.location, item.entry
    head = [f"{where.namespace}/{where.deployment}", where.name.revision, where.name.role.value]
    created = where.name.created.strftime("%Y-%m-%d %H:%M:%S")
    if entry is None:
        return [*head, created, "-", "-", "-", "-", "-", "-", f"UNREADABLE: {item.problem}"]
    counts = entry.hidden_counts()
    hidden = "/".join(f"{counts[k]}{k[0]}" for k in ("full", "summary", "none") if counts[k])
    return [
        *head,
        created,
        entry.suite_digest[:12],
        entry.fingerprint[:19],
        f"{entry.meta.engine} {entry.meta.dtype}",
        str(len(entry.prompts)),
        hidden or "-",
        size_text(entry.size_bytes),
        str(where.name),
    ]


_HEADER = [
    "DEPLOYMENT",
    "REVISION",
    "ROLE",
    "CREATED (UTC)",
    "SUITE",
    "FINGERPRINT",
    "ENGINE",
    "PROMPTS",
    "HIDDEN",
    "SIZE",
    "ENTRY",
]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        for row in [_HEADER, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _document(item: IndexItem) -> dict[str, Any]:
    if item.entry is None:
        return {"entry": str(item.location), "problem": item.problem}
    document: dict[str, Any] = json.loads(item.entry.to_json())
    return document


def _run_recorded(args: argparse.Namespace) -> int:
    """`list` without --store: what the checks of the namespace recorded (module doc)."""
    from infergate.golden.recorded import listing_json, listing_text, recorded_golden
    from infergate.kube.golden_reads import GoldenReads

    try:
        reads = GoldenReads.from_kubeconfig(args.kubeconfig, args.context)
        try:
            namespace = None if args.all_namespaces else args.namespace or reads.default_namespace
            checks = reads.parity_checks(namespace)
        finally:
            reads.close()
    except KubeError as err:
        print(f"error: cannot list the ParityChecks: {err}", file=sys.stderr)
        return EXIT_STORE
    where = "every namespace" if namespace is None else f"namespace {namespace}"
    listing = recorded_golden(checks, deployment=args.deployment, revision=args.revision)
    print(listing_json(listing, where) if args.output == "json" else listing_text(listing, where))
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    if not args.store:
        return _run_recorded(args)
    store = _store(args)
    items = _items(store, args)
    if args.output == "json":
        print(json.dumps([_document(item) for item in items], indent=1))
    elif not items:
        print(f"no golden records in {store.describe()}")
    else:
        print(_table([_row(item) for item in items]))
    return EXIT_OK if all(item.entry is not None for item in items) else EXIT_BAD_RECORD


def _run_show(args: argparse.Namespace) -> int:
    store = _store(args)
    item = _pick(_items(store, args), args.entry)
    if item.entry is None:
        raise GoldenIntegrityError(f"{item.location}: {item.problem}")
    entry = item.entry
    if args.output == "json":
        print(entry.to_json())
        return EXIT_OK
    print("\n".join(_describe(entry)))
    return EXIT_OK


def _describe(entry: GoldenEntry) -> list[str]:
    meta = entry.meta
    counts = entry.hidden_counts()
    lines = [
        f"entry:        {entry.location}",
        (
            f"revision:     {entry.revision} ({entry.role.value} of check {entry.check or '-'}, "
            f"against {entry.counterpart_revision or '-'})"
        ),
        f"created:      {entry.created.isoformat()}",
        f"suite:        {entry.suite} (digest {entry.suite_digest})",
        f"fingerprint:  {entry.fingerprint}",
        f"engine:       {meta.engine} {meta.engine_version}, {meta.dtype}, model {meta.model}",
        f"profile:      {entry.profile or '-'}",
        "baseline use: "
        + (
            "yes (scored along its own sequences)"
            if entry.self_scored or entry.role.value == "baseline"
            else "no (a candidate whose outputs forked: scored along the other side's)"
        ),
        f"hidden:       policy {entry.hidden_states.value}, kept full {counts['full']}, summary "
        f"{counts['summary']}, none {counts['none']}"
        + (f" (projection {entry.sketch.dims} dims)" if entry.sketch else ""),
        (
            f"size:         {size_text(entry.size_bytes)} of maxBytes "
            f"{size_text(entry.max_bytes)}, {len(entry.blobs)} blobs"
        ),
        "prompts:",
    ]
    lines += [f"  {p.id}: hidden {p.hidden.value}, {p.rows} positions" for p in entry.prompts]
    return lines


def _run_verify(args: argparse.Namespace) -> int:
    store = _store(args)
    items = _items(store, args)
    if args.entries:
        items = [_pick(items, wanted) for wanted in args.entries]
    bad = 0
    for item in items:
        if item.entry is None:
            bad += 1
            print(f"CORRUPT  {item.location}: {item.problem}")
            continue
        try:
            store.verify(item.entry)
        except GoldenIntegrityError as err:
            bad += 1
            print(f"CORRUPT  {item.location}: {err}")
            continue
        blobs, size = len(item.entry.blobs), size_text(item.entry.size_bytes)
        print(f"ok       {item.location} ({blobs} blobs, {size})")
    print(f"{len(items) - bad} ok, {bad} corrupt or missing, in {store.describe()}")
    return EXIT_OK if bad == 0 else EXIT_BAD_RECORD


def _retention(args: argparse.Namespace) -> GoldenRetention:
    """The retention the flags ask for: --golden-config's, then the explicit flags."""
    retention = GoldenRetention()
    if args.golden_config:
        import yaml
        from pydantic import ValidationError

        from infergate.commands.operator import load_golden_config

        try:
            retention = load_golden_config(args.golden_config).retention
        except (OSError, yaml.YAMLError, ValidationError) as err:
            raise GoldenConfigError(f"--golden-config: {err}") from err
    changes: dict[str, Any] = {}
    if args.when_deleted is not None:
        changes["when_deleted"] = WhenDeleted(args.when_deleted)
    if args.records_per_revision is not None:
        changes["records_per_revision"] = args.records_per_revision
    return retention.model_copy(update=changes)


def _inference_deployments(args: argparse.Namespace) -> list[JSON]:
    """The cluster's InferenceDeployments (all namespaces or -n's); `KubeError` if it
    cannot tell."""
    from infergate.kube.golden_reads import GoldenReads

    reads = GoldenReads.from_kubeconfig(args.kubeconfig, args.context)
    try:
        return reads.inference_deployments(args.namespace)
    finally:
        reads.close()


def _run_prune(args: argparse.Namespace) -> int:
    retention = _retention(args)
    store = _store(args)
    # The index first: a record indexed before the listing belongs to a deployment that
    # existed before it, so one missing from the listing was deleted, not created since.
    items = store.list_entries(args.namespace)
    where = f"namespace {args.namespace}" if args.namespace else "every namespace"
    try:
        listed = listed_histories(_inference_deployments(args))
    except (KubeError, ValueError) as err:
        print(
            f"error: cannot list the InferenceDeployments of {where}, so nothing is deleted: {err}",
            file=sys.stderr,
        )
        return EXIT_STORE
    scope = scope_retention(
        items, listed, namespaces=None if args.namespace is None else {args.namespace}
    )
    plan = store.plan_prune(
        scope.items,
        scope.histories,
        when_deleted=retention.when_deleted,
        records_per_revision=retention.records_per_revision,
        indexed=items,
        namespace=args.namespace,
        orphan_grace=timedelta(hours=args.orphan_grace),
    )
    if args.apply:
        store.apply_prune(plan)
    _print_prune(args, store, scope, plan, retention)
    return EXIT_OK


def _print_prune(
    args: argparse.Namespace,
    store: GoldenStore,
    scope: RetentionScope,
    plan: PrunePlan,
    retention: GoldenRetention,
) -> None:
    if args.output == "json":
        document = {
            "store": store.describe(),
            "applied": bool(args.apply),
            "whenDeleted": retention.when_deleted.value,
            "recordsPerRevision": retention.records_per_revision,
            "deletions": [{"entry": str(d.location), "reason": d.reason} for d in plan.deletions],
            "leftAlone": [
                {"deployment": f"{ns}/{name}", "reason": why}
                for (ns, name), why in scope.left_alone.items()
            ],
            "staleStaging": len(plan.staging),
        }
        print(json.dumps(document, indent=1))
        return
    verb = "deleted" if args.apply else "would delete"
    for deletion in plan.deletions:
        print(f"{verb}  {deletion.location}: {deletion.reason}")
    for (namespace, name), why in scope.left_alone.items():
        print(f"left alone  {namespace}/{name}: {why}")
    staging = f" and {len(plan.staging)} stale staging file(s)" if plan.staging else ""
    if args.apply:
        print(f"deleted {len(plan.deletions)} record(s){staging} from {store.describe()}")
    else:
        print(
            f"{len(plan.deletions)} record(s){staging} would be deleted from "
            f"{store.describe()} (whenDeleted: {retention.when_deleted.value}, "
            f"recordsPerRevision: {retention.records_per_revision}); dry run: --apply deletes"
        )


run_list = _guarded(_run_list)
run_show = _guarded(_run_show)
run_verify = _guarded(_run_verify)
run_prune = _guarded(_run_prune)
