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

from infergate.engines.client import Completion, parse_completion_choice, parse_prompt_logprobs
from infergate.parity.record import TeacherForced
from infergate.render.vllm import POOLER_CONFIG, hf_overrides
from infergate.runtime.backend import EngineBackend, top_k_rows


class BackendChannel:
    """Serving and probe channel over an `EngineBackend`, called directly."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend

    def tokenize(self, text: str) -> list[int]:
        return self.backend.tokenize(text)

    def complete(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,  # noqa: ARG002 - greedy decoding needs no seed; the protocol passes it
    ) -> Completion:
        out = self.backend.generate_greedy(prompt, max_tokens, top_logprobs, ignore_eos=True)
        choice = {
            "token_ids": out.token_ids,
            "text": self.backend.detokenize(out.token_ids),
            "finish_reason": out.finish_reason,
            "logprobs": {
                "top_logprobs": [
                    {f"token_id:{int(t)}": float(lp) for t, lp in zip(ids, lps, strict=True)}
                    for ids, lps in zip(out.top_ids, out.top_logprobs, strict=True)
                ]
            },
        }
        return parse_completion_choice(choice, prompt, top_logprobs)

    def score(
        self,
        prompt: Sequence[int],
        forced: Sequence[int],
        *,
        top_logprobs: int,
        seed: int,  # noqa: ARG002 - scoring needs no seed; the protocol passes it
    ) -> TeacherForced:
        sequence = list(prompt) + list(forced)
        rows = self.backend.prompt_logprobs(sequence)
        top_ids, top_lps = top_k_rows(rows, top_logprobs)
        entries: list[dict[str, dict[str, Any]] | None] = [None]
        for pos in range(1, len(sequence)):
            row = rows[pos - 1]
            target = sequence[pos]
            entry = {
                str(int(t)): {"logprob": float(lp), "rank": rank + 1}
                for rank, (t, lp) in enumerate(zip(top_ids[pos - 1], top_lps[pos - 1], strict=True))
            }
            entry.setdefault(
                str(target),
                {"logprob": float(row[target]), "rank": int((row > row[target]).sum()) + 1},
            )
            entries.append(entry)
        return parse_prompt_logprobs(entries, sequence, len(prompt), top_logprobs)

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        return self.backend.hidden_states(token_ids)


def _logprob_entry(logprobs: Mapping[int, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(int(token)): {"logprob": float(value.logprob), "rank": int(value.rank or 0)}
        for token, value in logprobs.items()
    }


class VllmChannel:
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
            "generation_config": "vllm",
            "max_logprobs": 20,
            "hf_overrides": hf_overrides(overrides) or None,
        }
        self._llm: Any = LLM(**self._kwargs)
        self._pooling: Any = None

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = self._llm.get_tokenizer().encode(text, add_special_tokens=False)
        return ids

    def _generate(self, prompt: Sequence[int], params: Any) -> Any:
        return self._llm.generate([{"prompt_token_ids": list(prompt)}], params, use_tqdm=False)[0]

    def complete(
        self, prompt: Sequence[int], *, max_tokens: int, top_logprobs: int, seed: int
    ) -> Completion:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            seed=seed,
            logprobs=top_logprobs,
            ignore_eos=True,
        )
        out = self._generate(prompt, params).outputs[0]
        choice = {
            "token_ids": list(out.token_ids),
            "text": out.text,
            "finish_reason": out.finish_reason,
            "logprobs": {
                "top_logprobs": [
                    {
                        f"token_id:{tid}": info["logprob"]
                        for tid, info in _logprob_entry(step).items()
                        if 0 < info["rank"] <= top_logprobs
                    }
                    for step in (out.logprobs or [])
                ]
            },
        }
        return parse_completion_choice(choice, prompt, top_logprobs)

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
