"""`infergate-dev chart`: write the Helm chart generated from manifests/, or check it.

`infergate-dev chart --out charts/infergate` builds `manifests/`, every kustomize
Component under it and the namespaced overlay's Role in the operator's own namespace
(`overlays/namespaced/runner-namespace`, installed with `rbac.scope=namespace`) with
kubectl's kustomize and writes the chart
(infergate_dev.helmchart says how objects become templates). `--check DIR` exits 1
naming the files that differ, are missing or are not generated.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from infergate import __version__
from infergate.commands.crds import diff_summary
from infergate_dev.helmchart import Component, component_key, render_chart, version_gate
from infergate_dev.localcluster.layout import K8S_VERSION, kubernetes_bin, repo_root

JSON = dict[str, Any]
# What a namespace-scoped install adds in the operator's own namespace, under manifests/.
NAMESPACE_SCOPE = Path("overlays") / "namespaced" / "runner-namespace"


def register(subparsers: Any) -> None:
    """Add the `chart` subcommand."""
    parser = subparsers.add_parser(
        "chart",
        help="write or check the Helm chart generated from manifests/",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, metavar="DIR", help="write the chart into DIR")
    target.add_argument(
        "--check", type=Path, metavar="DIR", help="exit 1 when the chart in DIR is stale"
    )
    parser.add_argument(
        "--manifests", type=Path, default=repo_root() / "manifests", help="the kustomize tree"
    )
    parser.add_argument(
        "--kubectl",
        type=Path,
        default=kubernetes_bin(K8S_VERSION) / "kubectl",
        help="kubectl to build with (the default version's: the chart must not depend on it)",
    )
    parser.set_defaults(handler=run_chart)


def kustomize(kubectl: Path, directory: Path) -> list[JSON]:
    """The documents `kubectl kustomize DIRECTORY` prints (components may load from anywhere)."""
    if not kubectl.exists():
        raise FileNotFoundError(f"no kubectl at {kubectl} (make setup builds it)")
    result = subprocess.run(
        [str(kubectl), "kustomize", "--load-restrictor=LoadRestrictionsNone", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory}: {result.stderr.strip()}")
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def find_components(manifests: Path) -> list[Path]:
    """Every directory under `manifests` whose kustomization is a Component."""
    found = []
    for path in sorted(manifests.rglob("kustomization.yaml")):
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if loaded.get("kind") == "Component":
            found.append(path.parent)
    return found


def _key(doc: JSON) -> tuple[str, str, str]:
    metadata = doc.get("metadata") or {}
    return doc["kind"], metadata.get("namespace", ""), metadata["name"]


def build_component(
    kubectl: Path, manifests: Path, directory: Path, base: list[JSON]
) -> tuple[list[JSON], list[tuple[str, str]]]:
    """The objects a Component adds to the base (built on top of it, as an overlay would),
    and the (kind, name) of those it removes.

    A component that changes objects of the base has no place in the chart as an
    on/off switch: refused, naming the objects.
    """
    with tempfile.TemporaryDirectory(prefix="infergate-chart-") as scratch:
        root = Path(scratch).resolve()
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # Kustomize takes paths relative to the kustomization only.
            "resources": [os.path.relpath(manifests.resolve(), root)],
            "components": [os.path.relpath(directory.resolve(), root)],
        }
        (root / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        built = kustomize(kubectl, root)
    before = {_key(d): d for d in base}
    changed = ["/".join(_key(d)) for d in built if _key(d) in before and before[_key(d)] != d]
    if changed:
        raise RuntimeError(
            f"component {directory} changes objects of the base ({', '.join(changed)}); the "
            "chart can only switch on what a component adds"
        )
    after = {_key(d) for d in built}
    removed = [(kind, name) for (kind, _, name) in before if (kind, _, name) not in after]
    return [d for d in built if _key(d) not in before], removed


def generate(manifests: Path, kubectl: Path) -> dict[str, str]:
    """Chart path -> text, from the manifests as they are now."""
    base = kustomize(kubectl, manifests)
    components = []
    gates = []
    seen: dict[str, Path] = {}
    for directory in find_components(manifests):
        added, removed = build_component(kubectl, manifests, directory, base)
        if removed:
            if added:
                raise RuntimeError(
                    f"component {directory} both adds and removes objects; the chart can "
                    "switch a component on, or leave objects out by Kubernetes version"
                )
            gates.append(version_gate(directory.name, removed))
            continue
        key = component_key(directory.name)
        if key in seen:
            raise RuntimeError(f"components {seen[key]} and {directory} share the name {key}")
        seen[key] = directory
        relative = directory.relative_to(manifests.parent)
        components.append(Component(key=key, path=str(relative), documents=tuple(added)))
    namespace_scope = kustomize(kubectl, manifests / NAMESPACE_SCOPE)
    return render_chart(
        base,
        components,
        version=__version__,
        gates=gates,
        namespace_scope=namespace_scope,
    )


def run_chart(args: argparse.Namespace) -> int:
    """Write or check; the exit code is 0 when the chart matches the manifests."""
    try:
        generated = generate(args.manifests, args.kubectl)
    except (FileNotFoundError, RuntimeError, ValueError) as error:
        print(f"chart: {error}", file=sys.stderr)
        return 1
    if args.out is not None:
        return _write(args.out, generated)
    return _check(args.check, generated)


def _files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def _write(directory: Path, generated: dict[str, str]) -> int:
    for name, text in generated.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    for stale in sorted(_files(directory) - set(generated)):
        (directory / stale).unlink()
        print(f"removed {directory / stale} (no longer generated)")
    return 0


def _check(directory: Path, generated: dict[str, str]) -> int:
    problems = []
    for name, text in generated.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif (current := path.read_text(encoding="utf-8")) != text:
            problems.append(diff_summary(path, current, text))
    problems += [
        f"{directory / extra}: not generated from manifests/"
        for extra in sorted(_files(directory) - set(generated))
    ]
    if not problems:
        print(f"chart check: {len(generated)} files in {directory} match manifests/")
        return 0
    print(
        "chart check: the chart differs from manifests/; run `make chart` and commit",
        file=sys.stderr,
    )
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1
