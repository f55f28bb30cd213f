"""`kubectl infergate` against the local API server: a deployment and its check, with the
status an operator would have written (written here through the status subresource, so
no operator is needed), read back the way a person at kubectl reads them."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.kubectl_plugin import main
from tests.harness import REPO, Cluster

pytestmark = pytest.mark.cluster

CHECK = "qwen-3f2a9c1d0e"
HTML = "<!doctype html><html><body><h1>ParityCheck qwen-3f2a9c1d0e: Failed</h1></body></html>\n"


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/inferencedeployments.infergate.io", "crd/paritychecks.infergate.io",
    )  # fmt: skip
    return cluster


def _status(cluster: Cluster, kind: str, name: str, namespace: str, status: Any) -> None:
    cluster.kubectl(
        "patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


@pytest.fixture
def rollout(crds: Cluster, namespace: str) -> str:
    """InferenceDeployment qwen with a canary under a failed check, and its report."""
    cluster = crds
    cluster.apply(
        {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "qwen"},
            "spec": {
                "model": {"name": "qwen", "uri": "pvc://models/qwen"},
                "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096},
                "accelerator": {"kind": "nvidia-gpu"},
                "rollout": {
                    "parity": {"suite": {"inline": [{"id": "capital", "text": "Paris is"}]}}
                },
            },
        },
        namespace,
    )
    cluster.apply(
        {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": "ParityCheck",
            "metadata": {"name": CHECK},
            "spec": {
                "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "81422cb403"},
                "candidate": {
                    "inferenceDeploymentRef": {"name": "qwen"},
                    "revision": "3f2a9c1d0e",
                },
                "suite": {"inline": [{"id": "capital", "text": "Paris is"}]},
            },
        },
        namespace,
    )
    now = "2026-12-02T10:00:00Z"
    _status(
        cluster, "idep", "qwen", namespace,
        {
            "phase": "Verifying",
            "stableRevision": "81422cb403",
            "canaryRevision": "3f2a9c1d0e",
            "revisions": [
                {"hash": "81422cb403", "engine": "vllm", "dtype": "bfloat16",
                 "verdict": "Passed", "promotedAt": now},
                {"hash": "3f2a9c1d0e", "engine": "vllm", "dtype": "float16"},
            ],
            "lastParityCheck": {"name": CHECK, "revision": "3f2a9c1d0e", "phase": "Failed",
                                "verdict": "Failed"},
            "conditions": [
                {"type": "ParityPassed", "status": "False", "reason": "ParityFailed",
                 "message": "token match rate 0.8125 < 0.95", "lastTransitionTime": now},
            ],
        },
    )  # fmt: skip
    _status(
        cluster, "pcheck", CHECK, namespace,
        {
            "phase": "Failed",
            "progress": {"done": 16, "total": 16},
            "profile": "dtype-change",
            "verdict": {
                "passed": False,
                "outcome": "Failed",
                "summary": "1 of 9 limits passed",
                "reasons": [{"metric": "minTokenMatchRate", "value": 0.8125, "threshold": 0.95,
                             "comparison": ">=", "prompts": ["zh-weather", "ids-count"]}],
            },
            "reportRef": {"name": f"{CHECK}-report", "key": "report.html"},
        },
    )  # fmt: skip
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{CHECK}-report"},
            "data": {"report.html": HTML, "result.json": '{"status": "Failed"}'},
        },
        namespace,
    )
    return namespace


def test_status_shows_revisions_and_the_checks_progress_and_verdict(
    crds: Cluster, rollout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--kubeconfig", str(crds.kubeconfig), "-n", rollout, "status", "qwen"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "phase:    Verifying" in out
    assert "81422cb403  vllm/bfloat16  verdict=Passed  stable" in out
    assert "3f2a9c1d0e  vllm/float16  verdict=-  canary" in out
    assert f"check:    {CHECK}  Failed  16/16 prompts  profile dtype-change" in out
    assert "verdict:  Failed  1 of 9 limits passed" in out
    assert "minTokenMatchRate = 0.8125, needs >= 0.95; prompts: zh-weather, ids-count" in out


def test_report_writes_the_checks_html_report_to_a_file(
    crds: Cluster, rollout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "reports" / "qwen.html"
    result_file = tmp_path / "result.json"
    code = main(
        ["report", "qwen", "-o", str(out_file), "--json", str(result_file),
         "-n", rollout, "--kubeconfig", str(crds.kubeconfig)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr()
    assert out_file.read_text(encoding="utf-8") == HTML
    assert json.loads(result_file.read_text(encoding="utf-8")) == {"status": "Failed"}
    assert f"ParityCheck {rollout}/{CHECK}, Failed" in capsys.readouterr().out


def test_report_reads_a_compressed_report(
    crds: Cluster, rollout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = base64.b64encode(gzip.compress(HTML.encode())).decode()
    crds.kubectl(
        "patch", "configmap", f"{CHECK}-report", "-n", rollout, "--type=merge",
        "-p", json.dumps({"data": {"report.html": None}, "binaryData": {"report.html.gz": packed}}),
    )  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert (
        main(["report", "--check", CHECK, "-n", rollout, "--kubeconfig", str(crds.kubeconfig)]) == 0
    )
    assert (tmp_path / f"{CHECK}.html").read_text(encoding="utf-8") == HTML


def test_kubeconfig_from_the_environment_and_namespace_from_the_context(
    crds: Cluster, rollout: str, tmp_path: Path
) -> None:
    """As kubectl runs a plugin: $KUBECONFIG, --context, no -n; here through `python -m`."""
    config = yaml.safe_load(crds.kubeconfig.read_text())
    base = config["contexts"][0]["context"]
    config["contexts"].append({"name": "llm", "context": {**base, "namespace": rollout}})
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "infergate.kubectl_plugin", "status", "qwen", "--context", "llm"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"InferenceDeployment {rollout}/qwen" in result.stdout
    assert f"check:    {CHECK}  Failed" in result.stdout
    # Without --context the current context's namespace (default) is used: not found there.
    other = subprocess.run(
        [sys.executable, "-m", "infergate.kubectl_plugin", "status", "qwen"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        timeout=60,
    )
    assert other.returncode == 1
    assert "not found" in other.stdout + other.stderr


def test_a_missing_deployment_is_reported_not_raised(
    crds: Cluster, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(crds.kubeconfig)
    assert main(["status", "nope", "-n", namespace, "--kubeconfig", kubeconfig]) == 1
    assert main(["report", "nope", "-n", namespace, "--kubeconfig", kubeconfig]) == 1
    out = capsys.readouterr()
    assert "nope" in out.out + out.err


def test_diff_names_what_the_canary_changes_against_stable(
    crds: Cluster, rollout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def revision(name: str, dtype: str, config: dict[str, Any]) -> dict[str, Any]:
        pinned = {
            "model": {"name": "qwen", "uri": "pvc://models/qwen"},
            "engine": {"kind": "vllm", "dtype": dtype, "maxModelLen": 4096, "config": config},
            "accelerator": {"kind": "nvidia-gpu", "count": 1},
        }
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"qwen-{name}",
                "annotations": {"infergate.io/revision-spec": json.dumps(pinned)},
            },
            "data": {},
        }

    crds.apply(revision("81422cb403", "bfloat16", {"rms_norm_eps": 1e-6}), rollout)
    crds.apply(revision("3f2a9c1d0e", "float16", {"rms_norm_eps": 1e-4}), rollout)
    code = main(["diff", "qwen", "-n", rollout, "--kubeconfig", str(crds.kubeconfig)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[1:] == [
        "  engine.dtype: bfloat16 -> float16",
        "  engine.config.rms_norm_eps: 1e-06 -> 0.0001",
    ]
    code = main(["diff", "qwen", "-o", "json", "-n", rollout, "--kubeconfig", str(crds.kubeconfig)])
    listed = json.loads(capsys.readouterr().out)
    assert (listed["from"], listed["to"]) == ("81422cb403", "3f2a9c1d0e")
    assert listed["changes"][0] == {"path": "engine.dtype", "from": "bfloat16", "to": "float16"}


GOLDEN_CHECK = "qwen-aa12bb34cc"
GOLDEN_ENTRIES = [
    "{ns}/qwen/81422cb403-20261202T100000123456Z-baseline-5d41402a",
    "{ns}/qwen/aa12bb34cc-20261202T100000123456Z-candidate-0c4af722",
]


def _reader_kubeconfig(cluster: Cluster, namespace: str, path: Path) -> Path:
    """A kubeconfig of a person who may only read ParityChecks in `namespace` (a real token
    of a ServiceAccount bound to such a Role), with `namespace` as its context's."""
    rule = {"apiGroups": ["infergate.io"], "resources": ["paritychecks"], "verbs": ["get", "list"]}
    for document in (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "check-reader"}, "rules": [rule]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "check-reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "check-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]},
    ):  # fmt: skip
        cluster.apply(document, namespace)
    token = cluster.kubectl(
        "create", "token", "reader", "-n", namespace, "--duration=10m"
    ).stdout.strip()
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": server}],
                "users": [{"name": "reader", "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "reader",
                        "context": {"cluster": "local", "user": "reader", "namespace": namespace},
                    }
                ],
                "current-context": "reader",
            }
        )
    )
    return path


