"""Prompt suites: the prompts both sides of a parity check answer.

On disk a suite is JSONL, one prompt per line, camelCase keys:

    {"id": "zh-weather", "text": "今天早上", "tags": ["zh", "short"]}
    {"id": "ids-1", "tokenIds": [101, 7, 42], "tags": ["ids"]}
    {"id": "chat-1", "messages": [{"role": "user", "content": "Hi"}], "ignoreEos": false}

Each prompt has exactly one of `text` (sent as text: each engine tokenizes it with its
own tokenizer and its default special tokens, as production requests are), `tokenIds`
(sent as they are) and `messages` (a chat, sent to /v1/chat/completions and rendered by
the engine's served chat template). `ignoreEos: false` lets generation stop at the
engine's end of sequence, so EOS and generation-config drift show; `maxTokens` caps
the prompt's output below the check's. Blank lines and lines starting with `#` are
skipped. Errors name the file, the line and the field.

A suite is identified by the digest of its content (`Suite.digest`), not its name:
two checks are comparable only when they ran the same prompts. A suite in a ConfigMap
(`config_map_suite`, parsed one way for the runner and the operator) is pinned in the
checks the operator makes by its whole sha256 (`Suite.content_digest`, spec.suite.digest).

Built-in suites (by name):

- `default`: 34 short Chinese and English prompts (six of them stop at EOS), the 4 chats
  of `chat` (each side renders them with its own chat template: vLLM through
  /v1/chat/completions, our adapters through the model's template; tagged `chat`, a
  stratum of their own in the per-stratum figures) and 4 long prompts of 8K+ tokens (2
  Chinese, 2 English, generated deterministically at load time, tagged `long`, 8 output
  tokens each). That meets the bf16 profiles' minimum evidence
  (32 prompts, 4 long prompts, 4096 scored positions: the long prompts are scored at
  every position of their own text) and takes a few minutes on CPU on the fixture
  model; long-context evidence comes from scoring the long texts, not from generating
  after them, so their output is kept short.
- `smoke`: a few short prompts and one long prompt, for tests.
- `chat`: short chats through /v1/chat/completions (the model must carry a chat
  template).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infergate.fixture.corpus import CHINESE, ENGLISH

LONG_TAG = "long"
"""Tag of prompts of 8K+ tokens; the long-sequence metrics select them by it."""

BUILTIN_SUITES: tuple[str, ...] = ("default", "smoke", "chat")
LONG_MAX_TOKENS = 8
"""Output tokens of the built-in long prompts: their evidence is their own scored text."""


class SuiteError(ValueError):
    """A suite file or name that cannot be loaded; the message names line and field."""


class SuiteNotFoundError(SuiteError):
    """A suite's ConfigMap, or its key, does not exist."""


class ChatMessage(BaseModel):
    """One message of a chat prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str = Field(min_length=1)


class PromptSpec(BaseModel):
    """One prompt of a suite."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    id: str = Field(min_length=1, description="Unique within the suite.")
    text: str | None = Field(
        default=None,
        description="Prompt text, tokenized by each engine with its default special tokens.",
    )
    token_ids: tuple[int, ...] | None = Field(
        default=None, description="Prompt token ids, sent as they are."
    )
    messages: tuple[ChatMessage, ...] | None = Field(
        default=None,
        description="A chat, sent to /v1/chat/completions and rendered by the served template.",
    )
    tags: tuple[str, ...] = Field(default=(), description="Free labels, e.g. zh, en, long.")
    ignore_eos: bool = Field(
        default=True,
        description="false: generation stops at the engine's end of sequence (EOS drift shows).",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Output tokens of this prompt, at most the check's."
    )

    @model_validator(mode="after")
    def _one_prompt(self) -> Self:
        given = [
            name
            for name, value in (
                ("text", self.text),
                ("tokenIds", self.token_ids),
                ("messages", self.messages),
            )
            if value is not None
        ]
        if len(given) != 1:
            shown = " and ".join(given) if given else "none"
            raise ValueError(f"exactly one of text, tokenIds and messages is required, got {shown}")
        if self.text is not None and not self.text:
            raise ValueError("text: must not be empty")
        if self.messages is not None and not self.messages:
            raise ValueError("messages: must not be empty")
        if self.token_ids is not None:
            if not self.token_ids:
                raise ValueError("tokenIds: must not be empty")
            negative = [t for t in self.token_ids if t < 0]
            if negative:
                raise ValueError(f"tokenIds: ids must be >= 0, got {negative[0]}")
        return self

    @property
    def is_long(self) -> bool:
        return LONG_TAG in self.tags

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def output_tokens(self, check_max_tokens: int) -> int:
        """Tokens to generate: the check's maxTokens, capped by this prompt's."""
        return (
            check_max_tokens if self.max_tokens is None else min(self.max_tokens, check_max_tokens)
        )


