"""`infergate operator --runner-namespace`: where runner Jobs run (the operator's namespace by
default), watched beside the served namespaces, and never one of them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

import pytest

from infergate.commands import operator
from infergate.controllers._context import OPTIONS
from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    operator.register(parser.add_subparsers())
    return parser.parse_args(["operator", *argv])


@pytest.fixture(autouse=True)
def _restore_options() -> Iterator[None]:
    saved = dataclasses.replace(OPTIONS)
    yield
    for field in dataclasses.fields(OPTIONS):
        setattr(OPTIONS, field.name, getattr(saved, field.name))


@pytest.mark.parametrize(
    ("argv", "pod_namespace", "expected"),
    [
        ((), None, DEFAULT_RUNNER_NAMESPACE),
        ((), "infergate-it-1", "infergate-it-1"),
        (("--runner-namespace=parity-runners",), "infergate-system", "parity-runners"),
    ],
)
def test_runners_run_in_the_operators_namespace_unless_told(
    monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], pod_namespace: str | None, expected: str
) -> None:
    if pod_namespace is None:
        monkeypatch.delenv("POD_NAMESPACE", raising=False)
    else:
        monkeypatch.setenv("POD_NAMESPACE", pod_namespace)
    assert operator._set_options(_args(*argv)) is None
    assert OPTIONS.runner_namespace == expected


def test_a_served_namespace_cannot_be_the_runner_namespace() -> None:
    """Its users could mint the runner's tokens there: the very hole the runner namespace
    closes."""
    refused = operator._set_options(_args("--namespace=llm", "--runner-namespace=llm"))
    assert refused is not None
    assert "--runner-namespace: llm is also watched" in refused


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ([], []),  # every namespace: the runner namespace with them
        (["llm"], ["llm", "infergate-system"]),
        (["team-*"], ["team-*", "infergate-system"]),
        (["infergate-system"], ["infergate-system"]),
    ],
)
def test_the_runner_namespace_is_watched_beside_the_served_ones(
    patterns: list[str], expected: list[str]
) -> None:
    assert operator.watched_namespaces(patterns, "infergate-system") == expected
