"""Prompt suite items: inline in a ParityCheck, or one JSON object per line in a ConfigMap."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from infergate.api.base import KubeModel, cel, cel_rules
from infergate.api.common import ConfigMapKeyReference

PROMPT_ID_MAX = 128
PROMPT_TEXT_MAX = 262144  # about 64K tokens of English text
PROMPT_TOKENS_MAX = 131072
PROMPT_TAGS_MAX = 16
INLINE_PROMPTS_MAX = 256

_ONE_OF_TEXT_TOKENS = "exactly one of text, messages or tokenIds must be set"

PromptTag = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[-._a-zA-Z0-9]+$")
]


PROMPT_MESSAGES_MAX = 64


class ChatRole(StrEnum):
    """Who speaks: system, user or assistant."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class ChatMessage(KubeModel):
    """One message of a chat prompt."""

    role: ChatRole
    """system, user or assistant."""
    content: str = Field(min_length=1, max_length=PROMPT_TEXT_MAX)
    """The message text."""


class PromptItem(KubeModel):
    """One prompt of a suite: its text, a chat, or token ids fed as they are (bypassing the
    tokenizer)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "[has(self.text), has(self.tokenIds), has(self.messages)].filter(x, x).size() == 1",
                f"{_ONE_OF_TEXT_TOKENS}: text is tokenized by each side, a chat goes through "
                "each side's served chat template, tokenIds bypass the tokenizer",
            )
        )
    )

    id: str = Field(min_length=1, max_length=PROMPT_ID_MAX, pattern=r"^[-._:/a-zA-Z0-9]+$")
    """Unique id of the prompt in its suite; verdicts name failing prompts by it."""
    text: str | None = Field(default=None, min_length=1, max_length=PROMPT_TEXT_MAX)
    """Prompt text, tokenized by each side's own tokenizer (so tokenizer drift is caught). Exclusive
    with tokenIds.
    """
    token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, min_length=1, max_length=PROMPT_TOKENS_MAX
    )
    """Prompt as token ids, identical on both sides. Exclusive with text."""
    messages: list[ChatMessage] | None = Field(
        default=None, min_length=1, max_length=PROMPT_MESSAGES_MAX
    )
    """A chat, sent to /v1/chat/completions and rendered by each side's served chat template (so
    template drift is caught). Exclusive with text and tokenIds.
    """
    tags: list[PromptTag] = Field(default_factory=list, max_length=PROMPT_TAGS_MAX)
    """Free labels for grouping results, e.g. long-context, chat, zh."""
    ignore_eos: bool = True
    """true: generate maxTokens whatever the model says; false: stop at the engine's end of
    sequence, so a changed EOS token or generation config shows."""
    max_tokens: int | None = Field(default=None, ge=1, le=32768)
    """Output tokens of this prompt (at most the check's sampling.maxTokens). Unset: the check's."""

    @model_validator(mode="after")
    def _one_of_text_tokens(self) -> Self:
        given = [x is not None for x in (self.text, self.token_ids, self.messages)]
        if sum(given) != 1:
            raise ValueError(f"prompt {self.id!r}: {_ONE_OF_TEXT_TOKENS}")
        return self


_ONE_SOURCE = cel(
    "has(self.configMapRef) != has(self.inline)",
    "exactly one of configMapRef or inline must be set",
)
SUITE_DIGEST_PATTERN = r"^[0-9a-f]{64}$"
_DIGEST_NEEDS_CONFIG_MAP = (
    "digest is allowed only with configMapRef: an inline suite's prompts are in the spec already"
)


class PromptSuite(KubeModel):
    """The prompts of a check: inline, or a JSONL key of a ConfigMap (one prompt per line)."""

    model_config = ConfigDict(json_schema_extra=cel_rules(_ONE_SOURCE))

    config_map_ref: ConfigMapKeyReference | None = None
    """ConfigMap key holding the suite as JSON lines, each {"id", "text" | "tokenIds", "tags"}.
    Exclusive with inline.
    """
    inline: list[PromptItem] | None = Field(
        default=None,
        min_length=1,
        max_length=INLINE_PROMPTS_MAX,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )
    """Prompts written in the resource (ids unique). Exclusive with configMapRef."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.config_map_ref is None) == (self.inline is None):
            raise ValueError("suite: exactly one of configMapRef or inline must be set")
        if self.inline is not None:
            seen: set[str] = set()
            for item in self.inline:
                if item.id in seen:
                    raise ValueError(
                        f"suite.inline: prompt id {item.id!r} appears twice; ids must be unique"
                    )
                seen.add(item.id)
        return self


class CheckSuite(PromptSuite):
    """The prompts of a ParityCheck: inline, or a JSONL key of a ConfigMap, whose content may
    be pinned by its digest."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            _ONE_SOURCE,
            cel(
                "!has(self.digest) || has(self.configMapRef)",
                _DIGEST_NEEDS_CONFIG_MAP,
                field_path=".digest",
            ),
        )
    )

    digest: str | None = Field(default=None, max_length=64, pattern=SUITE_DIGEST_PATTERN)
    """sha256 (64 hex digits) of the suite in configMapRef, as the runner parses it (the
    prompts' content in order; comments and blank lines do not count). Set: the runner ends the
    check in Error (SuiteChanged) when the ConfigMap holds other prompts, so the check judges
    exactly the suite it was made for; the operator sets it on every check it creates. Unset:
    the runner records the digest it judged in status.verdict.suiteDigest."""

    @model_validator(mode="after")
    def _digest_of_a_config_map(self) -> Self:
        if self.digest is not None and self.config_map_ref is None:
            raise ValueError(f"suite.digest: {_DIGEST_NEEDS_CONFIG_MAP}")
        return self
