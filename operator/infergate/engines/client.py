"""HTTP clients of a running engine: the serving channel and the hidden-state probe.

No engine imports (httpx and numpy only): the parity runner drives live endpoints with
this module. The serving channel is the OpenAI API as vLLM serves it, with vLLM's
extensions, which our adapters serve too:

- prompts reach the engine the way production requests do: text is sent as text (the
  engine tokenizes it with its own tokenizer and default special tokens), chats go to
  `/v1/chat/completions` and the served template, and the prompt ids the engine actually
  used are read back (`return_token_ids`); token-id prompts are sent as they are;
- greedy generation with top-k `logprobs`, tokens returned as ids
  (`return_tokens_as_token_ids`), `ignore_eos` per prompt;
- teacher forcing through `prompt_logprobs`: the prompt plus the forced continuation is
  sent with `max_tokens=1`, and the logprob of each forced token given what precedes it
  is read from the prompt positions past the prompt. Scoring a whole sequence from
  position 1 is the same call with a one-token "prompt" (`score_from`).

Our adapters add three extensions, ignored by engines that lack them: the raw logit of
each chosen token (`logprobs.parity_logit_scale`, for the fork tau), full-vocabulary
logprobs of the forced positions on request (`parity_full_logprobs`), and non-finite
numbers sent as JSON NaN/Infinity rather than refused, so they arrive as data.

The probe channel returns last-layer hidden states of token ids: vLLM's pooling runner
on `/pooling` (`vllm serve --runner pooling`), or our adapters' `/v1/parity/hidden_states`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self, TypedDict, Unpack

import httpx
import numpy as np
from numpy.typing import NDArray

from infergate.accounting import ENGINE_SECONDS_HEADER
from infergate.parity.record import TeacherForced, TopLogprobs

ProbeKind = Literal["adapter", "vllm-pooling"]

_TOKEN_ID_PREFIX = "token_id:"  # noqa: S105 - a token-name prefix, not a secret


class EngineClientError(RuntimeError):
    """A server answered with an error or a body this client cannot read."""


@dataclass(frozen=True)
class Completion:
    """A greedy completion: output ids, top-k per step, text and why it stopped."""

    prompt_token_ids: list[int]
    """The prompt ids the engine used (for text and chat prompts: its own tokenization)."""
    token_ids: list[int]
    top: TopLogprobs
    text: str
    finish_reason: str | None
    logit_scale: list[float] | None = None
    """|raw logit| of each chosen token, where the engine reports it."""


Prompt = Sequence[int] | str
"""A completion prompt: token ids sent as they are, or text the engine tokenizes."""


def _token_id(name: str) -> int:
    if not name.startswith(_TOKEN_ID_PREFIX):
        raise EngineClientError(
            f"logprobs token {name!r}: expected 'token_id:N' (return_tokens_as_token_ids)"
        )
    return int(name[len(_TOKEN_ID_PREFIX) :])


def parse_completion_choice(choice: Mapping[str, Any], prompt: Sequence[int], k: int) -> Completion:
    """One choice of a /v1/completions answer (vLLM or adapter) as a Completion.

    `prompt` is what was sent as ids (empty for a text prompt: the answer must then say
    which ids the engine used).
    """
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens")
    if choice.get("token_ids") is not None:
        ids = [int(t) for t in choice["token_ids"]]
    elif tokens is not None:
        ids = [_token_id(t) for t in tokens]
    else:
        raise EngineClientError("completion choice: neither token_ids nor logprobs.tokens")
    steps: list[list[tuple[int, float]]] = []
    for entry in logprobs.get("top_logprobs") or []:
        steps.append([(_token_id(name), float(lp)) for name, lp in (entry or {}).items()])
    if k > 0 and len(steps) != len(ids):
        raise EngineClientError(
            f"completion choice: {len(ids)} tokens but {len(steps)} top_logprobs entries"
        )
    top = TopLogprobs.from_pairs(steps, k=k) if k > 0 else TopLogprobs.empty(len(ids))
    returned_prompt = choice.get("prompt_token_ids")
    return Completion(
        prompt_token_ids=[int(t) for t in (returned_prompt if returned_prompt else prompt)],
        token_ids=ids,
        top=top,
        text=str(choice.get("text") or ""),
        finish_reason=choice.get("finish_reason"),
        logit_scale=_logit_scale(logprobs.get("parity_logit_scale"), len(ids)),
    )


def completion_of(
    prompt_token_ids: Sequence[int],
    token_ids: Sequence[int],
    steps: Iterable[Iterable[tuple[int, float]]],
    *,
    text: str,
    finish_reason: str | None,
    k: int,
    logit_scale: Sequence[float] | None = None,
) -> Completion:
    """A Completion from an engine called in process: its generated ids, the top-k
    (token id, logprob) pairs of each step, text and finish reason.

    Shaped as the served answer and read by `parse_completion_choice`, so an in-process
    channel and a server are read alike (the same checks, the same top-k order).
    """
    choice = {
        "token_ids": list(token_ids),
        "prompt_token_ids": list(prompt_token_ids),
        "text": text,
        "finish_reason": finish_reason,
        "logprobs": {
            "top_logprobs": [
                {f"{_TOKEN_ID_PREFIX}{int(t)}": float(lp) for t, lp in step} for step in steps
            ],
            "parity_logit_scale": logit_scale,
        },
    }
    return parse_completion_choice(choice, prompt_token_ids, k)


def _logit_scale(values: Any, steps: int) -> list[float] | None:
    if not isinstance(values, list) or len(values) != steps:
        return None
    return [float(v) for v in values]


def parse_chat_choice(
    choice: Mapping[str, Any], prompt_token_ids: Sequence[int] | None, k: int
) -> Completion:
    """One choice of a /v1/chat/completions answer (vLLM or adapter) as a Completion.

    Logprobs come as `logprobs.content[i] = {token, logprob, top_logprobs: [...]}` with
    tokens named `token_id:N` (return_tokens_as_token_ids).
    """
    content = (choice.get("logprobs") or {}).get("content") or []
    if choice.get("token_ids") is not None:
        ids = [int(t) for t in choice["token_ids"]]
    else:
        ids = [_token_id(str(entry["token"])) for entry in content]
    steps = [
        [(_token_id(str(t["token"])), float(t["logprob"])) for t in entry.get("top_logprobs") or []]
        for entry in content
    ]
    if k > 0 and len(steps) != len(ids):
        raise EngineClientError(
            f"chat choice: {len(ids)} tokens but {len(steps)} logprobs.content entries"
        )
    if prompt_token_ids is None:
        raise EngineClientError(
            "chat answer: no prompt_token_ids (return_token_ids); the rendered prompt ids are "
            "needed to compare both sides' templates"
        )
    message = choice.get("message") or {}
    scale = (choice.get("logprobs") or {}).get("parity_logit_scale")
    return Completion(
        prompt_token_ids=[int(t) for t in prompt_token_ids],
        token_ids=ids,
        top=TopLogprobs.from_pairs(steps, k=k) if k > 0 else TopLogprobs.empty(len(ids)),
        text=str(message.get("content") or ""),
        finish_reason=choice.get("finish_reason"),
        logit_scale=_logit_scale(scale, len(ids)),
    )


def parse_prompt_logprobs(
    entries: Sequence[Mapping[str, Any] | None],
    sequence: Sequence[int],
    prompt_len: int,
    k: int,
) -> TeacherForced:
    """Teacher-forced scores of `sequence[prompt_len:]` from vLLM-shaped prompt_logprobs.

    Entry i (i >= 1) maps token ids (as strings) to {logprob, rank}: it holds the logprob
    of `sequence[i]` given `sequence[:i]` plus the top-k there.
    """
    if len(entries) != len(sequence):
        raise EngineClientError(
            f"prompt_logprobs: {len(entries)} entries for a sequence of {len(sequence)} tokens"
        )
    forced = list(sequence[prompt_len:])
    targets: list[float] = []
    steps: list[list[tuple[int, float]]] = []
    for offset, token in enumerate(forced):
        entry = entries[prompt_len + offset]
        if entry is None:
            raise EngineClientError(f"prompt_logprobs: no entry at position {prompt_len + offset}")
        scored = {int(tid): value for tid, value in entry.items()}
        if token not in scored:
            raise EngineClientError(
                f"prompt_logprobs: position {prompt_len + offset} does not score token {token}"
            )
        targets.append(float(scored[token]["logprob"]))
        ranked = sorted(scored.items(), key=lambda item: int(item[1].get("rank") or 10**9))
        steps.append([(tid, float(v["logprob"])) for tid, v in ranked if int(v["rank"]) <= k])
    top = TopLogprobs.from_pairs(steps, k=k)
    return TeacherForced(
        token_ids=np.asarray(forced, np.int64), target_logprobs=np.asarray(targets), top=top
    )


class ServingChannel(Protocol):
    """What a parity record is made through: tokenize, greedy completion, teacher forcing.

    `EngineClient` speaks it over HTTP; `engines.inprocess` calls a backend directly.
    """

    def tokenize(self, text: str) -> list[int]: ...

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,
        ignore_eos: bool = True,
    ) -> Completion: ...

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,
        ignore_eos: bool = True,
    ) -> Completion: ...

    def score(
        self, prompt: Sequence[int], forced: Sequence[int], *, top_logprobs: int, seed: int
    ) -> TeacherForced: ...


@dataclass(frozen=True)
class Greedy:
    """The settings of one greedy generation, as every serving channel takes them."""

    max_tokens: int
    top_logprobs: int
    seed: int
    ignore_eos: bool = True


class GreedyChannel:
    """`complete` and `chat` of `ServingChannel` in one place: a channel implements them
    on one `Greedy` (`_complete`, `_chat`), however it reaches its engine."""

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,
        ignore_eos: bool = True,
    ) -> Completion:
        """Greedy tokens and top-k logprobs of a prompt (text is tokenized by the engine)."""
        return self._complete(prompt, Greedy(max_tokens, top_logprobs, seed, ignore_eos))

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,
        ignore_eos: bool = True,
    ) -> Completion:
        """Greedy reply to a chat rendered by the engine's chat template."""
        return self._chat(messages, Greedy(max_tokens, top_logprobs, seed, ignore_eos))

    def _complete(self, prompt: Prompt, greedy: Greedy) -> Completion:
        raise NotImplementedError

    def _chat(self, messages: Sequence[Mapping[str, str]], greedy: Greedy) -> Completion:
        raise NotImplementedError


