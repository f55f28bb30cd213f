"""The transformers reference ("PyTorch native") as an `EngineBackend`.

`AutoModelForCausalLM` in the requested dtype, eager attention, greedy decoding with
the KV cache. Hidden states are `hidden_states[-1]` of the forward pass, which in
transformers' Qwen2 is after the final norm, as vLLM's pooling runner returns them.
Logits are cast to float32 before the log-softmax, as vLLM does. `layer_states` serves
the per-layer probe (`infergate.runtime.layer_states`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.runtime.backend import PROMPT_LOGPROB_CHUNK, GreedyLoop, GreedyOutput
from infergate.runtime.loaded_model import LoadedModel


class TransformersBackend(LoadedModel):
    """A causal LM served by transformers on PyTorch (CPU here)."""

    def __init__(
        self,
        model_dir: Path,
        dtype: str,
        overrides: Mapping[str, float],
        *,
        seed: int = 42,
        max_model_len: int | None = None,
    ) -> None:
        super().__init__(model_dir, dtype, overrides, max_model_len)
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(seed)
        self._torch = torch
        hf_config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        if "rms_norm_eps" in overrides:
            hf_config.rms_norm_eps = float(overrides["rms_norm_eps"])
        if "rope_theta" in overrides:
            # transformers 5 reads the rope base from rope_parameters only.
            params = dict(getattr(hf_config, "rope_parameters", None) or {"rope_type": "default"})
            params["rope_theta"] = float(overrides["rope_theta"])
            hf_config.rope_parameters = params
        self._model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir,
            config=hf_config,
            dtype=getattr(torch, dtype),
            attn_implementation="eager",
            local_files_only=True,
        ).eval()

    @property
    def engine(self) -> str:
        return "transformers"

    @property
    def engine_version(self) -> str:
        return (
            f"transformers {metadata.version('transformers')} / torch {metadata.version('torch')}"
        )

    def _ids(self, token_ids: Sequence[int]) -> Any:
        return self._torch.tensor([list(token_ids)], dtype=self._torch.long)

    def _log_softmax(self, logits: Any) -> Any:
        return self._torch.log_softmax(logits.to(self._torch.float32), dim=-1)

    def generate_greedy(
        self, prompt: Sequence[int], max_tokens: int, top_k: int, *, ignore_eos: bool
    ) -> GreedyOutput:
        torch = self._torch
        loop = GreedyLoop(max_tokens, top_k, self.eos_token_id)
        if max_tokens <= 0:
            return loop.result()
        with torch.inference_mode():
            out = self._model(input_ids=self._ids(prompt), use_cache=True)
            going = True
            while going:
                logits = out.logits[0, -1]
                row = self._log_softmax(logits).numpy()
                raw = logits.to(torch.float32).numpy()
                going = loop.push(row, ignore_eos=ignore_eos, logits=raw)
                if going:
                    out = self._model(
                        input_ids=self._ids(loop.tokens[-1:]),
                        past_key_values=out.past_key_values,
                        use_cache=True,
                    )
        return loop.result()

    def prompt_logprob_chunks(
        self, token_ids: Sequence[int], first_row: int = 0, chunk: int = PROMPT_LOGPROB_CHUNK
    ) -> Iterator[tuple[int, NDArray[np.float32]]]:
        # The final-norm states once, then the LM head a chunk of positions at a time: the
        # same arithmetic as the full forward's logits, without [len, vocab] at once.
        with self._torch.inference_mode():
            states = self._model.base_model(input_ids=self._ids(token_ids), use_cache=False)
            hidden = states.last_hidden_state[0]
            head = self._model.get_output_embeddings()
            rows = len(token_ids) - 1
            for start in range(max(first_row, 0), rows, chunk):
                stop = min(start + chunk, rows)
                out: NDArray[np.float32] = self._log_softmax(head(hidden[start:stop])).numpy()
                yield start, out

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        with self._torch.inference_mode():
            out = self._model(
                input_ids=self._ids(token_ids), use_cache=False, output_hidden_states=True
            )
            states: NDArray[np.float32] = out.hidden_states[-1][0].to(self._torch.float32).numpy()
        return states

    def layer_states(
        self, token_ids: Sequence[int], reduce: Callable[[NDArray[np.float32]], NDArray[np.float32]]
    ) -> list[NDArray[np.float32]]:
        """Embeddings, each decoder layer's output, the final norm's output, each reduced.

        Forward hooks capture the states as the forward pass produces them: the decoder
        layers' raw outputs (`hidden_states` of `output_hidden_states` lacks the last
        layer's output before the final norm) and only the reduced copy is kept.
        """
        torch = self._torch
        core = self._model.model
        captured: list[NDArray[np.float32]] = []

        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            tensor = output[0] if isinstance(output, tuple) else output
            captured.append(reduce(tensor[0].to(torch.float32).numpy()))

        modules = [core.embed_tokens, *core.layers, core.norm]
        handles = [module.register_forward_hook(keep) for module in modules]
        try:
            with torch.inference_mode():
                core(input_ids=self._ids(token_ids), use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        return captured
