"""`infergate abort|status NAME` against a stand-in for the API: which annotation an abort
writes for a canary or a promotion still scaling up, what it refuses, and the promotion's
step as status shows it."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from infergate.commands import control
from infergate.plan.deployment.control import ABORT


class _Deployment:
    """One InferenceDeployment as `control._Target` reads and annotates it."""

    def __init__(self, args: argparse.Namespace, status: dict[str, Any]) -> None:
        del args
        self.body: dict[str, Any] = {"metadata": {"annotations": {}}, "status": status}
        self.annotated: list[tuple[str, str]] = []

    def read(self) -> dict[str, Any]:
        return self.body

    def annotate(self, key: str, value: str) -> None:
        self.annotated.append((key, value))

    def __str__(self) -> str:
        return "InferenceDeployment llm/qwen"


def _abort(monkeypatch: pytest.MonkeyPatch, status: dict[str, Any]) -> tuple[int, _Deployment]:
    made: list[_Deployment] = []

    def target(args: argparse.Namespace) -> _Deployment:
        made.append(_Deployment(args, status))
        return made[-1]

    monkeypatch.setattr(control, "_Target", target)
    args = argparse.Namespace(name="qwen", namespace="llm", wait=False, timeout=1.0)
    code = control.run_abort(args)
    return code, made[0]


@pytest.mark.parametrize(
    ("status", "code", "annotated"),
    [
        ({"canaryRevision": "0011223344"}, 0, [(ABORT, "0011223344")]),
        (
            {"stableRevision": "0011223344",
             "promotion": {"revision": "0011223344", "previous": "ab12cd34ef",
                           "step": "ScalingUp"}},
            0,
            [(ABORT, "0011223344")],
        ),
        (
            {"stableRevision": "0011223344",
             "promotion": {"revision": "0011223344", "previous": "ab12cd34ef",
                           "step": "Switching"}},
            1,
            [],
        ),
        ({"stableRevision": "ab12cd34ef"}, 1, []),
    ],
    ids=["canary", "promotion scaling up", "promotion switching", "nothing to abort"],
)  # fmt: skip
def test_abort_names_the_canary_or_a_promotion_before_traffic_moved(
    monkeypatch: pytest.MonkeyPatch,
    status: dict[str, Any],
    code: int,
    annotated: list[tuple[str, str]],
) -> None:
    got, deployment = _abort(monkeypatch, status)
    assert (got, deployment.annotated) == (code, annotated)


def test_status_shows_the_promotion_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status = {
        "stableRevision": "0011223344",
        "promotion": {
            "revision": "0011223344",
            "previous": "ab12cd34ef",
            "step": "ScaleDownDelay",
            "scaleDownAt": "2026-01-05T09:00:30Z",
        },
    }
    monkeypatch.setattr(control, "_Target", lambda args: _Deployment(args, status))
    args = argparse.Namespace(name="qwen", namespace="llm", output="text")
    assert control.run_status(args) == 0
    shown = capsys.readouterr().out
    assert (
        "promotion: ScaleDownDelay: ab12cd34ef -> 0011223344, old one scaled down at "
        "2026-01-05T09:00:30Z" in shown
    )
