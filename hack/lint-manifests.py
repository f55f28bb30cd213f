"""Run the manifest linters a platform team runs, on everything infergate installs or makes.

Inputs, rendered into out/lint/inputs/ (one YAML stream each):
  kustomize-*   the kustomize base and overlays (the default version's kubectl)
  chart-*       `helm template` of charts/infergate, for the newest and the oldest version
  operator-*    the objects the operator renders for manifests/examples (each revision's
                ConfigMap, workload and Services, owned as it writes them; a runner Job)

Linters (hack/lint-tools.sh caches them; helm is hack/platform-tools.sh's):
  helm lint --strict            the chart
  kubeconform -strict           every input, once per supported Kubernetes version, against
                                JSON schemas generated from that version's own API server
                                (/openapi/v2 of the local cluster, cached under
                                $INFERGATE_CACHE/kubeconform-schemas-VERSION/) and from
                                our CRDs; the published schemas cannot be fetched here
  kube-score score              every input
  checkov --framework kubernetes every input

`python3 hack/lint-manifests.py` prints one line of counts per linter and input and writes
them to out/lint/summary.json; `--schemas-only VERSION` only makes the schemas (it starts
that version's local cluster if it is not up, and stops it again). docs/install.md
("Linters") explains each remaining finding.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "operator"), str(REPO / "dev")]

from infergate.api import InferenceDeploymentSpec  # noqa: E402
from infergate.plan.check.observed import observe_parity_check  # noqa: E402
from infergate.plan.deployment.desired import Owner, desired_revision  # noqa: E402
from infergate.render.check_children import runner_job  # noqa: E402
from infergate_dev.localcluster import controlplane, processes  # noqa: E402
from infergate_dev.localcluster.layout import (  # noqa: E402
    K8S_VERSION,
    K8S_VERSION_ENV,
    MATRIX_K8S_VERSIONS,
    ClusterLayout,
    cache_dir,
    gateway_api_crds,
    kubernetes_bin,
    lws_crds,
)

JSON = dict[str, Any]
OUT = REPO / "out" / "lint"
VERSIONS = (K8S_VERSION, *MATRIX_K8S_VERSIONS)
KUSTOMIZATIONS = {
    "kustomize-base": "manifests",
    "kustomize-before-1.36": "manifests/overlays/kubernetes-before-1.36",
    "kustomize-production": "manifests/overlays/production",
    "kustomize-namespaced": "manifests/overlays/namespaced",
}
# kubeconform's schema location: one file per group (its first dotted part for a
# group-qualified apiVersion, the version for core), kind and version.
LOCATION = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
# Kinds no schema is made for here (the Prometheus Operator's CRDs are not installed).
NO_SCHEMA = ("ServiceMonitor", "PrometheusRule")


def _tool(script: str, name: str) -> Path:
    found = subprocess.run(
        [str(REPO / "hack" / script), "path", name], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(found)
    if not path.exists():
        raise SystemExit(f"no {name} at {path}: run hack/{script} {name} (make lint-tools)")
    return path


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _dump(documents: list[JSON]) -> str:
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in documents)


def _load(text: str) -> list[JSON]:
    return [d for d in yaml.safe_load_all(text) if d]


# -- inputs --------------------------------------------------------------------------------


def _kustomize(directory: str) -> list[JSON]:
    kubectl = kubernetes_bin(K8S_VERSION) / "kubectl"
    built = subprocess.run(
        [
            str(kubectl),
            "kustomize",
            "--load-restrictor=LoadRestrictionsNone",
            str(REPO / directory),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return _load(built)


def _chart(kube_version: str) -> list[JSON]:
    rendered = subprocess.run(
        [
            str(_tool("platform-tools.sh", "helm")),
            "template",
            "infergate",
            str(REPO / "charts/infergate"),
            "--namespace",
            "infergate-system",
            "--include-crds",
            "--kube-version",
            kube_version.lstrip("v"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return _load(rendered)


def _operator_objects() -> list[JSON]:
    """What the operator writes for each example: a canary revision of every
    InferenceDeployment (owned and stamped as written) and the runner Job of the example
    ParityCheck, in the namespace `llm`."""
    objects: list[JSON] = []
    for path in sorted((REPO / "manifests" / "examples").glob("*.yaml")):
        for document in _load(path.read_text(encoding="utf-8")):
            if document["kind"] == "InferenceDeployment":
                spec = InferenceDeploymentSpec.model_validate(document["spec"])
                owner = Owner(document["metadata"]["name"], "llm", "00000000-0000-0000-0000-0")
                revision = desired_revision(owner, spec, replicas=1, role="canary")
                objects += revision.manifests()
            elif document["kind"] == "ParityCheck":
                check = {
                    **document,
                    "metadata": {
                        **document["metadata"],
                        "namespace": "llm",
                        "uid": "00000000-0000-0000-0000-1",
                    },
                }
                observed = observe_parity_check(check).spec
                assert observed is not None  # noqa: S101 - the example is valid (unit tests)
                objects.append(
                    runner_job(
                        check,
                        observed.runner,
                        image="ghcr.io/infergate/infergate:0.1.0",
                        runner_namespace="infergate-system",
                    )
                )
    return objects


def render_inputs() -> dict[str, Path]:
    directory = OUT / "inputs"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    inputs: dict[str, list[JSON]] = {name: _kustomize(d) for name, d in KUSTOMIZATIONS.items()}
    for version in VERSIONS:
        inputs[f"chart-{version}"] = _chart(version)
    inputs["operator-examples"] = _operator_objects()
    paths = {}
    for name, documents in inputs.items():
        paths[name] = directory / f"{name}.yaml"
        paths[name].write_text(_dump(documents), encoding="utf-8")
    return paths


# -- kubeconform's schemas -------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """Draft-4 JSON schema from an OpenAPI schema: objects with properties refuse unknown
    fields (kubeconform -strict), optional fields may be null (the API server drops them),
    int-or-string and quantities take numbers too."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("x-kubernetes-int-or-string") or schema.get("format") == "int-or-string":
        return {
            "anyOf": [{"type": "string"}, {"type": "integer"}],
            "description": schema.get("description", ""),
        }
    out: JSON = {}
    for key, value in schema.items():
        if key == "properties":
            needed = frozenset(schema.get("required") or [])
            out[key] = {name: _nullable(_strict(s), name in needed) for name, s in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = _strict(value)
        elif key == "definitions":
            out[key] = {name: _strict(s) for name, s in value.items()}
        elif key.startswith("x-kubernetes-") or key in ("nullable",):
            continue
        else:
            out[key] = value
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _nullable(schema: JSON, required: bool) -> JSON:
    kind = schema.get("type")
    if required or not isinstance(kind, str):
        return schema
    return {**schema, "type": [kind, "null"]}


def _refs(schema: Any, found: set[str]) -> None:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref.removeprefix("#/definitions/"))
        for value in schema.values():
            _refs(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _refs(value, found)


def _closure(definitions: JSON, name: str) -> JSON:
    wanted, todo = {name}, [name]
    while todo:
        found: set[str] = set()
        _refs(definitions[todo.pop()], found)
        for ref in found - wanted:
            wanted.add(ref)
            todo.append(ref)
    return {n: definitions[n] for n in sorted(wanted)}


# Kubernetes' own quantity type is a string in OpenAPI v2, but manifests write numbers too.
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def _write(directory: Path, group: str, version: str, kind: str, schema: JSON) -> None:
    folder = directory / (group.split("/", 1)[0] if group else version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{kind.lower()}_{version}.json").write_text(json.dumps(schema), encoding="utf-8")


def _builtin_schemas(version: str, directory: Path) -> int:
    """One standalone schema per built-in kind the API server of `version` serves."""
    os.environ[K8S_VERSION_ENV] = version
    layout = ClusterLayout.default()
    started = not any(processes.running(layout.run, n) for n in controlplane.COMPONENTS)
    controlplane.up(layout, say=False)
    try:
        kubectl = [str(layout.bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}"]
        openapi = json.loads(
            subprocess.run(
                [*kubectl, "get", "--raw", "/openapi/v2"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        crds = json.loads(
            subprocess.run(
                [*kubectl, "get", "crd", "-o", "json"], capture_output=True, text=True, check=True
            ).stdout
        )["items"]
    finally:
        if started:
            controlplane.down(layout)
    from_crds = {c["spec"]["group"] for c in crds}
    definitions: JSON = openapi["definitions"]
    definitions[_QUANTITY] = {"anyOf": [{"type": "string"}, {"type": "number"}]}
    strict = {name: _strict(definition) for name, definition in definitions.items()}
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or []:
            if gvk["group"] in from_crds or not name.endswith(f".{gvk['kind']}"):
                continue  # a CRD's kind, or a shared type (DeleteOptions, WatchEvent)
            closure = _closure(definitions, name)
            schema = {
                "$schema": "http://json-schema.org/draft-04/schema#",
                **strict[name],
                "definitions": {n: strict[n] for n in closure},
            }
            _write(directory, gvk["group"], gvk["version"], gvk["kind"], schema)
            written += 1
    return written


def schemas(version: str) -> Path:
    """The cached schemas of `version`'s built-in kinds (made once)."""
    directory = cache_dir() / f"kubeconform-schemas-{version}"
    if (directory / ".complete").exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    count = _builtin_schemas(version, directory)
    (directory / ".complete").write_text(f"{count} kinds from /openapi/v2 of {version}\n")
    return directory


def crd_schemas() -> Path:
    """Schemas of our CRDs (and the Gateway API's and LeaderWorkerSet's, which the local
    cluster has: the Gateway API release of the default version, not also the older one
    the matrix's 1.30 cluster takes), from their openAPIV3Schema."""
    directory = OUT / "crd-schemas"
    shutil.rmtree(directory, ignore_errors=True)
    files = [*sorted((REPO / "crds").glob("*.yaml"))]
    for cached in (gateway_api_crds(K8S_VERSION), lws_crds()):
        files += sorted(cached.glob("*.yaml"))
    for path in files:
        for crd in _load(path.read_text(encoding="utf-8")):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            for served in crd["spec"]["versions"]:
                schema = _strict(served["schema"]["openAPIV3Schema"])
                schema["$schema"] = "http://json-schema.org/draft-04/schema#"
                _write(
                    directory,
                    crd["spec"]["group"],
                    served["name"],
                    crd["spec"]["names"]["kind"],
                    schema,
                )
    return directory


# -- linters ---------------------------------------------------------------------------------


def helm_lint() -> tuple[int, str]:
    result = subprocess.run(
        [
            str(_tool("platform-tools.sh", "helm")),
            "lint",
            "--strict",
            str(REPO / "charts/infergate"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = len(re.findall(r"^\[(?:WARNING|ERROR|INFO)\]", result.stdout, re.MULTILINE))
    return findings + (result.returncode != 0 and findings == 0), result.stdout + result.stderr


def kubeconform(path: Path, version: str, builtin: Path, crds: Path) -> tuple[JSON, str]:
    result = subprocess.run(
        [
            str(_tool("lint-tools.sh", "kubeconform")),
            "-strict",
            "-summary",
            "-output",
            "json",
            "-kubernetes-version",
            version.lstrip("v"),
            "-schema-location",
            f"{builtin}/{LOCATION}",
            "-schema-location",
            f"{crds}/{LOCATION}",
            "-skip",
            ",".join(NO_SCHEMA),
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    summary = report.get("summary") or {}
    counts = {k: summary.get(k, 0) for k in ("valid", "invalid", "errors", "skipped")}
    lines = [
        f"{r['kind']}/{r['name']}: {r['msg']}"
        for r in report.get("resources") or []
        if r["status"] in ("statusInvalid", "statusError")
    ]
    return counts, "\n".join(lines)


def kube_score(path: Path) -> tuple[Counter[str], str]:
    result = subprocess.run(
        [str(_tool("lint-tools.sh", "kube-score")), "score", "--output-format", "json", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    counts: Counter[str] = Counter()
    lines = []
    for obj in json.loads(result.stdout or "[]"):
        name = f"{obj['type_meta']['kind']}/{obj['object_meta']['name']}"
        for check in obj.get("checks") or []:
            if check.get("skipped"):
                continue
            grade = check["grade"]
            level = {1: "critical", 5: "warning"}.get(grade)
            if level:
                counts[level] += 1
                lines.append(f"{level}: {name}: {check['check']['id']}")
    return counts, "\n".join(lines)


def checkov(path: Path) -> tuple[Counter[str], str]:
    result = subprocess.run(
        [
            str(_tool("lint-tools.sh", "checkov")),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "-o",
            "json",
            "--file",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout or "{}")
    reports = report if isinstance(report, list) else [report]
    counts: Counter[str] = Counter()
    lines = []
    for one in reports:
        summary = one.get("summary") or {}
        counts["passed"] += summary.get("passed", 0)
        counts["failed"] += summary.get("failed", 0)
        for failed in (one.get("results") or {}).get("failed_checks") or []:
            lines.append(f"{failed['check_id']} {failed['resource']}: {failed['check_name']}")
    return counts, "\n".join(sorted(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas-only", choices=VERSIONS, help="only make this version's schemas")
    parser.add_argument("--linters", default="helm,kubeconform,kube-score,checkov")
    parser.add_argument(
        "--versions", default=",".join(VERSIONS), help="Kubernetes versions for kubeconform"
    )
    args = parser.parse_args()
    if args.schemas_only:
        _say(str(schemas(args.schemas_only)))
        return 0
    linters = set(args.linters.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    inputs = render_inputs()
    summary: JSON = {}
    details = []

    def record(linter: str, name: str, counts: Any, text: str) -> None:
        summary.setdefault(linter, {})[name] = counts
        _say(f"{linter:24} {name:28} {json.dumps(counts, sort_keys=True)}")
        if text.strip():
            details.append(f"== {linter} {name}\n{text.strip()}\n")

    if "helm" in linters:
        count, text = helm_lint()
        record("helm-lint-strict", "chart", {"findings": count}, text)
    if "kubeconform" in linters:
        crds = crd_schemas()
        for version in args.versions.split(","):
            builtin = schemas(version)
            for name, path in inputs.items():
                if name.startswith("chart-") and name != f"chart-{version}":
                    continue  # the chart renders per version: each against its own
                counts, text = kubeconform(path, version, builtin, crds)
                record(f"kubeconform-{version}", name, dict(counts), text)
    for linter, run in (("kube-score", kube_score), ("checkov", checkov)):
        if linter in linters:
            for name, path in inputs.items():
                if name.startswith("chart-") and name != f"chart-{K8S_VERSION}":
                    continue
                counts, text = run(path)
                record(linter, name, dict(counts), text)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    (OUT / "findings.txt").write_text("\n".join(details))
    _say(f"findings listed in {OUT / 'findings.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
