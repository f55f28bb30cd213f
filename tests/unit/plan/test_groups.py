"""When a group of a multi-node revision is whole: ready, of one revision, every pod there."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infergate.plan.deployment.groups import (
    GroupPod,
    group_verdicts,
    observe_group_pod,
    whole_groups,
)

_REV, _HASH = "abcdef0123", "abcdef0123" + "0" * 54


def _pod(group: str, worker: str, **change: object) -> GroupPod:
    pod = GroupPod(
        name=f"llama-{_REV}-{group}" + ("" if worker == "0" else f"-{worker}"),
        group=group,
        worker=worker,
        revision=_REV,
        revision_hash=f"sha256:{_HASH}",
        ready=True,
    )
    return replace(pod, **change)  # type: ignore[arg-type]


def _group(group: str = "0", size: int = 2) -> list[GroupPod]:
    return [_pod(group, str(worker)) for worker in range(size)]


# (case, pods, whole, what the reason names)
_CASES: list[tuple[str, list[GroupPod], bool, str]] = [
    ("whole", _group(), True, "all 2 pods ready"),
    ("worker-missing", _group()[:1], False, "1 of 2 pods"),
    ("leader-missing", _group()[1:], False, "1 of 2 pods"),
    ("worker-not-ready", [_pod("0", "0"), _pod("0", "1", ready=False)], False, "not ready"),
    ("worker-restarting", [_pod("0", "0"), _pod("0", "1", terminating=True)], False, "terminating"),
    ("worker-of-another-revision", [_pod("0", "0"), _pod("0", "1", revision="0123456789")],
     False, "not of revision"),
    ("worker-of-another-hash", [_pod("0", "0"), _pod("0", "1", revision_hash="sha256:beef")],
     False, "not of revision"),
    ("worker-unlabelled", [_pod("0", "0"), _pod("0", "1", revision=None)], False, "not of revision"),
    ("two-leaders", [_pod("0", "0"), _pod("0", "0")], False, "not whole"),
    ("an-extra-worker", [*_group(), _pod("0", "2")], False, "3 of 2 pods"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pods", "whole", "says"), _CASES, ids=[c[0] for c in _CASES])
def test_a_group_is_whole_only_with_every_pod_ready_and_of_its_revision(
    case: str, pods: list[GroupPod], whole: bool, says: str
) -> None:
    (verdict,) = group_verdicts(pods, size=2, revision=_REV, revision_hash=_HASH)
    assert verdict.whole is whole, verdict.reason
    assert says in verdict.reason


def test_ready_groups_count_whole_groups_only() -> None:
    pods = [*_group("0"), _pod("1", "0"), *_group("2")]
    assert whole_groups(pods, size=2, revision=_REV, revision_hash=_HASH) == 2
    verdicts = group_verdicts(pods, size=2, revision=_REV, revision_hash=_HASH)
    assert [(v.group, v.whole) for v in verdicts] == [("0", True), ("1", False), ("2", True)]


def test_a_pod_of_no_group_makes_no_group_whole() -> None:
    stray = replace(_pod("0", "0"), group=None)
    assert group_verdicts([stray], size=1, revision=_REV, revision_hash=_HASH) == []
    assert whole_groups([stray], size=1, revision=_REV, revision_hash=_HASH) == 0


def test_a_pod_body_reads_as_the_lws_controller_and_the_renderer_label_it() -> None:
    body = {
        "metadata": {
            "name": f"llama-{_REV}-0-1",
            "labels": {
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": "1",
                "infergate.io/revision": _REV,
            },
            "annotations": {"infergate.io/revision-hash": f"sha256:{_HASH}"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert observe_group_pod(body) == _pod("0", "1")
    leaving = {
        **body,
        "metadata": {**body["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
    }
    assert observe_group_pod(leaving).terminating
    assert not observe_group_pod({**body, "status": {}}).ready
