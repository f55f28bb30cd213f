"""`infergate operator --runner-namespace`: where runner Jobs run (the operator's namespace by
default), watched beside the served namespaces, and never one of them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator

import pytest
import yaml

from infergate.commands import operator
from infergate.controllers._context import OPTIONS
from infergate.render.check_names import DEFAULT_RUNNER_NAMESPACE
from tests.harness import REPO


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


def _watched_kinds() -> set[tuple[str, str]]:
    """(API group, resource) of every kind the operator's kopf handlers watch or index."""
    import kopf

    import infergate.controllers.children
    import infergate.controllers.inference_deployment
    import infergate.controllers.paritycheck  # noqa: F401 - registers the handlers

    registry = kopf.get_default_registry()
    return {
        (handler.selector.group or "", handler.selector.any_name or "")
        # kopf has no public view of its registry's handlers.
        for handlers in (registry._indexing, registry._watching)
        for handler in handlers.get_all_handlers()
    }


def test_the_runner_namespace_role_lets_kopf_watch_every_kind_it_watches() -> None:
    """kopf watches every kind in every namespace it is given, the runner namespace too: a
    refused list or watch there stops the namespace-scoped operator."""
    role = yaml.safe_load_all(
        (REPO / "manifests/overlays/namespaced/runner-namespace/role.yaml").read_text()
    )
    [rules] = [d["rules"] for d in role if d and d["kind"] == "Role"]
    allowed = {
        (group, resource)
        for rule in rules
        if {"list", "watch"} <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    watched = _watched_kinds()
    assert ("policy", "poddisruptionbudgets") in watched
    assert watched - allowed == set()