class FullVocabScoring(Protocol):
    """A serving channel that can also return full-vocabulary rows of the last positions."""

    def score(
        self,
        prompt: Sequence[int],
        forced: Sequence[int],
        *,
        top_logprobs: int,
        seed: int,
        full_vocab: int = 0,
    ) -> TeacherForced: ...


def score_from(
    serving: ServingChannel,
    sequence: Sequence[int],
    start: int,
    *,
    top_logprobs: int,
    seed: int,
    full_vocab: int = 0,
) -> TeacherForced:
    """Scores of `sequence` from position `start` (>= 1), teacher-forced on its own tokens.

    One `score` call with `sequence[:start]` as the prompt: engines score every position
    of a prompt anyway, so scoring from position 1 costs what scoring the output does.
    `full_vocab` asks for the full distributions of the last that many positions too
    (channels with `FullVocabScoring`; others give top-k only).
    """
    if not 1 <= start <= len(sequence):
        raise ValueError(f"start: {start} must lie in 1..{len(sequence)}")
    head, rest = list(sequence[:start]), list(sequence[start:])
    if full_vocab > 0:
        full: FullVocabScoring = serving  # type: ignore[assignment]
        scored = full.score(head, rest, top_logprobs=top_logprobs, seed=seed, full_vocab=full_vocab)
    else:
        scored = serving.score(head, rest, top_logprobs=top_logprobs, seed=seed)
    return TeacherForced(
        scored.token_ids, scored.target_logprobs, scored.top, start, scored.full_logprobs
    )


