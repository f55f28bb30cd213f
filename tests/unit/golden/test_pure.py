"""Pure parts of the golden store: suite digests, names, the size policy, summaries,
retention. Tables of plain data with known answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infergate.golden.entry import GoldenEntry
from infergate.golden.errors import GoldenBudgetError, GoldenConfigError
from infergate.golden.keys import (
    EntryLocation,
    EntryName,
    Role,
    parse_index_key,
    parse_record_key,
    suite_digest,
)
from infergate.golden.policy import (
    HiddenStatesPolicy,
    StoragePolicy,
    choose_hidden_form,
    own_sequence_rows,
    propose_policy,
)
from infergate.golden.retention import (
    NO_REVISION_YET,
    DeploymentHistory,
    IndexItem,
    WhenDeleted,
    deployment_history,
    listed_histories,
    plan_orphans,
    plan_retention,
    scope_retention,
)
from infergate.golden.summary import projection, summarize, summary_errors
from infergate.suite import PromptSpec
from tests.unit.golden.records import meta

T0 = datetime(2026, 11, 9, 3, 0, tzinfo=UTC)
SAMPLING = {"maxTokens": 64, "topLogprobs": 5, "seed": 42}


# -- suite digest and names ---------------------------------------------------------------


def test_suite_digest_changes_with_every_question_and_not_with_the_name() -> None:
    prompts = (PromptSpec(id="a", text="hi", tags=("en",)), PromptSpec(id="b", token_ids=(1, 2)))
    digest = suite_digest(prompts, SAMPLING)
    assert digest == suite_digest(tuple(prompts), dict(reversed(SAMPLING.items())))
    assert len(digest) == 64
    variants = [
        (PromptSpec(id="a", text="hi!", tags=("en",)), prompts[1]),
        (PromptSpec(id="a2", text="hi", tags=("en",)), prompts[1]),
        (PromptSpec(id="a", text="hi"), prompts[1]),
        (prompts[1], prompts[0]),
        (prompts[0], PromptSpec(id="b", token_ids=(1, 3))),
    ]
    for changed in variants:
        assert suite_digest(changed, SAMPLING) != digest
    assert suite_digest(prompts, {**SAMPLING, "maxTokens": 65}) != digest


def test_entry_names_round_trip_and_sort_by_time() -> None:
    name = EntryName.new("3f2a9c1d0e", Role.CANDIDATE, T0 + timedelta(microseconds=7))
    text = str(name)
    assert text.startswith("3f2a9c1d0e-20261109T030000000007Z-candidate-")
    assert EntryName.parse(text) == name
    later = EntryName.new("3f2a9c1d0e", Role.BASELINE, T0 + timedelta(seconds=1))
    assert name.created < later.created
    assert EntryName.new("3f2a9c1d0e", Role.BASELINE, T0) != EntryName.new(
        "3f2a9c1d0e", Role.BASELINE, T0
    )  # two writers at the same instant get different tokens


@pytest.mark.parametrize(
    "key",
    [
        "index/llm/qwen/notaname.json",
        "index/llm/qwen/3f2a9c1d0e-20261109T030000000007Z-baseline-abcdef01.txt",
        "index/LLM/qwen/3f2a9c1d0e-20261109T030000000007Z-baseline-abcdef01.json",
        "index/llm/3f2a9c1d0e-20261109T030000000007Z-baseline-abcdef01.json",
        "records/llm/qwen/3f2a9c1d0e-20261109T030000000007Z-baseline-abcdef01.json",
    ],
)
def test_keys_that_are_not_index_entries_are_ignored(key: str) -> None:
    assert parse_index_key(key) is None


def test_index_and_record_keys_name_the_same_entry() -> None:
    name = EntryName.new("3f2a9c1d0e", Role.BASELINE, T0)
    where = EntryLocation("llm", "qwen", name)
    assert parse_index_key(where.index_key) == where
    assert parse_record_key(f"{where.record_prefix}prompts/000000.safetensors") == where


@pytest.mark.parametrize("revision", ["3F2A9C1D0E", "3f2a9c1d0", "../../../x", ""])
def test_a_bad_revision_is_refused_with_the_field_named(revision: str) -> None:
    with pytest.raises(GoldenConfigError, match="revision"):
        EntryName.new(revision, Role.BASELINE, T0)


# -- size policy --------------------------------------------------------------------------

POLICY = StoragePolicy(HiddenStatesPolicy.FULL, max_bytes=1 << 20, sketch_dims=15)


@pytest.mark.parametrize(
    ("policy_form", "remaining", "expected"),
    [
        # 100 positions x 64 floats: full 25600 bytes, summary 100 x 16 x 4 + 4096 = 10496.
        (HiddenStatesPolicy.FULL, 1000 + 25600, HiddenStatesPolicy.FULL),
        (HiddenStatesPolicy.FULL, 1000 + 25599, HiddenStatesPolicy.SUMMARY),
        (HiddenStatesPolicy.FULL, 1000 + 10496, HiddenStatesPolicy.SUMMARY),
        (HiddenStatesPolicy.FULL, 1000 + 10495, HiddenStatesPolicy.NONE),
        (HiddenStatesPolicy.SUMMARY, 10**9, HiddenStatesPolicy.SUMMARY),
        (HiddenStatesPolicy.NONE, 10**9, HiddenStatesPolicy.NONE),
        (HiddenStatesPolicy.FULL, 1000, HiddenStatesPolicy.NONE),
    ],
)
def test_a_prompt_gets_the_largest_form_that_still_fits(
    policy_form: HiddenStatesPolicy, remaining: int, expected: HiddenStatesPolicy
) -> None:
    policy = StoragePolicy(policy_form, max_bytes=1 << 20, sketch_dims=15)
    assert choose_hidden_form(policy, remaining, 1000, 100, 64) is expected


def test_no_form_fits_when_the_tokens_alone_do_not() -> None:
    with pytest.raises(GoldenBudgetError, match="maxBytes 1048576"):
        choose_hidden_form(POLICY, 999, 1000, 100, 64)


@pytest.mark.parametrize(
    ("field", "policy"),
    [
        ("maxBytes", lambda: StoragePolicy(max_bytes=1000)),
        ("sketchDimensions", lambda: StoragePolicy(sketch_dims=4)),
    ],
)
def test_a_policy_out_of_range_is_refused(field: str, policy: object) -> None:
    with pytest.raises(GoldenConfigError, match=field):
        policy()  # type: ignore[operator]


# Qwen2.5-7B at 8K: 8192 + 512 positions of hidden 3584 and ~120 KB of tokens and top-5
# logprobs per prompt (experiments/GOLDEN.md).
LONG_7B = (120_000, 8704)
SHORT_7B = (55_000, 576)


@pytest.mark.parametrize(
    ("suite", "budget", "form", "dims"),
    [
        ([SHORT_7B] * 4, 100 * 2**20, HiddenStatesPolicy.FULL, 64),
        ([SHORT_7B] * 16 + [LONG_7B] * 4, 100 * 2**20, HiddenStatesPolicy.SUMMARY, 512),
        ([LONG_7B] * 100, 100 * 2**20, HiddenStatesPolicy.SUMMARY, 16),
        ([LONG_7B] * 100, 20 * 2**20, HiddenStatesPolicy.NONE, 64),
    ],
)
def test_the_proposed_policy_is_the_richest_that_fits(
    suite: list[tuple[int, int]], budget: int, form: HiddenStatesPolicy, dims: int
) -> None:
    policy = propose_policy(suite, 3584, budget)
    assert policy.hidden_states is form
    assert policy.sketch_dims == dims


def test_no_policy_fits_when_the_tokens_alone_do_not() -> None:
    with pytest.raises(GoldenBudgetError, match="alone"):
        propose_policy([LONG_7B] * 1000, 3584, 100 * 2**20)


@pytest.mark.parametrize(
    ("own", "probed", "rows", "kept"),
    [
        ([1, 2, 3, 4], [1, 2, 3, 4], 4, 4),
        ([1, 2, 3, 9], [1, 2, 3, 4], 4, 3),
        ([9, 2, 3, 4], [1, 2, 3, 4], 4, 0),
        ([1, 2, 3, 4, 5], [1, 2, 3, 4], 4, 4),
        ([1, 2, 3, 4], [1, 2, 3, 4], 2, 2),
    ],
)
def test_rows_on_the_own_sequence(own: list[int], probed: list[int], rows: int, kept: int) -> None:
    assert own_sequence_rows(own, probed, rows) == kept


# -- summaries ----------------------------------------------------------------------------


def test_the_projection_is_fixed_forever() -> None:
    matrix = projection(4, 8, seed=1)
    # Known answer: SHA-256 derived signs, independent of numpy's generators.
    signs = np.rint(matrix * np.sqrt(8)).astype(int).tolist()
    assert set(np.unique(signs)) == {-1, 1}
    assert signs[0] == [int(s) for s in _expected_first_row()]
    assert not np.array_equal(projection(4, 8, seed=2), matrix)


def _expected_first_row() -> list[int]:
    import hashlib

    byte = hashlib.sha256(b"1:4:0:0").digest()[0]
    return [1 if (byte >> (7 - i)) & 1 else -1 for i in range(8)]


def test_summary_errors_estimate_relative_l2_and_give_exact_norm_ratios() -> None:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((400, 256))
    cand = base + 0.01 * rng.standard_normal((400, 256))
    cand[:, :] *= 1.02
    exact = np.linalg.norm(cand - base, axis=1) / np.linalg.norm(base, axis=1)
    errors = summary_errors(summarize(base, 64), summarize(cand, 64))
    ratio = errors.rel_l2 / exact
    # |S d| / |d| has mean ~1 and relative spread ~1/sqrt(2 x 64) = 0.088.
    assert abs(float(np.median(ratio)) - 1.0) < 0.05
    assert float(np.std(ratio)) < 0.12
    exact_ratio = np.linalg.norm(cand, axis=1) / np.linalg.norm(base, axis=1)
    np.testing.assert_allclose(errors.norm_ratio, exact_ratio, rtol=1e-5)
    same = summary_errors(summarize(base, 64), summarize(base, 64))
    assert np.all(same.rel_l2 == 0)
    assert np.allclose(same.cosine, 1.0)


def test_summaries_of_other_dimensions_cannot_be_compared() -> None:
    states = np.ones((3, 16))
    with pytest.raises(ValueError, match="dims"):
        summary_errors(summarize(states, 8), summarize(states, 16))


# -- retention ----------------------------------------------------------------------------


def _item(
    deployment: str,
    revision: str,
    minute: int,
    *,
    role: Role = Role.BASELINE,
    digest: str = "a" * 64,
    readable: bool = True,
    namespace: str = "llm",
) -> IndexItem:
    name = EntryName(revision, T0 + timedelta(minutes=minute), role, f"{minute:08x}")
    where = EntryLocation(namespace, deployment, name)
    if not readable:
        return IndexItem(where, None, "unreadable")
    entry = GoldenEntry(
        namespace=namespace,
        deployment=deployment,
        name=str(name),
        revision=revision,
        role=role,
        suite="smoke",
        suite_digest=digest,
        fingerprint="fp",
        created=name.created,
        meta=meta(revision),
        hidden_states=HiddenStatesPolicy.NONE,
        max_bytes=1 << 20,
        prompts=[],
        blobs=[],
        size_bytes=0,
    )
    return IndexItem(where, entry)


A, B, C = "aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"


def _deleted(items: list[IndexItem], **kwargs: object) -> list[tuple[str, str, int]]:
    histories = {
        ("llm", "qwen"): DeploymentHistory(True, frozenset({B, C})),
        ("llm", "gone"): DeploymentHistory(False),
    }
    plan = plan_retention(items, histories, **kwargs)  # type: ignore[arg-type]
    return [
        (d.location.deployment, d.location.name.revision, d.location.name.created.minute)
        for d in plan
    ]


def test_retention_drops_revisions_that_left_the_history() -> None:
    items = [_item("qwen", A, 1), _item("qwen", B, 2), _item("qwen", C, 3)]
    assert _deleted(items, when_deleted=WhenDeleted.RETAIN) == [("qwen", A, 1)]


def test_retention_keeps_the_newest_records_per_revision_suite_and_role() -> None:
    items = [
        _item("qwen", B, 1),
        _item("qwen", B, 2),
        _item("qwen", B, 3),
        _item("qwen", B, 4, role=Role.CANDIDATE),
        _item("qwen", B, 5, digest="b" * 64),
    ]
    assert _deleted(items, when_deleted=WhenDeleted.RETAIN) == [("qwen", B, 1), ("qwen", B, 2)]
    assert _deleted(items, when_deleted=WhenDeleted.RETAIN, records_per_revision=2) == [
        ("qwen", B, 1)
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (WhenDeleted.RETAIN, []),
        (WhenDeleted.DELETE, [("gone", A, 1), ("gone", B, 2)]),
    ],
)
def test_a_deleted_deployment_keeps_or_drops_its_records(
    policy: WhenDeleted, expected: list[tuple[str, str, int]]
) -> None:
    items = [_item("gone", A, 1), _item("gone", B, 2)]
    assert _deleted(items, when_deleted=policy) == expected


def test_records_of_unknown_deployments_and_unreadable_entries_are_kept() -> None:
    items = [
        _item("unknown", A, 1),
        _item("qwen", B, 2, readable=False),
        _item("qwen", B, 3),
    ]
    assert _deleted(items, when_deleted=WhenDeleted.DELETE) == []
    # ... unless their whole revision goes.
    assert _deleted([_item("qwen", A, 4, readable=False)], when_deleted=WhenDeleted.RETAIN) == [
        ("qwen", A, 4)
    ]


def test_a_deployments_history_is_its_stable_canary_and_listed_revisions() -> None:
    assert deployment_history(None) == DeploymentHistory(False)
    assert deployment_history({"metadata": {"name": "new"}}) == DeploymentHistory(True)
    status = {"stableRevision": A, "canaryRevision": C, "revisions": [{"hash": B}, "junk"]}
    assert deployment_history({"status": status}) == DeploymentHistory(True, frozenset({A, B, C}))


def test_a_listing_gives_each_deployment_by_namespace_and_name() -> None:
    listing = [
        {"metadata": {"namespace": "llm", "name": "qwen"}, "status": {"stableRevision": A}},
        {"metadata": {"namespace": "team-b", "name": "qwen"}},
    ]
    assert listed_histories(listing) == {
        ("llm", "qwen"): DeploymentHistory(True, frozenset({A})),
        ("team-b", "qwen"): DeploymentHistory(True),
    }
    # An object that cannot be placed fails the listing: it would make a deployment
    # look deleted.
    with pytest.raises(ValueError, match="no namespace and name"):
        listed_histories([{"metadata": {"name": "qwen"}}])


LIVE = DeploymentHistory(True, frozenset({A}))
GONE = DeploymentHistory(False)
NEW = DeploymentHistory(True)


@pytest.mark.parametrize(
    ("listed", "namespaces", "known", "histories", "left_alone"),
    [
        pytest.param(
            {("llm", "qwen"): LIVE}, {"llm"}, {},
            {("llm", "qwen"): LIVE, ("llm", "gone"): GONE},
            {("team-b", "gone"): "namespace team-b was not listed"},
            id="absent from a listing of its namespace: deleted",
        ),
        pytest.param(
            {("llm", "qwen"): LIVE}, None, {},
            {("llm", "qwen"): LIVE, ("llm", "gone"): GONE, ("team-b", "gone"): GONE},
            {},
            id="a listing of every namespace covers them all",
        ),
        pytest.param(
            None, None, {},
            {},
            {
                ("llm", "qwen"): "the InferenceDeployments could not be listed",
                ("llm", "gone"): "the InferenceDeployments could not be listed",
                ("team-b", "gone"): "the InferenceDeployments could not be listed",
            },
            id="a failed listing deletes nothing",
        ),
        pytest.param(
            None, {"llm"}, {("llm", "qwen"): LIVE},
            {("llm", "qwen"): LIVE},
            {
                ("llm", "gone"): "the InferenceDeployments could not be listed",
                ("team-b", "gone"): "the InferenceDeployments could not be listed",
            },
            id="a failed listing leaves what was read one by one",
        ),
        pytest.param(
            {("llm", "qwen"): LIVE, ("llm", "gone"): NEW}, {"llm"}, {},
            {("llm", "qwen"): LIVE},
            {("llm", "gone"): NO_REVISION_YET, ("team-b", "gone"): "namespace team-b was not listed"},
            id="re-created, no revision yet: unknown, not empty",
        ),
        pytest.param(
            {}, {"llm"}, {("llm", "qwen"): LIVE},
            {("llm", "qwen"): LIVE, ("llm", "gone"): GONE},
            {("team-b", "gone"): "namespace team-b was not listed"},
            id="what was read one by one wins over the listing",
        ),
    ],
)  # fmt: skip
def test_retention_scope(
    listed: dict[tuple[str, str], DeploymentHistory] | None,
    namespaces: set[str] | None,
    known: dict[tuple[str, str], DeploymentHistory],
    histories: dict[tuple[str, str], DeploymentHistory],
    left_alone: dict[tuple[str, str], str],
) -> None:
    items = [
        _item("qwen", A, 1),
        _item("gone", A, 2),
        _item("gone", A, 3),
        _item("gone", A, 4, namespace="team-b"),
    ]
    scope = scope_retention(items, listed, namespaces=namespaces, known=known)
    assert scope.histories == histories
    assert scope.left_alone == left_alone
    assert [i for i in items if (i.location.namespace, i.location.deployment) in histories] == (
        scope.items
    )


def test_a_deployment_left_alone_loses_not_even_superseded_records() -> None:
    """Retention acts only on the scope: two records of one revision of a deployment that
    could not be described both stay; under Delete, a listed-as-deleted one loses both."""
    items = [_item("gone", A, 1), _item("gone", A, 2)]
    refused = scope_retention(items, None, namespaces={"llm"})
    assert plan_retention(refused.items, refused.histories, when_deleted=WhenDeleted.DELETE) == []
    listed = scope_retention(items, {}, namespaces={"llm"})
    deleted = plan_retention(listed.items, listed.histories, when_deleted=WhenDeleted.DELETE)
    assert [d.location for d in deleted] == [i.location for i in items]
    assert "was deleted (retention.whenDeleted: Delete)" in deleted[0].reason
    kept = plan_retention(listed.items, listed.histories, when_deleted=WhenDeleted.RETAIN)
    assert [d.location for d in kept] == [items[0].location]  # superseded by the newer one


def test_orphans_are_records_without_an_entry_older_than_the_grace() -> None:
    old = EntryLocation("llm", "qwen", EntryName(A, T0, Role.BASELINE, "00000001"))
    young = EntryLocation("llm", "qwen", EntryName(B, T0, Role.BASELINE, "00000002"))
    listed = EntryLocation("llm", "qwen", EntryName(C, T0, Role.BASELINE, "00000003"))
    blobs = [
        (old, T0),
        (young, T0),
        (young, T0 + timedelta(hours=5, minutes=59)),
        (listed, T0),
    ]
    now = T0 + timedelta(hours=7)
    assert plan_orphans(blobs, [listed], now=now, grace=timedelta(hours=6)) == [old]
