"""Every watch of a Kubernetes kind asks the API server only for infergate's objects, and
every handler on it wants no object the selector leaves out."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf._cogs.structs.references import Resource

from infergate.api.base import GROUP
from infergate.controllers import load_handlers
from infergate.controllers._watched import (
    WATCH_LABELS,
    WATCHED,
    label_selector,
    label_selectors,
)
from infergate.controllers.startup import configure

load_handlers()


def _handlers() -> list[Any]:
    registry: Any = kopf.get_default_registry()
    return [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]


def _kind(handler: Any) -> tuple[str, str, str]:
    selector = handler.selector
    return (selector.group, selector.version, selector.any_name or selector.plural)


def _builtin_handlers() -> list[Any]:
    return [h for h in _handlers() if h.selector.group != GROUP]


def test_every_watched_kind_is_in_the_table() -> None:
    watched = {_kind(h) for h in _builtin_handlers()}
    assert len(watched) >= 10
    assert watched == set(WATCHED), "a kind watched without a selector, or a stale entry"


@pytest.mark.parametrize("handler", _builtin_handlers(), ids=lambda h: h.id)
def test_each_handlers_labels_imply_the_server_selector(handler: Any) -> None:
    labels = dict(handler.labels or {})
    for key, value in WATCH_LABELS.items():
        assert labels.get(key) == value, f"{handler.id} would see objects the server leaves out"


def test_our_own_kinds_are_watched_whole() -> None:
    """InferenceDeployments and ParityChecks are the users' objects: no selector."""
    ours = {_kind(h) for h in _handlers() if h.selector.group == GROUP}
    assert ours
    assert not set(label_selectors()) & ours


def _settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    start_up: Any = configure  # kopf types it as a handler; it is the plain function
    start_up(settings=settings)
    return settings


@pytest.mark.parametrize(("group", "version", "plural"), WATCHED)
def test_start_up_sets_the_selector_of_each_watched_kind(
    group: str, version: str, plural: str
) -> None:
    resource = Resource(group, version, plural, preferred=True)
    assert list(_settings().watching.label_selectors.collect(resource)) == [
        "app.kubernetes.io/managed-by=infergate"
    ]


@pytest.mark.parametrize(
    ("group", "version", "plural"),
    [
        (GROUP, "v1alpha1", "inferencedeployments"),
        (GROUP, "v1alpha1", "paritychecks"),
        ("", "v1", "secrets"),
        ("coordination.k8s.io", "v1", "leases"),
        ("", "v1", "events"),
        ("metrics.k8s.io", "v1beta1", "pods"),
    ],
)
def test_no_selector_on_kinds_outside_the_table(group: str, version: str, plural: str) -> None:
    resource = Resource(group, version, plural, preferred=True)
    assert list(_settings().watching.label_selectors.collect(resource)) == []


def test_label_selector_form() -> None:
    assert label_selector({"b": "2", "a": "1"}) == "a=1,b=2"
    assert label_selector({}) == ""
