"""The prompt-suite format and the built-in suites (pure; runs in the dev venv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergate.api.prompts import PromptSuite
from infergate.suite import (
    LONG_TAG,
    PromptSpec,
    SuiteError,
    inline,
    load_suite,
    long_prompt,
    medium_prompts,
    parse_suite,
)


def _parse(*lines: str) -> object:
    return parse_suite(lines, name="t", source="t.jsonl")


def test_text_and_token_id_prompts_load_with_tags() -> None:
    suite = parse_suite(
        [
            '{"id": "a", "text": "今天早上", "tags": ["zh"]}',
            "",
            "# a comment",
            '{"id": "b", "tokenIds": [5, 6, 7]}',
        ],
        name="t",
        source="t.jsonl",
    )
    assert [p.id for p in suite.prompts] == ["a", "b"]
    assert suite.prompts[0].text == "今天早上"
    assert suite.prompts[0].tags == ("zh",)
    assert suite.prompts[1].token_ids == (5, 6, 7)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"id": "a"}',
            "t.jsonl:1: prompt: exactly one of text, tokenIds and messages is required, got none",
        ),
        ('{"id": "a", "text": "x", "tokenIds": [1]}', "got text and tokenIds"),
        ('{"id": "a", "tokenIds": [1, -2]}', "tokenIds: ids must be >= 0, got -2"),
        ('{"id": "a", "text": "x", "colour": 1}', "t.jsonl:1: colour: Extra inputs"),
        ('{"id": "", "text": "x"}', "t.jsonl:1: id:"),
        ('{"id": "a", "text": "x"', "t.jsonl:1: not valid JSON"),
    ],
)
def test_errors_name_line_and_field(line: str, expected: str) -> None:
    with pytest.raises(SuiteError) as err:
        _parse(line)
    assert expected in str(err.value)


def test_duplicate_ids_are_refused_with_both_lines() -> None:
    with pytest.raises(SuiteError, match=r"t.jsonl:3: id: 'a' already used on line 1"):
        _parse('{"id": "a", "text": "x"}', '{"id": "b", "text": "y"}', '{"id": "a", "text": "z"}')


def test_suite_from_file_and_unknown_name(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": "x", "text": "hello"}\n', encoding="utf-8")
    assert load_suite(str(path)).name == "mine"
    with pytest.raises(
        SuiteError, match="neither a file nor a built-in suite; built-in: default, smoke, chat"
    ):
        load_suite("no-such-suite")


def test_default_suite_has_short_chinese_english_and_long_prompts() -> None:
    suite = load_suite("default")
    short = suite.select(long=False).prompts
    long = suite.select(long=True).prompts
    assert {"zh", "en"} <= {tag for p in short for tag in p.tags}
    assert len(short) >= 12
    assert {p.id for p in long} == {"long-zh-0", "long-zh-1", "long-en-0", "long-en-1"}
    assert all(LONG_TAG in p.tags and p.text and len(p.text) > 9000 for p in long)


def test_long_prompts_are_deterministic_and_distinct() -> None:
    assert long_prompt("zh", 0) == long_prompt("zh", 0)
    assert long_prompt("zh", 0).text != long_prompt("zh", 1).text
    with pytest.raises(SuiteError, match="allowed: zh, en"):
        long_prompt("fr", 0)


def test_chat_prompts_eos_and_max_tokens_load() -> None:
    suite = _parse(
        '{"id": "c", "messages": [{"role": "user", "content": "hi"}], "ignoreEos": false}',
        '{"id": "t", "text": "hello", "maxTokens": 4}',
    )
    chat, text = suite.prompts  # type: ignore[attr-defined]
    assert chat.is_chat
    assert chat.ignore_eos is False
    assert text.ignore_eos is True
    assert text.output_tokens(64) == 4
    assert text.output_tokens(2) == 2


def test_a_prompt_needs_exactly_one_of_text_token_ids_and_messages() -> None:
    with pytest.raises(SuiteError, match="exactly one of text, tokenIds and messages"):
        _parse('{"id": "x", "text": "a", "messages": [{"role": "user", "content": "b"}]}')
    with pytest.raises(SuiteError, match="messages"):
        _parse('{"id": "x", "messages": [{"role": "robot", "content": "b"}]}')


def test_the_suite_digest_is_its_content_not_its_name() -> None:
    lines = ['{"id": "a", "text": "one"}', '{"id": "b", "text": "two"}']
    first = parse_suite(lines, name="mine", source="x")
    renamed = parse_suite(lines, name="yours", source="y")
    assert first.digest() == renamed.digest()
    edited = parse_suite([lines[0], '{"id": "b", "text": "two!"}'], name="mine", source="x")
    assert edited.digest() != first.digest()
    eos = parse_suite([lines[0], '{"id": "b", "text": "two", "ignoreEos": false}'], name="m",
                      source="x")  # fmt: skip
    assert eos.digest() != first.digest()


def test_the_default_suite_meets_the_bf16_minimum_evidence() -> None:
    from infergate.parity.profiles import PROFILES
    from infergate.parity.thresholds import ProfileName

    block = PROFILES[ProfileName.BF16_KERNEL].block
    suite = load_suite("default")
    long = suite.select(long=True).prompts
    assert block.min_prompts is not None
    assert block.min_long_prompts is not None
    assert len(suite.prompts) >= block.min_prompts
    assert len(long) >= block.min_long_prompts
    # Long-context evidence is their scored text; few output tokens keep CPU runs short.
    assert all(p.max_tokens == 8 for p in long)
    assert sum(1 for p in suite.prompts if not p.ignore_eos) >= 4
    assert load_suite("default").digest() == suite.digest()  # generated deterministically


def test_the_chat_suite_holds_chats() -> None:
    suite = load_suite("chat")
    assert suite.prompts
    assert all(p.is_chat for p in suite.prompts)


def test_medium_prompts_fill_the_evidence_minimum_within_a_short_context() -> None:
    """36 prompts of ~100 tokens: >= 32 prompts, and with 16 output tokens >= 4096 scored
    positions, inside the 512-token context the demo and end-to-end engines run with."""
    prompts = medium_prompts()
    assert prompts == medium_prompts()  # deterministic: the same suite digest every run
    assert len(prompts) == 36
    assert len({p.id for p in prompts}) == 36
    texts = [p.text for p in prompts if p.text is not None]
    ids = [p.token_ids for p in prompts if p.token_ids is not None]
    assert len(texts) == 32
    assert len(ids) == 4
    # Chinese is ~1.1 characters per fixture token, English ~4.5 (see long_prompt).
    tokens = [
        len(t) / (1.1 if "zh" in p.tags else 4.5) for p, t in zip(prompts[:32], texts, strict=True)
    ]
    tokens += [len(i) for i in ids]
    assert min(tokens) >= 100
    assert max(tokens) <= 512 - 16 - 100
    assert sum(t + 16 for t in tokens) >= 4096
    # As a ParityCheck's suite.inline: the API accepts it and it reads back the same.
    check_suite = PromptSuite.model_validate({"inline": inline(prompts)})
    assert [
        PromptSpec.model_validate(i.model_dump(by_alias=True, exclude_none=True))
        for i in check_suite.inline or []
    ] == prompts


def test_the_default_suite_holds_chats_as_a_stratum_of_their_own() -> None:
    suite = load_suite("default")
    chats = suite.select(chat=True).prompts
    assert chats == load_suite("chat").prompts
    assert all(p.messages and not p.is_long for p in chats)
    assert {"en", "zh"} <= {tag for p in chats for tag in p.tags}
    # The text prompts and the chats: each kind is there, and nothing else.
    text = suite.select(long=False, chat=False).prompts
    assert len(text) + len(chats) + len(suite.select(long=True).prompts) == len(suite.prompts)
    assert all(p.text for p in text)
