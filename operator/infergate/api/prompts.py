"""Prompt suite items: inline in a ParityCheck, or one JSON object per line in a ConfigMap."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from infergate.api.base import KubeModel, cel, cel_rules
from infergate.api.common import ConfigMapKeyReference

PROMPT_ID_MAX = 128
PROMPT_TEXT_MAX = 262144  # about 64K tokens of English text
PROMPT_TOKENS_MAX = 131072
PROMPT_TAGS_MAX = 16
INLINE_PROMPTS_MAX = 256

_ONE_OF_TEXT_TOKENS = "exactly one of text or tokenIds must be set"

PromptTag = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[-._a-zA-Z0-9]+$")
]


class PromptItem(KubeModel):
    """One prompt of a suite: its text, or token ids fed as they are (bypassing the tokenizer)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "has(self.text) != has(self.tokenIds)",
                f"{_ONE_OF_TEXT_TOKENS}: text is tokenized by each side, "
                "tokenIds bypass the tokenizer",
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
    tags: list[PromptTag] = Field(default_factory=list, max_length=PROMPT_TAGS_MAX)
    """Free labels for grouping results, e.g. long-context, chat, zh."""

    @model_validator(mode="after")
    def _one_of_text_tokens(self) -> Self:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError(f"prompt {self.id!r}: {_ONE_OF_TEXT_TOKENS}")
        return self


class PromptSuite(KubeModel):
    """The prompts of a check: inline, or a JSONL key of a ConfigMap (one prompt per line)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "has(self.configMapRef) != has(self.inline)",
                "exactly one of configMapRef or inline must be set",
            )
        )
    )

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
