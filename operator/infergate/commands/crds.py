"""`infergate crds`: write the CRDs generated from the API models, or check them.

`infergate crds --out crds` writes `crds/*.yaml`; `infergate crds --check crds`
exits 1 with a diff summary when the files there differ from what the models
generate (a missing file, an extra file, or changed lines). `infergate crds --apply`
creates or replaces them in the cluster (in-cluster credentials or the kubeconfig): the
Helm chart's pre-upgrade hook runs it from the new image, since Helm never upgrades a
chart's crds/. With `--reference
FILE` the markdown API reference is written or checked the same way, and with
`--profiles FILE` the generated tables of the parity profiles page.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

from infergate.api.crd import RESOURCE_KINDS, crd_document, render_crd_files
from infergate.api.reference import render_reference
from infergate.report.profiles_page import ProfilesPageError, render_profiles_page

_DIFF_LINES_SHOWN = 40


def register(subparsers: Any) -> None:
    """Add the `crds` subcommand."""
    parser = subparsers.add_parser(
        "crds",
        help="write or check the CustomResourceDefinitions generated from the API models",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, metavar="DIR", help="write the CRD files into DIR")
    target.add_argument(
        "--check", type=Path, metavar="DIR", help="exit 1 when the CRD files in DIR are stale"
    )
    target.add_argument(
        "--apply",
        action="store_true",
        help="create or replace this version's CRDs in the cluster (the chart's upgrade hook)",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        metavar="FILE",
        help="also write (with --out) or check (with --check) the markdown API reference",
    )
    parser.add_argument(
        "--profiles",
        type=Path,
        metavar="FILE",
        help="also write or check the tables of the parity profiles page (its marked part)",
    )
    parser.set_defaults(handler=run_crds)


def run_crds(args: argparse.Namespace) -> int:
    """Write or check; the exit code is 0 when the directory matches the models."""
    if args.apply:
        return _apply()
    generated = render_crd_files()
    reference = getattr(args, "reference", None)
    profiles = getattr(args, "profiles", None)
    if args.out is not None:
        code = _write(args.out, generated)
        if reference is not None:
            _write_reference(reference)
        if profiles is not None:
            code = max(code, _write_profiles(profiles))
        return code
    code = _check(args.check, generated)
    if reference is not None:
        code = max(code, _check_reference(reference))
    if profiles is not None:
        code = max(code, _check_profiles(profiles))
    return code


def _apply() -> int:
    # Imported here: the other forms of the command run where no cluster client is needed.
    from infergate.errors import KubeError
    from infergate.kube.client import KubeClient
    from infergate.kube.crd_install import install_crds

    documents = [crd_document(resource) for resource in RESOURCE_KINDS]
    client = KubeClient.from_environment()
    try:
        install_crds(client, documents, print)
    except KubeError as error:
        print(f"crds: {error}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


def _profiles_page(path: Path) -> tuple[str, str] | None:
    """(the page on disk, as it should be), or None after saying why it cannot be made."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        return current, render_profiles_page(current)
    except ProfilesPageError as err:
        print(f"crds: {path}: {err}", file=sys.stderr)
        return None


def _write_profiles(path: Path) -> int:
    page = _profiles_page(path)
    if page is None:
        return 1
    current, expected = page
    if current != expected:
        path.write_text(expected, encoding="utf-8")
        print(f"wrote {path}")
    return 0


def _check_profiles(path: Path) -> int:
    page = _profiles_page(path)
    if page is None:
        return 1
    current, expected = page
    if current == expected:
        print(f"crds check: {path} matches the profiles")
        return 0
    print(f"crds check: {path} is stale; run `make crds` and commit", file=sys.stderr)
    print(diff_summary(path, current, expected), file=sys.stderr)
    return 1


def _write_reference(path: Path) -> None:
    text = render_reference()
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


def _check_reference(path: Path) -> int:
    expected = render_reference()
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if current == expected:
        print(f"crds check: {path} matches the models")
        return 0
    print(f"crds check: {path} is stale; run `make crds` and commit", file=sys.stderr)
    print(diff_summary(path, current, expected), file=sys.stderr)
    return 1


def _write(directory: Path, generated: dict[str, str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    for stale in sorted(_crd_files(directory) - set(generated)):
        print(f"note: {directory / stale} is not generated by infergate; left in place")
    return 0


def _check(directory: Path, generated: dict[str, str]) -> int:
    if not directory.is_dir():
        print(f"crds check: {directory} is not a directory; run `make crds`", file=sys.stderr)
        return 1
    problems: list[str] = []
    for name, text in generated.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
            continue
        current = path.read_text(encoding="utf-8")
        if current != text:
            problems.append(diff_summary(path, current, text))
    problems.extend(
        f"{directory / extra}: not generated from the models (a CRD removed or renamed?)"
        for extra in sorted(_crd_files(directory) - set(generated))
    )
    if not problems:
        print(f"crds check: {len(generated)} CRDs in {directory} match the models")
        return 0
    print("crds check: files differ from the models; run `make crds` and commit", file=sys.stderr)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1


def _crd_files(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("*.yaml")}


def diff_summary(path: Path, current: str, expected: str) -> str:
    """A stale generated file in a few lines: counts, then the start of a unified diff."""
    diff = list(
        difflib.unified_diff(
            current.splitlines(),
            expected.splitlines(),
            fromfile=f"{path} (on disk)",
            tofile=f"{path} (from models)",
            lineterm="",
        )
    )
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    shown = diff[:_DIFF_LINES_SHOWN]
    more = len(diff) - len(shown)
    tail = [f"... {more} more diff lines"] if more > 0 else []
    return "\n".join([f"{path}: {added} lines added, {removed} removed", *shown, *tail])
