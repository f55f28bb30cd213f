"""Request models of the adapter server's HTTP API (an OpenAI-compatible subset).

Names follow the OpenAI completions API and vLLM's extensions (`prompt_logprobs`,
`return_tokens_as_token_ids`, `return_token_ids`, `ignore_eos`), so one client drives
vLLM and our adapters alike. The adapters decode greedily only: a request asking for
sampling is refused with a message naming the field, never answered differently.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TOP_LOGPROBS = 20
MAX_FULL_LOGPROB_VALUES = 1 << 25
"""Largest positions x vocabulary of full-vocabulary logprobs in one answer (128 MiB)."""


class CompletionRequest(BaseModel):
    """`POST /v1/completions`."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int = Field(default=16, ge=0)
    temperature: float | None = Field(default=None, description="Only 0 (greedy) is served.")
    top_p: float | None = None
    top_k: int | None = None
    n: int = 1
    seed: int | None = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    stream: bool = False
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    add_special_tokens: bool = Field(
        default=True, description="Special tokens for text prompts, as vLLM adds them."
    )
    parity_full_logprobs: int | None = Field(
        default=None,
        ge=0,
        description="With prompt_logprobs: also the full next-token distributions of the last "
        "N prompt positions, base64 float32 [N, vocab] (a parity extension).",
    )

    @model_validator(mode="after")
    def _greedy_only(self) -> Self:
        refusals = {
            "temperature": self.temperature not in (None, 0.0),
            "top_p": self.top_p not in (None, 1.0),
            "top_k": self.top_k not in (None, 0, -1),
            "n": self.n != 1,
            "echo": self.echo,
            "stream": self.stream,
            "stop": bool(self.stop),
        }
        for name, refused in refusals.items():
            if refused:
                value = getattr(self, name)
                raise ValueError(
                    f"{name}: {value!r} is not served; this adapter decodes greedily "
                    "(temperature 0, top_p 1, n 1, no echo, no streaming, no stop strings)"
                )
        return self

    def prompts(self) -> list[str | list[int]]:
        """The prompt field as a list of single prompts (text or token ids)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            raise ValueError("prompt: must not be empty")
        first = prompt[0]
        if isinstance(first, int):
            return [[int(t) for t in prompt]]  # type: ignore[arg-type]
        return list(prompt)  # type: ignore[arg-type]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`: greedy, the chat rendered by the model's template."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    add_generation_prompt: bool = True
    add_special_tokens: bool = Field(
        default=False, description="The template holds the special tokens already (vLLM's default)."
    )

    @model_validator(mode="after")
    def _greedy_only(self) -> Self:
        refusals = {
            "temperature": self.temperature not in (None, 0.0),
            "top_p": self.top_p not in (None, 1.0),
            "n": self.n != 1,
            "stream": self.stream,
            "stop": bool(self.stop),
        }
        for name, refused in refusals.items():
            if refused:
                raise ValueError(
                    f"{name}: {getattr(self, name)!r} is not served; this adapter decodes "
                    "greedily (temperature 0, top_p 1, n 1, no streaming, no stop strings)"
                )
        return self

    @property
    def tokens(self) -> int:
        given = self.max_completion_tokens if self.max_tokens is None else self.max_tokens
        return 16 if given is None else given


class HiddenStatesRequest(BaseModel):
    """`POST /v1/parity/hidden_states`: last-layer hidden states of token ids."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    input: list[int] | list[list[int]]

    def sequences(self) -> list[list[int]]:
        if not self.input:
            raise ValueError("input: must not be empty")
        if isinstance(self.input[0], int):
            return [[int(t) for t in self.input]]
        return [list(seq) for seq in self.input]


class TokenizeRequest(BaseModel):
    """`POST /tokenize` (as vLLM serves it): a text prompt, or a chat to render first."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = Field(
        default=None,
        description="Unset: vLLM's default, true for a prompt, false for a rendered chat.",
    )

    @model_validator(mode="after")
    def _one_input(self) -> Self:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("exactly one of prompt and messages is required")
        return self


class DetokenizeRequest(BaseModel):
    """`POST /detokenize` (as vLLM serves it)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]
