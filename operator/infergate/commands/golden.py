"""`infergate golden list|show|verify`: the golden records in a store.

The store is a directory (the PVC's folder, mounted or copied) or an S3-compatible
bucket, given with --store (default $INFERGATE_GOLDEN_STORE):

  infergate golden list --store /var/lib/infergate/golden -n llm
  infergate golden show 3f2a9c1d0e-20261109T031500123456Z-baseline-5d41402a --store ...
  infergate golden verify --store s3://golden/prod --s3-endpoint https://s3.example.com

S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. verify checks the
size and sha256 of every blob of every listed record. Exit codes: 0 all good, 1 a record
is corrupt, missing or not found, 2 the store cannot be used (configuration, network).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Final

from infergate.golden.entry import GoldenEntry
from infergate.golden.errors import (
    GoldenConfigError,
    GoldenError,
    GoldenIntegrityError,
    GoldenNotFoundError,
    GoldenUnavailableError,
)
from infergate.golden.retention import IndexItem
from infergate.golden.store import GoldenStore

STORE_ENV: Final = "INFERGATE_GOLDEN_STORE"
EXIT_OK, EXIT_BAD_RECORD, EXIT_STORE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add `golden` with its list, show and verify subcommands."""
    golden = subparsers.add_parser(
        "golden",
        help="list, show and verify golden records",
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
        "list", parents=[common, scope], help="list the index, oldest first"
    )
    listing.add_argument("--revision", help="only records of this revision hash")
    listing.set_defaults(handler=run_list)
    show = commands.add_parser("show", parents=[common, scope], help="show one record's entry")
    show.add_argument("entry", metavar="ENTRY", help="entry name, or a unique prefix of it")
    show.set_defaults(handler=run_show)
    verify = commands.add_parser(
        "verify", parents=[common, scope], help="check every blob's size and sha256"
    )
    verify.add_argument("entries", nargs="*", metavar="ENTRY", help="entries (default: all)")
    verify.set_defaults(handler=run_verify)


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


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{count}B"


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
        _size(entry.size_bytes),
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


def _run_list(args: argparse.Namespace) -> int:
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
            f"size:         {_size(entry.size_bytes)} of maxBytes {_size(entry.max_bytes)}, "
            f"{len(entry.blobs)} blobs"
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
        blobs, size = len(item.entry.blobs), _size(item.entry.size_bytes)
        print(f"ok       {item.location} ({blobs} blobs, {size})")
    print(f"{len(items) - bad} ok, {bad} corrupt or missing, in {store.describe()}")
    return EXIT_OK if bad == 0 else EXIT_BAD_RECORD


run_list = _guarded(_run_list)
run_show = _guarded(_run_show)
run_verify = _guarded(_run_verify)