@dataclass(frozen=True)
class Suite:
    """A named, ordered set of prompts with unique ids."""

    name: str
    prompts: tuple[PromptSpec, ...]

    def select(
        self, *, long: bool | None = None, chat: bool | None = None, limit: int | None = None
    ) -> Suite:
        """A sub-suite: only long (True) or only short (False) prompts, only chats (True)
        or none (False), at most `limit`."""
        chosen = [
            p
            for p in self.prompts
            if (long is None or p.is_long == long) and (chat is None or p.is_chat == chat)
        ]
        if limit is not None:
            chosen = chosen[:limit]
        return Suite(self.name, tuple(chosen))

    def digest(self) -> str:
        """sha256 of the prompts' content (ids, text, ids, messages, settings, tags), in order,
        cut to 16 hex digits: the key golden records and reports are filed under.

        The name is left out: two suites with the same prompts have the same digest.
        """
        return self.content_digest()[:16]

    def content_digest(self) -> str:
        """The whole sha256 (64 hex digits) `digest` is cut from: what a ParityCheck records
        of a suite it reads from a ConfigMap (`spec.suite.digest`), so that the check
        judges exactly the prompts it was made for."""
        content = [p.model_dump(mode="json", by_alias=True) for p in self.prompts]
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_suite(lines: Iterable[str], *, name: str, source: str) -> Suite:
    """Parse JSONL suite lines; `source` names the file in errors."""
    prompts: list[PromptSpec] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{source}:{number}: not valid JSON ({exc.msg})") from exc
        try:
            prompt = PromptSpec.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "prompt"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise SuiteError(f"{source}:{number}: {field}: {message}") from exc
        if prompt.id in seen:
            raise SuiteError(
                f"{source}:{number}: id: {prompt.id!r} already used on line {seen[prompt.id]}"
            )
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise SuiteError(f"{source}: the suite has no prompts")
    return Suite(name, tuple(prompts))