def test_golden_list_without_a_store_shows_what_passed_checks_recorded(
    crds: Cluster, rollout: str, tmp_path: Path
) -> None:
    """A person with only get/list on ParityChecks, and no store credentials or volume, lists
    the records a Passed check stored; the Failed check of the fixture contributes none."""
    entries = [e.format(ns=rollout) for e in GOLDEN_ENTRIES]
    crds.apply(
        {
            "apiVersion": "infergate.io/v1alpha1",
            "kind": "ParityCheck",
            "metadata": {"name": GOLDEN_CHECK},
            "spec": {
                "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "81422cb403"},
                "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aa12bb34cc"},
                "suite": {"inline": [{"id": "capital", "text": "Paris is"}]},
            },
        },
        rollout,
    )
    _status(
        crds, "pcheck", GOLDEN_CHECK, rollout,
        {
            "phase": "Passed",
            "baselineRevision": "81422cb403",
            "candidateRevision": "aa12bb34cc",
            "completionTime": "2026-12-02T10:00:02Z",
            "golden": {
                "stored": True,
                "store": "directory /var/lib/infergate/golden",
                "suiteDigest": "c" * 64,
                "entries": entries,
                "sizeBytes": 2 << 20,
            },
        },
    )  # fmt: skip
    kubeconfig = _reader_kubeconfig(crds, rollout, tmp_path / "reader.kubeconfig")

    def plugin(*args: str) -> subprocess.CompletedProcess[str]:
        # As kubectl runs a plugin: $KUBECONFIG, the context's namespace, no -n.
        return subprocess.run(
            [sys.executable, "-m", "infergate.kubectl_plugin", "golden", "list", *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            timeout=60,
        )

    listed = plugin()
    assert listed.returncode == 0, listed.stdout + listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["DEPLOYMENT", "REVISION", "ROLE"]
    assert lines[1].split()[:7] == [
        f"{rollout}/qwen", "81422cb403", "baseline", "2026-12-02", "10:00:00", GOLDEN_CHECK,
        "c" * 12,
    ]  # fmt: skip
    assert lines[2].split()[:3] == [f"{rollout}/qwen", "aa12bb34cc", "candidate"]
    assert "2.0MiB" in lines[1]
    assert len([line for line in lines if line.startswith(f"{rollout}/")]) == 2
    assert "not read from the store" in listed.stdout
    assert "--store reads the store's own index" in listed.stdout
    document = json.loads(plugin("--revision", "aa12bb34cc", "-o", "json").stdout)
    assert [r["entry"] for r in document["records"]] == entries[1:]
    assert document["records"][0]["counterpartRevision"] == "81422cb403"
    # Every namespace is past this person's RBAC: refused, said, exit 2.
    refused = plugin("-A")
    assert refused.returncode == 2
    assert "cannot list the ParityChecks" in refused.stderr
    assert "403" in refused.stderr
