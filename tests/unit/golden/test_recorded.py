"""`infergate golden list` without --store: the records Passed ParityChecks say they stored
(status.golden), selected and printed from plain ParityCheck objects."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from infergate.cli import main
from infergate.golden.recorded import (
    SOURCE,
    listing_json,
    listing_text,
    recorded_golden,
)

STABLE, CANARY, NEXT = "81422cb403", "3f2a9c1d0e", "aa12bb34cc"
DIGEST = "d" * 64


def _entry(deployment: str, revision: str, stamp: str, role: str, ns: str = "llm") -> str:
    return f"{ns}/{deployment}/{revision}-{stamp}-{role}-5d41402a"


def _check(
    name: str,
    *,
    phase: str = "Passed",
    baseline: str = STABLE,
    candidate: str = CANARY,
    deployment: str = "qwen",
    stamp: str = "20261109T031500123456Z",
    golden: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "baselineRevision": baseline,
        "candidateRevision": candidate,
        "completionTime": "2026-11-09T03:15:02Z",
    }
    if golden is None:
        golden = {
            "stored": True,
            "store": "directory /var/lib/infergate/golden",
            "suiteDigest": DIGEST,
            "entries": [
                _entry(deployment, baseline, stamp, "baseline"),
                _entry(deployment, candidate, stamp, "candidate"),
            ],
            "sizeBytes": 3 << 20,
        }
    if golden:
        status["golden"] = golden
    return {
        "metadata": {"namespace": "llm", "name": name},
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": deployment}, "revision": baseline},
            "candidate": {"inferenceDeploymentRef": {"name": deployment}, "revision": candidate},
        },
        "status": status,
    }


def _rows(checks: list[dict[str, Any]], **only: str) -> list[tuple[str, str, str, str]]:
    listing = recorded_golden(checks, **only)
    return [(r.deployment, r.revision, r.role, r.check) for r in listing.records]


FIRST = _check("qwen-" + CANARY)
LATER = _check("qwen-" + NEXT, baseline=CANARY, candidate=NEXT, stamp="20261110T080000000000Z")
OTHER = _check("chat-" + NEXT, deployment="chat", baseline=STABLE, candidate=NEXT)


@pytest.mark.parametrize(
    ("checks", "only", "expected"),
    [
        # Both sides of a Passed check, baseline first.
        (
            [FIRST],
            {},
            [("qwen", STABLE, "baseline", FIRST["metadata"]["name"]),
             ("qwen", CANARY, "candidate", FIRST["metadata"]["name"])],
        ),
        # Oldest first, whatever order the API lists the checks in.
        (
            [LATER, FIRST],
            {},
            [("qwen", STABLE, "baseline", "qwen-" + CANARY),
             ("qwen", CANARY, "candidate", "qwen-" + CANARY),
             ("qwen", CANARY, "baseline", "qwen-" + NEXT),
             ("qwen", NEXT, "candidate", "qwen-" + NEXT)],
        ),
        # One deployment's, one revision's.
        ([FIRST, OTHER], {"deployment": "chat"},
         [("chat", STABLE, "baseline", "chat-" + NEXT), ("chat", NEXT, "candidate", "chat-" + NEXT)]),
        ([FIRST, LATER], {"revision": CANARY},
         [("qwen", CANARY, "candidate", "qwen-" + CANARY), ("qwen", CANARY, "baseline", "qwen-" + NEXT)]),
        # Only Passed checks store records; a check without status.golden (an operator
        # with no store, a drift run) or still running contributes nothing.
        ([_check("f", phase="Failed"), _check("r", phase="Running")], {}, []),
        ([_check("none", golden={})], {}, []),
        ([_check("not-stored", golden={"stored": False, "message": "store full"})], {}, []),
    ],
)  # fmt: skip
def test_selection(
    checks: list[dict[str, Any]], only: dict[str, str], expected: list[tuple[str, ...]]
) -> None:
    assert _rows(checks, **only) == expected


def test_a_record_carries_its_time_store_suite_and_counterpart() -> None:
    [baseline, candidate] = recorded_golden([FIRST]).records
    assert baseline.recorded == datetime(2026, 11, 9, 3, 15, 0, 123456, tzinfo=UTC)
    assert baseline.counterpart == CANARY
    assert candidate.counterpart == STABLE
    assert baseline.store == "directory /var/lib/infergate/golden"
    assert baseline.suite_digest == DIGEST
    assert baseline.pair_size_bytes == 3 << 20
    assert baseline.completed == "2026-11-09T03:15:02Z"


def test_an_entry_name_that_does_not_parse_still_shows_with_the_checks_revision() -> None:
    odd = _check("odd", golden={"stored": True, "entries": ["llm/qwen/not-a-name", "x"]})
    [first, second] = recorded_golden([odd]).records
    assert (first.deployment, first.revision, first.role, first.recorded) == (
        "qwen", STABLE, "baseline", None,
    )  # fmt: skip
    # Not even namespace/deployment/name: the deployment comes from the check's spec.
    assert (second.namespace, second.deployment, second.revision, second.role) == (
        "llm", "qwen", CANARY, "candidate",
    )  # fmt: skip


def test_passed_checks_that_stored_nothing_are_named_with_why() -> None:
    listing = recorded_golden([FIRST, _check("full", golden={"stored": False, "message": "full"})])
    assert len(listing.records) == 2
    assert [(n.check, n.message) for n in listing.not_stored] == [("full", "full")]
    text = listing_text(listing, "namespace llm")
    assert "Passed check llm/full stored no records: full" in text


def test_the_table_says_what_it_is() -> None:
    lines = listing_text(recorded_golden([FIRST]), "namespace llm").splitlines()
    assert lines[0].split()[:4] == ["DEPLOYMENT", "REVISION", "ROLE", "RECORDED"]
    assert lines[1].split()[:6] == [
        "llm/qwen", STABLE, "baseline", "2026-11-09", "03:15:00", "qwen-" + CANARY,
    ]  # fmt: skip
    assert DIGEST[:12] in lines[1]
    assert "3.0MiB" in lines[1]
    assert f"{STABLE}-20261109T031500123456Z-baseline-5d41402a" in lines[1]
    assert lines[-1] == f"source: {SOURCE}"
    assert "not read from the store" in SOURCE
    assert "--store reads the store's own index" in SOURCE


def test_nothing_recorded_says_where_it_looked() -> None:
    text = listing_text(recorded_golden([]), "namespace llm")
    assert (
        text.splitlines()[0] == "no golden records recorded by Passed ParityChecks in namespace llm"
    )


def test_json_has_every_field_and_the_source() -> None:
    document = json.loads(listing_json(recorded_golden([FIRST]), "namespace llm"))
    assert document["scope"] == "namespace llm"
    assert document["source"] == SOURCE
    assert document["records"][1] == {
        "entry": _entry("qwen", CANARY, "20261109T031500123456Z", "candidate"),
        "namespace": "llm",
        "deployment": "qwen",
        "revision": CANARY,
        "role": "candidate",
        "recorded": "2026-11-09T03:15:00.123456+00:00",
        "check": "qwen-" + CANARY,
        "checkCompleted": "2026-11-09T03:15:02Z",
        "counterpartRevision": STABLE,
        "suiteDigest": DIGEST,
        "store": "directory /var/lib/infergate/golden",
        "pairSizeBytes": 3 << 20,
    }
    assert document["notStored"] == []


# -- the command, with the API server's answer replaced by plain data ----------------------


class Reads:
    """The cluster `golden list` asks (in place of kube.golden_reads.GoldenReads)."""

    default_namespace = "llm"

    def __init__(self, checks: list[dict[str, Any]], refusal: Exception | None = None) -> None:
        self.checks, self.refusal = checks, refusal
        self.asked: list[str | None] = []
        self.closed = False

    def parity_checks(self, namespace: str | None) -> list[dict[str, Any]]:
        self.asked.append(namespace)
        if self.refusal is not None:
            raise self.refusal
        return [c for c in self.checks if namespace in (None, c["metadata"]["namespace"])]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    from infergate.kube import golden_reads

    fake = Reads([FIRST, OTHER])
    monkeypatch.setattr(golden_reads.GoldenReads, "from_kubeconfig", lambda *_: fake)
    return fake


def test_list_without_store_asks_the_cluster(
    reads: Reads, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["golden", "list", "--deployment", "qwen"]) == 0
    out = capsys.readouterr().out
    assert reads.asked == ["llm"]  # the kubeconfig context's namespace
    assert reads.closed
    assert out.splitlines()[1].split()[:3] == ["llm/qwen", STABLE, "baseline"]
    assert "chat" not in out.split("source:")[0]
    assert "not read from the store" in out
    assert main(["golden", "list", "-A", "-o", "json"]) == 0
    assert reads.asked[-1] is None
    assert len(json.loads(capsys.readouterr().out)["records"]) == 4


def test_the_kubectl_plugin_lists_from_the_cluster_in_its_namespace(
    reads: Reads, capsys: pytest.CaptureFixture[str]
) -> None:
    from infergate.kubectl_plugin import main as kubectl_infergate

    assert kubectl_infergate(["-n", "team-b", "golden", "list"]) == 0
    assert reads.asked == ["team-b"]
    assert "no golden records recorded by Passed ParityChecks in namespace team-b" in (
        capsys.readouterr().out
    )


def test_a_cluster_that_cannot_be_asked_exits_2(
    reads: Reads, capsys: pytest.CaptureFixture[str]
) -> None:
    from infergate.errors import KubeError

    reads.refusal = KubeError("GET paritychecks in llm: 403 forbidden")
    assert main(["golden", "list"]) == 2
    assert "cannot list the ParityChecks" in capsys.readouterr().err
