"""When a reconcile decides from the watch's copy of its deployment, and when it reads it."""

from __future__ import annotations

import pytest

from infergate.plan.freshness import watched_copy_is_current


@pytest.mark.parametrize(
    ("watched", "written", "current"),
    [
        # Nothing written by this process: the watch's copy is as good as a read (a stale
        # one fails the resourceVersion-guarded status write and is read again).
        ("41", None, True),
        # The watch has echoed the last write, or gone past it.
        ("41", "41", True),
        ("52", "41", True),
        # The last write is not echoed yet: decide from a fresh read.
        ("40", "41", False),
        # Compared as numbers, not as strings.
        ("9", "10", False),
        ("10", "9", True),
        # Not integers: only the very version written counts as current.
        ("abc", "abc", True),
        ("abd", "abc", False),
        ("41", "x41", False),
        # No copy at all.
        (None, None, False),
        (None, "41", False),
    ],
)
def test_the_watched_copy_is_used_only_when_not_older_than_the_last_write(
    watched: str | None, written: str | None, current: bool
) -> None:
    assert watched_copy_is_current(watched, written) is current