class ProbeChannel(Protocol):
    """Where last-layer hidden states of a token sequence come from."""

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]: ...


class EndpointOptions(TypedDict, total=False):
    """How an endpoint connects: the request timeout (seconds, 600 unless given), and hooks
    told each request's path (`on_request`, to count what an engine served) and each
    successful answer's path and engine seconds (`on_answer`)."""

    timeout: float
    on_request: Callable[[str], None] | None
    on_answer: Callable[[str, str | None], None] | None


class _Endpoint:
    """An HTTP connection to one served model; a context manager that closes it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout: float = 600.0,
        on_request: Callable[[str], None] | None = None,
        on_answer: Callable[[str, str | None], None] | None = None,
    ) -> None:
        self._model = model
        hooks: dict[str, list[Callable[[Any], None]]] = {}
        if on_request is not None:
            hooks["request"] = [_path_hook(base_url, on_request)]
        if on_answer is not None:
            hooks["response"] = [_answer_hook(base_url, on_answer)]
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, event_hooks=hooks)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _relative(base_url: str) -> Callable[[httpx.URL], str]:
    prefix = httpx.URL(base_url).path.rstrip("/")

    def path_of(url: httpx.URL) -> str:
        path = url.path
        return path[len(prefix) :] if prefix and path.startswith(prefix) else path

    return path_of


def _path_hook(base_url: str, on_request: Callable[[str], None]) -> Callable[[httpx.Request], None]:
    """An httpx request hook that tells `on_request` each request's path under `base_url`."""
    path_of = _relative(base_url)

    def hook(request: httpx.Request) -> None:
        on_request(path_of(request.url))

    return hook


