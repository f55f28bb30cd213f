"""In-process drivers: the same channels as `client`, without a server.

`BackendChannel` drives one of our adapter backends (MindFormers or transformers);
`VllmChannel` drives vLLM's offline `LLM` (generation) plus a second `LLM` with the
pooling runner (hidden states). Each must run in its engine's venv.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.engines.client import (
    Completion,
    Greedy,
    GreedyChannel,
    Prompt,
    completion_of,
    parse_prompt_logprobs,
)
from infergate.parity.record import TeacherForced
from infergate.render.vllm import POOLER_CONFIG, hf_overrides
from infergate.runtime.backend import EngineBackend, top_k_rows


class BackendChannel(GreedyChannel):
    """Serving and probe channel over an `EngineBackend`, called directly."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend

    def tokenize(self, text: str) -> list[int]:
        return self.backend.tokenize(text)

    # Greedy decoding needs no seed: `greedy.seed` is not read.
    def _complete(self, prompt: Prompt, greedy: Greedy) -> Completion:
        ids = self.backend.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        return self._generate(ids, greedy)

    def _chat(self, messages: Sequence[Mapping[str, str]], greedy: Greedy) -> Completion:
        text = self.backend.render_chat(messages)
        ids = self.backend.tokenize(text, add_special_tokens=False)
        return self._generate(ids, greedy)

    def _generate(self, ids: list[int], greedy: Greedy) -> Completion:
        out = self.backend.generate_greedy(
            ids, greedy.max_tokens, greedy.top_logprobs, ignore_eos=greedy.ignore_eos
        )
        return completion_of(
            ids,
            out.token_ids,
            (
                zip(top, lps, strict=True)
                for top, lps in zip(out.top_ids, out.top_logprobs, strict=True)
            ),
            text=self.backend.detokenize(out.token_ids),
            finish_reason=out.finish_reason,
            k=greedy.top_logprobs,
            logit_scale=out.logit_scale,
        )

    def score(
        self,
        prompt: Sequence[int],
        forced: Sequence[int],
        *,
        top_logprobs: int,
        seed: int,  # noqa: ARG002 - scoring needs no seed; the protocol passes it
        full_vocab: int = 0,
    ) -> TeacherForced:
        sequence = list(prompt) + list(forced)
        entries: list[dict[str, dict[str, Any]] | None] = [None] * max(len(prompt), 1)
        kept: list[NDArray[np.float32]] = []
        first = max(len(prompt) - 1, 0)
        for start, rows in self.backend.prompt_logprob_chunks(sequence, first):
            top_ids, top_lps = top_k_rows(rows, top_logprobs)
            for offset, row in enumerate(rows):
                target = sequence[start + offset + 1]
                entry = {
                    str(int(t)): {"logprob": float(lp), "rank": rank + 1}
                    for rank, (t, lp) in enumerate(
                        zip(top_ids[offset], top_lps[offset], strict=True)
                    )
                }
                entry.setdefault(
                    str(target),
                    {"logprob": float(row[target]), "rank": int((row > row[target]).sum()) + 1},
                )
                entries.append(entry)
            if full_vocab > 0:
                kept.append(rows.copy())
        scored = parse_prompt_logprobs(entries, sequence, len(prompt), top_logprobs)
        if not kept:
            return scored
        full = np.concatenate(kept)[-min(full_vocab, len(forced)) :]
        return TeacherForced(scored.token_ids, scored.target_logprobs, scored.top, None, full)

    def fingerprints(self) -> dict[str, Any]:
        return self.backend.fingerprints()

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        return self.backend.hidden_states(token_ids)


def _logprob_entry(logprobs: Mapping[int, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(int(token)): {"logprob": float(value.logprob), "rank": int(value.rank or 0)}
        for token, value in logprobs.items()
    }


class VllmChannel(GreedyChannel):
    """vLLM's offline engine: generation, prompt logprobs, and pooling for hidden states."""

    def __init__(
        self,
        model_dir: Path,
        dtype: str,
        overrides: Mapping[str, float],
        *,
        seed: int,
        max_model_len: int,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        self._kwargs: dict[str, Any] = {
            "model": str(model_dir),
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "max_num_batched_tokens": max_model_len,
            "enforce_eager": True,
            # As `vllm serve` defaults: the model's generation config applies (its EOS ids).
            "generation_config": "auto",
            "max_logprobs": 20,
            "hf_overrides": hf_overrides(overrides) or None,
        }
        self._llm: Any = LLM(**self._kwargs)
        self._pooling: Any = None

    def tokenize(self, text: str) -> list[int]:
        """vLLM's tokenizer with its default special tokens, as its server tokenizes text."""
        ids: list[int] = self._llm.get_tokenizer().encode(text)
        return ids

    def _generate(self, prompt: Prompt, params: Any) -> Any:
        request: Any = prompt if isinstance(prompt, str) else {"prompt_token_ids": list(prompt)}
        return self._llm.generate([request], params, use_tqdm=False)[0]

    def _params(self, greedy: Greedy) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=greedy.max_tokens,
            temperature=0.0,
            seed=greedy.seed,
            logprobs=greedy.top_logprobs,
            ignore_eos=greedy.ignore_eos,
        )

    def _complete(self, prompt: Prompt, greedy: Greedy) -> Completion:
        return self._completion(self._generate(prompt, self._params(greedy)), greedy.top_logprobs)

    def _chat(self, messages: Sequence[Mapping[str, str]], greedy: Greedy) -> Completion:
        chat = [dict(m) for m in messages]
        result = self._llm.chat(chat, self._params(greedy), use_tqdm=False)[0]
        return self._completion(result, greedy.top_logprobs)

    def _completion(self, result: Any, top_logprobs: int) -> Completion:
        out = result.outputs[0]
        steps = [
            [
                (int(tid), info["logprob"])
                for tid, info in _logprob_entry(step).items()
                if 0 < info["rank"] <= top_logprobs
            ]
            for step in (out.logprobs or [])
        ]
        return completion_of(
            list(result.prompt_token_ids),
            list(out.token_ids),
            steps,
            text=out.text,
            finish_reason=out.finish_reason,
            k=top_logprobs,
        )

    def score(
        self, prompt: Sequence[int], forced: Sequence[int], *, top_logprobs: int, seed: int
    ) -> TeacherForced:
        from vllm import SamplingParams

        sequence = list(prompt) + list(forced)
        params = SamplingParams(
            max_tokens=1, temperature=0.0, seed=seed, prompt_logprobs=top_logprobs
        )
        out = self._generate(sequence, params)
        entries = [None if step is None else _logprob_entry(step) for step in out.prompt_logprobs]
        return parse_prompt_logprobs(entries, sequence, len(prompt), top_logprobs)

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        if self._pooling is None:
            from vllm import LLM

            self._pooling = LLM(
                **self._kwargs, runner="pooling", convert="embed", pooler_config=POOLER_CONFIG
            )
        outputs = self._pooling.encode(
            [{"prompt_token_ids": list(token_ids)}], pooling_task="token_embed", use_tqdm=False
        )
        data = outputs[0].outputs.data
        states: NDArray[np.float32] = data.float().numpy()
        return states