def config_map_suite(config_map: Mapping[str, Any] | None, name: str, key: str) -> Suite:
    """The suite in key `key` of ConfigMap `name` (`config_map`: its body as read; None: it
    does not exist), parsed the one way the runner judges it and the operator digests it.
    SuiteNotFoundError when the ConfigMap or the key is missing, SuiteError when the
    content is no suite."""
    where = f"suite.configMapRef {name}/{key}"
    if config_map is None:
        raise SuiteNotFoundError(f"{where}: ConfigMap {name} does not exist")
    data = config_map.get("data") or {}
    text = data.get(key)
    if text is None:
        keys = ", ".join(sorted(data)) or "none"
        raise SuiteNotFoundError(f"{where}: ConfigMap {name} has no key {key} ({keys})")
    return parse_suite(str(text).splitlines(), name=f"{name}/{key}", source=where)


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a JSONL file by path."""
    path = Path(name_or_path)
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            return parse_suite(handle, name=path.stem, source=str(path))
    if name_or_path not in BUILTIN_SUITES:
        raise SuiteError(
            f"suite: {name_or_path!r} is neither a file nor a built-in suite; "
            f"built-in: {', '.join(BUILTIN_SUITES)}"
        )
    data = resources.files("infergate.suites").joinpath(f"{name_or_path}.jsonl")
    short = parse_suite(
        data.read_text(encoding="utf-8").splitlines(),
        name=name_or_path,
        source=f"infergate/suites/{name_or_path}.jsonl",
    )
    if name_or_path == "chat":
        return short
    chats: tuple[PromptSpec, ...] = ()
    if name_or_path == "default":
        chats = load_suite("chat").prompts
    count = 1 if name_or_path == "smoke" else 2
    long = [long_prompt("zh", i) for i in range(count)] + [
        long_prompt("en", i) for i in range(count if name_or_path == "default" else 0)
    ]
    if name_or_path == "default":
        long = [p.model_copy(update={"max_tokens": LONG_MAX_TOKENS}) for p in long]
    return Suite(name_or_path, short.prompts + chats + tuple(long))


# Characters per long prompt. With the fixture tokenizer Chinese text is about 1.1
# characters per token and English about 4.5; the totals give 8.5K-8.7K tokens.
_LONG_CHARS = {"zh": 9_300, "en": 39_000}


def long_prompt(language: str, index: int) -> PromptSpec:
    """A deterministic prompt of 8K+ tokens: corpus sentences in a seeded order, numbered."""
    if language not in _LONG_CHARS:
        raise SuiteError(f"long prompt language: {language!r}; allowed: {', '.join(_LONG_CHARS)}")
    pool: Sequence[str] = CHINESE if language == "zh" else ENGLISH
    rng = random.Random(f"infergate-long-{language}-{index}")  # noqa: S311 - text, not secrets
    parts: list[str] = []
    size = 0
    paragraph = 0
    while size < _LONG_CHARS[language]:
        paragraph += 1
        chosen = rng.sample(list(pool), k=4)
        zh_head = f"第{paragraph}段："  # noqa: RUF001 - Chinese punctuation
        head = zh_head if language == "zh" else f"Part {paragraph}: "
        sep = "" if language == "zh" else " "
        text = head + sep.join(chosen) + "\n"
        parts.append(text)
        size += len(text)
    return PromptSpec(id=f"long-{language}-{index}", text="".join(parts), tags=(language, LONG_TAG))


# Characters per medium prompt: with the fixture tokenizer about 110-140 tokens, so
# 36 of them with 16 output tokens each score 4096+ teacher-forced positions.
_MEDIUM_CHARS = {"zh": 130, "en": 560}


def medium_prompts(count: int = 36, token_prompts: int = 4, tokens: int = 120) -> list[PromptSpec]:
    """Deterministic prompts of about a hundred tokens, for deployments that cannot hold 8K.

    A fixture engine served with a short context (maxModelLen 512, as the demo and the
    end-to-end tests run it on CPU) cannot take the default suite's long prompts, so a
    check on it meets the profiles' prompt and scored-position minimums with these and
    states `minLongPrompts: 0`: its verdict then says the long-context checks were not part
    of it. Text prompts alternate Chinese and English corpus sentences in a seeded order;
    the last `token_prompts` are token ids (identical on both sides) drawn from the same
    seed inside the fixture's vocabulary of ordinary tokens. `tokens` sets their length
    (about; 120 by default): `strict` needs 1024 scored positions, not 4096, and 36 prompts
    of ~32 tokens with 12 output tokens each give it at a quarter of the cost.
    """
    prompts: list[PromptSpec] = []
    for index in range(count - token_prompts):
        language = "zh" if index % 2 else "en"
        pool: Sequence[str] = CHINESE if language == "zh" else ENGLISH
        rng = random.Random(f"infergate-medium-{language}-{index}")  # noqa: S311 - text
        sep = "" if language == "zh" else " "
        chosen: list[str] = []
        while len(sep.join(chosen)) < _MEDIUM_CHARS[language] * tokens / 120:
            chosen.append(rng.choice(pool))
        prompts.append(
            PromptSpec(id=f"{language}-{index}", text=sep.join(chosen), tags=(language,))
        )
    for index in range(token_prompts):
        rng = random.Random(f"infergate-medium-ids-{index}")  # noqa: S311 - ids
        ids = tuple(rng.randrange(16, 1024) for _ in range(tokens))
        prompts.append(PromptSpec(id=f"ids-{index}", token_ids=ids, tags=("ids",)))
    return prompts


def inline(prompts: Iterable[PromptSpec]) -> list[dict[str, object]]:
    """Prompts as a ParityCheck's `suite.inline` items (camelCase, unset fields left out)."""
    return [
        p.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True, mode="json")
        | {"id": p.id}
        for p in prompts
    ]
