"""Reading the manual-control annotations: what aborts, what promotes, what gets removed."""

from __future__ import annotations

import pytest

from infergate.plan.deployment.control import (
    ABORT,
    PROMOTE,
    REQUESTED_BY,
    ROLLBACK_TO,
    manual_requests,
)


@pytest.mark.parametrize(
    ("value", "aborts"),
    [
        ("true", True),
        ("True", True),
        (" yes ", True),
        ("", True),  # kubectl annotate idep qwen infergate.io/abort=
        ("0123456789", True),  # infergate abort: the canary it saw, by hash
        ("abcdefabcd", False),  # another revision than the canary
        ("false", False),
        ("False", False),
        ("no", False),
        ("0", False),
        ("maybe", False),
    ],
)
def test_abort_fires_only_for_a_yes_or_the_canary(value: str, aborts: bool) -> None:
    requests = manual_requests({ABORT: value})
    assert requests.aborts("0123456789") is aborts
    # Handled either way: an inert "false" is removed too, so it never turns into an abort.
    assert requests.present == (ABORT,)


def test_no_annotation_asks_for_nothing() -> None:
    requests = manual_requests({"kopf.zalando.org/last-handled-configuration": "{}"})
    assert (requests.promote, requests.abort, requests.rollback_to) == (None, None, None)
    assert requests.present == ()


def test_the_requester_stamp_is_read_and_removed_with_the_request() -> None:
    requests = manual_requests({PROMOTE: "true", REQUESTED_BY: "alice@example.com"})
    assert requests.requested_by == "alice@example.com"
    assert requests.promotes("0123456789")
    assert requests.present == (PROMOTE, REQUESTED_BY)


def test_every_control_annotation_is_removed_once_handled() -> None:
    requests = manual_requests(
        {PROMOTE: "abc", ABORT: "false", ROLLBACK_TO: " AB12CD34EF ", REQUESTED_BY: "bob"}
    )
    assert requests.rollback_to == "ab12cd34ef"
    assert not requests.promotes("0123456789")
    assert set(requests.present) == {PROMOTE, ABORT, ROLLBACK_TO, REQUESTED_BY}
