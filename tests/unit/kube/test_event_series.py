"""Repeated Events fold into a series (events.k8s.io/v1), as client-go's recorder does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infergate.errors import NotFoundError
from infergate.kube.client import EVENTS, Resource
from infergate.kube.events import (
    SERIES_FINISH,
    SERIES_PATCH_INTERVAL,
    EventKey,
    EventPoster,
    SeriesBook,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY: EventKey = ("ns", "uid-1", "Warning", "CheckFailed", "check web-abc failed: maxMeanKl")
OTHER_NOTE: EventKey = (*KEY[:4], "check web-def failed: maxMeanKl")


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        # The first occurrence is posted; the first repeat patches count 2 at once.
        ([0], [("create", "e0", 1)]),
        ([0, 1], [("create", "e0", 1), ("patch", "e0", 2)]),
        # Repeats within the patch interval are only counted...
        ([0, 1, 2, 3], [("create", "e0", 1), ("patch", "e0", 2), ("count", "e0", 3),
                        ("count", "e0", 4)]),
        # ...and the next one after it carries them all.
        ([0, 1, 2, 1 + SERIES_PATCH_INTERVAL.total_seconds()],
         [("create", "e0", 1), ("patch", "e0", 2), ("count", "e0", 3), ("patch", "e0", 4)]),
        # Quiet for longer than the series' finish time: a new Event.
        ([0, 1, SERIES_FINISH.total_seconds() + 2],
         [("create", "e0", 1), ("patch", "e0", 2), ("create", "e2", 1)]),
    ],
)  # fmt: skip
def test_repeats_of_one_event_fold_into_its_series(
    seconds: list[float], expected: list[tuple[str, str, int]]
) -> None:
    book = SeriesBook()
    folds = [book.observe(KEY, f"e{i}", _at(s)) for i, s in enumerate(seconds)]
    assert [(f.action, f.name, f.count) for f in folds] == expected


def test_another_note_or_object_is_another_event() -> None:
    book = SeriesBook()
    book.observe(KEY, "e0", T0)
    assert book.observe(OTHER_NOTE, "e1", _at(1)).action == "create"
    other_object: EventKey = ("ns", "uid-2", *KEY[2:])
    assert book.observe(other_object, "e2", _at(2)).action == "create"


def test_counted_repeats_are_written_once_the_interval_has_passed() -> None:
    book = SeriesBook()
    for i in range(4):
        book.observe(KEY, f"e{i}", _at(i))
    assert book.due(_at(10)) == []
    later = _at(1 + SERIES_PATCH_INTERVAL.total_seconds())
    assert book.due(later) == [("ns", "e0", 4, _at(3))]
    assert book.due(later + SERIES_PATCH_INTERVAL) == [], "written once"


class _Client:
    def __init__(self, missing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        self.missing = set(missing)

    def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert resource is EVENTS
        assert namespace == body["metadata"]["namespace"]
        self.sent.append(("create", body["metadata"]["name"], body))
        return body

    def merge_patch(
        self, resource: Resource, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        assert resource is EVENTS
        if name in self.missing:
            raise NotFoundError(f"Event {namespace}/{name} not found")
        self.sent.append(("patch", name, patch))
        return patch


def _involved(uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "infergate.io/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": uid},
    }  # fmt: skip


def test_the_poster_creates_once_and_patches_the_series_count() -> None:
    client = _Client()
    poster = EventPoster(client)  # type: ignore[arg-type]
    for _ in range(3):
        poster.post(_involved(), warning=True, reason="CheckFailed", message="check failed")
    poster.close()
    actions = [(action, body.get("series", {}).get("count")) for action, _, body in client.sent]
    # Posted, the first repeat patched at once, the third written when the poster closes.
    assert actions == [("create", None), ("patch", 2), ("patch", 3)]
    created = client.sent[0][2]
    assert created["apiVersion"] == "events.k8s.io/v1"
    assert {client.sent[1][1], client.sent[2][1]} == {created["metadata"]["name"]}


def test_a_series_whose_event_is_gone_is_posted_again_with_its_count() -> None:
    client = _Client()
    poster = EventPoster(client)  # type: ignore[arg-type]
    poster.post(_involved(), warning=False, reason="Promoted", message="promoted")
    poster.close()
    first = client.sent[0][1]
    client2 = _Client(missing={first})
    poster2 = EventPoster(client2)  # type: ignore[arg-type]
    poster2._book = poster._book  # the same process's memory of the series
    poster2.post(_involved(), warning=False, reason="Promoted", message="promoted")
    poster2.close()
    action, _, body = client2.sent[0]
    assert action == "create"
    assert body["series"]["count"] == 2