def _answer_hook(
    base_url: str, on_answer: Callable[[str, str | None], None]
) -> Callable[[httpx.Response], None]:
    """An httpx response hook that tells `on_answer` each successful answer's path and
    the engine seconds it carries (header ENGINE_SECONDS_HEADER; None when absent)."""
    path_of = _relative(base_url)

    def hook(response: httpx.Response) -> None:
        if response.status_code == 200:
            on_answer(path_of(response.request.url), response.headers.get(ENGINE_SECONDS_HEADER))

    return hook


class EngineClient(_Endpoint, GreedyChannel):
    """The serving channel of one engine endpoint (OpenAI completions, vLLM extensions),
    connected as `EndpointOptions` say."""

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = self._http.post(path, json=dict(body))
        if response.status_code != 200:
            raise EngineClientError(
                f"POST {path}: HTTP {response.status_code}: {response.text[:500]}"
            )
        return response.json()

    def healthy(self) -> bool:
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def server_version(self) -> str | None:
        """The engine version from `/version` (vLLM and our adapters), None if absent."""
        response = self._http.get("/version")
        if response.status_code != 200:
            return None
        return str(response.json().get("version"))

    def models(self) -> list[dict[str, Any]]:
        response = self._http.get("/v1/models")
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def parity_config(self) -> dict[str, Any] | None:
        """Our adapters' effective configuration; None where the engine has no such route."""
        response = self._http.get("/v1/parity/config")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def tokenize(self, text: str) -> list[int]:
        """The engine's own tokenization of `text`, with its default special tokens."""
        body = self._post("/tokenize", {"model": self._model, "prompt": text})
        return [int(t) for t in body["tokens"]]

    def parity_fingerprints(self) -> dict[str, Any] | None:
        """What the engine ran (parity.fingerprints keys); None where not served."""
        response = self._http.get("/v1/parity/fingerprints")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def _greedy_body(self, field: str, value: Any, max_tokens: int, seed: int) -> dict[str, Any]:
        """What every request here starts with: the model, what to run, greedy settings."""
        return {
            "model": self._model,
            field: value,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": seed,
        }

    def _complete(self, prompt: Prompt, greedy: Greedy) -> Completion:
        body = self._greedy_body("prompt", _prompt_field(prompt), greedy.max_tokens, greedy.seed)
        body |= {
            "logprobs": greedy.top_logprobs,
            "ignore_eos": greedy.ignore_eos,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        answer = self._post("/v1/completions", body)
        choice = answer["choices"][0]
        if isinstance(prompt, str):
            if not choice.get("prompt_token_ids"):
                # An engine that does not return them: its own /tokenize, same defaults.
                choice = {**choice, "prompt_token_ids": self.tokenize(prompt)}
            return parse_completion_choice(choice, [], greedy.top_logprobs)
        return parse_completion_choice(choice, prompt, greedy.top_logprobs)

    def _chat(self, messages: Sequence[Mapping[str, str]], greedy: Greedy) -> Completion:
        body = self._greedy_body(
            "messages", [dict(m) for m in messages], greedy.max_tokens, greedy.seed
        )
        body |= {
            "logprobs": greedy.top_logprobs > 0,
            "top_logprobs": greedy.top_logprobs,
            "ignore_eos": greedy.ignore_eos,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        answer = self._post("/v1/chat/completions", body)
        choice = answer["choices"][0]
        prompt_ids = answer.get("prompt_token_ids") or choice.get("prompt_token_ids")
        return parse_chat_choice(choice, prompt_ids, greedy.top_logprobs)

    def score(
        self,
        prompt: Sequence[int],
        forced: Sequence[int],
        *,
        top_logprobs: int,
        seed: int,
        full_vocab: int = 0,
    ) -> TeacherForced:
        """Teacher forcing: this engine's logprob of each forced token, and its top-k.

        `full_vocab` asks our adapters for the whole next-token distribution at the last
        that many forced positions too (KL over the full vocabulary); engines without the
        extension answer without it.
        """
        sequence = list(prompt) + list(forced)
        if not forced:
            return parse_prompt_logprobs(
                [None] * len(sequence), sequence, len(sequence), top_logprobs
            )
        body = self._greedy_body("prompt", sequence, 1, seed)
        body |= {"prompt_logprobs": top_logprobs, "return_token_ids": True}
        if full_vocab > 0:
            body["parity_full_logprobs"] = min(full_vocab, len(forced))
        answer = self._post("/v1/completions", body)
        choice = answer["choices"][0]
        scored = parse_prompt_logprobs(
            choice["prompt_logprobs"], sequence, len(prompt), top_logprobs
        )
        full = choice.get("parity_full_logprobs")
        if full_vocab <= 0 or full is None:
            return scored
        rows = decode_float32(full)
        if rows.ndim != 2 or rows.shape[0] != min(full_vocab, len(forced)):
            raise EngineClientError(
                f"parity_full_logprobs: shape {rows.shape} for {min(full_vocab, len(forced))} "
                "positions"
            )
        return TeacherForced(scored.token_ids, scored.target_logprobs, scored.top, None, rows)


def _prompt_field(prompt: Prompt) -> str | list[int]:
    return prompt if isinstance(prompt, str) else list(prompt)


def decode_float32(item: Mapping[str, Any]) -> NDArray[np.float32]:
    """A [tokens, hidden] array from our adapter's base64 payload."""
    if item.get("encoding") != "base64" or item.get("dtype") != "float32":
        raise EngineClientError("hidden states: expected base64 float32 payload")
    raw = base64.b64decode(item["data"])
    shape = tuple(int(s) for s in item["shape"])
    return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)


class HiddenStateProbe(_Endpoint):
    """The probe channel: last-layer hidden states [tokens, hidden] of token ids."""

    def __init__(
        self, base_url: str, model: str, kind: ProbeKind, **options: Unpack[EndpointOptions]
    ) -> None:
        super().__init__(base_url, model, **options)
        self._kind = kind

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        if self._kind == "adapter":
            body: dict[str, Any] = {"model": self._model, "input": list(token_ids)}
            response = self._http.post("/v1/parity/hidden_states", json=body)
        else:
            body = {"model": self._model, "input": list(token_ids), "encoding_format": "float"}
            response = self._http.post("/pooling", json=body)
        if response.status_code != 200:
            raise EngineClientError(
                f"hidden states ({self._kind}): HTTP {response.status_code}: {response.text[:500]}"
            )
        item = response.json()["data"][0]
        if self._kind == "adapter":
            states = decode_float32(item)
        else:
            states = np.asarray(item["data"], dtype=np.float32)
        if states.ndim != 2 or states.shape[0] != len(token_ids):
            raise EngineClientError(
                f"hidden states ({self._kind}): shape {states.shape} for {len(token_ids)} tokens"
            )
        return states
