"""MindFormers on MindSpore as an `EngineBackend`.

The Qwen2 weights of a Hugging Face directory are converted to MindFormers names at
load time (`mindformers_weights`) and loaded into `mindformers.LlamaForCausalLM` with
`qkv_has_bias=True`. On CPU the model runs only with `use_rope_slice=True,
fused_rms_norm=False, use_flash_attention=False` in PyNative mode, and MindFormers'
`generate` fails (no ArgMaxExt CPU kernel), so decoding is our own greedy loop over
full forward passes (`use_past=False`: the CPU incremental path fails too).

Memory: MindSpore's CPU attention materialises several [len, len] tensors and its
memory pool never shrinks; at 8.6K tokens a float16 server grows past 16 GiB (float32
stays near 12 GiB). Restart the server between long prompts where memory is tight.

Precision follows MindFormers' practice: compute and parameters in the requested
dtype, RMSNorm, softmax and rotary embedding in float32. bfloat16 does not run on
MindSpore's CPU kernels; on CPU it is refused with a clear error rather than silently
replaced (float16 is the low-precision case there).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from infergate.runtime.backend import (
    PROMPT_LOGPROB_CHUNK,
    BackendError,
    GreedyLoop,
    GreedyOutput,
    check_dtype,
    log_softmax,
)
from infergate.runtime.loaded_model import LoadedModel
from infergate.runtime.mindformers_weights import convert_qwen2_weights


class MindFormersBackend(LoadedModel):
    """A Qwen2 model served by MindFormers' LlamaForCausalLM."""

    def __init__(
        self,
        model_dir: Path,
        dtype: str,
        overrides: Mapping[str, float],
        *,
        device: str = "CPU",
        seed: int = 42,
        max_model_len: int | None = None,
    ) -> None:
        check_dtype(dtype)
        if device == "CPU" and dtype == "bfloat16":
            raise BackendError(
                "dtype: 'bfloat16' is not supported by MindSpore's CPU kernels "
                "(Sub has no BFloat16 CPU kernel); allowed on CPU: float32, float16. "
                "Use float16 as MindFormers' low-precision case on CPU, or run on Ascend."
            )
        # MindFormers decides "pynative" from this variable, not from the MindSpore
        # context; without it the causal mask is not cut to the sequence length.
        os.environ["ENFORCE_EAGER"] = "true"
        # MindFormers writes its log files under ./output unless told where.
        os.environ.setdefault(
            "LOCAL_DEFAULT_PATH", str(Path(tempfile.gettempdir()) / "infergate-mindformers")
        )
        import mindspore as ms

        ms.set_device(device)
        # On CPU, ops run one after another (pynative_synchronize): the asynchronous launch
        # pipeline's threads cost more than the fixture's kernels on a small machine. One
        # forward of 120 tokens took 0.06 s instead of 0.3 s on 2 cores, and hidden
        # states, prompt logprobs and greedy tokens were bit-identical in both modes (fp16
        # and fp32). Ascend keeps the asynchronous launch.
        ms.set_context(mode=ms.PYNATIVE_MODE, pynative_synchronize=device == "CPU")
        ms.set_seed(seed)
        self._ms = ms
        super().__init__(model_dir, dtype, overrides, max_model_len)
        self._last: tuple[tuple[int, ...], Any] | None = None
        self._net = self._build(model_dir)

    def _build(self, model_dir: Path) -> Any:
        from mindformers import LlamaConfig, LlamaForCausalLM
        from safetensors.numpy import load_file

        cfg = self._config
        ms_config = LlamaConfig(
            batch_size=1,
            seq_length=self._max_len,
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_hidden_layers,
            num_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads,
            intermediate_size=cfg.intermediate_size,
            max_position_embedding=cfg.max_position_embeddings,
            vocab_size=cfg.vocab_size,
            rms_norm_eps=cfg.rms_norm_eps,
            theta=cfg.rope_theta,
            qkv_has_bias=True,
            attn_proj_has_bias=False,
            tie_word_embeddings=cfg.tie_word_embeddings,
            compute_dtype=self._dtype,
            param_init_type=self._dtype,
            layernorm_compute_type="float32",
            softmax_compute_type="float32",
            rotary_dtype="float32",
            use_past=False,
            use_rope_slice=True,
            fused_rms_norm=False,
            use_flash_attention=False,
            # MindFormers masks every input token equal to pad_token_id out of attention.
            # Qwen2 pads with its end-of-text token, which also appears inside real
            # sequences; batches here are one unpadded sequence, so no id is padding.
            pad_token_id=-1,
            eos_token_id=cfg.eos_token_id if cfg.eos_token_id is not None else 0,
            checkpoint_name_or_path="",
        )
        net = LlamaForCausalLM(ms_config)
        net.set_train(False)
        weights: dict[str, NDArray[Any]] = {}
        for path in sorted(model_dir.glob("*.safetensors")):
            weights.update(load_file(str(path)))
        if not weights:
            raise BackendError(f"model: {model_dir} has no *.safetensors weights")
        converted = convert_qwen2_weights(weights, cfg.num_hidden_layers)
        net_params = {p.name: p for p in net.get_parameters()}
        expected = set(net_params)
        missing = sorted(expected - set(converted))
        unused = sorted(set(converted) - expected)
        if missing or unused:
            raise BackendError(
                f"MindFormers weights: parameters without weights {missing[:5]}, weights "
                f"without parameters {unused[:5]}"
            )
        # Each weight in the dtype MindFormers gave its parameter: matmul weights in the
        # compute dtype, norm weights in float32 (layernorm_compute_type).
        params = {
            name: self._ms.Parameter(
                self._ms.Tensor(value, dtype=net_params[name].dtype), name=name
            )
            for name, value in converted.items()
        }
        not_loaded, _ = self._ms.load_param_into_net(net, params, strict_load=True)
        if not_loaded:
            raise BackendError(f"MindFormers weights: not loaded into the model: {not_loaded[:5]}")
        return net

    # -- EngineBackend ----------------------------------------------------------------

    @property
    def engine(self) -> str:
        return "mindformers"

    @property
    def engine_version(self) -> str:
        return (
            f"mindformers {metadata.version('mindformers')} / "
            f"mindspore {metadata.version('mindspore')}"
        )

    def _hidden(self, token_ids: Sequence[int]) -> Any:
        # Without a KV cache every call is a full forward pass (22 s for 8.6K tokens on
        # two CPU cores); scoring and the hidden-state probe of one sequence share one.
        key = tuple(token_ids)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        ms = self._ms
        tokens = ms.Tensor(np.asarray([list(token_ids)], dtype=np.int32))
        hidden = self._net.model(tokens)
        self._last = (key, hidden)
        return hidden

    def _logits(self, hidden: Any) -> NDArray[np.float32]:
        logits = self._net.lm_head(hidden)
        out: NDArray[np.float32] = logits.astype(self._ms.float32).asnumpy()
        return out

    def generate_greedy(
        self, prompt: Sequence[int], max_tokens: int, top_k: int, *, ignore_eos: bool
    ) -> GreedyOutput:
        loop = GreedyLoop(max_tokens, top_k, self.eos_token_id)
        sequence = list(prompt)
        going = max_tokens > 0
        while going:
            tokens = self._ms.Tensor(np.asarray([sequence], dtype=np.int32))
            last = self._net.model(tokens)[:, -1:, :]
            raw = self._logits(last).reshape(1, -1)
            row = log_softmax(raw)[0]
            going = loop.push(row, ignore_eos=ignore_eos, logits=raw[0])
            sequence.append(loop.tokens[-1])
        return loop.result()

    def prompt_logprob_chunks(
        self, token_ids: Sequence[int], first_row: int = 0, chunk: int = PROMPT_LOGPROB_CHUNK
    ) -> Iterator[tuple[int, NDArray[np.float32]]]:
        hidden = self._hidden(token_ids)
        rows = len(token_ids) - 1
        for start in range(max(first_row, 0), rows, chunk):
            stop = min(start + chunk, rows)
            yield start, log_softmax(self._logits(hidden[:, start:stop, :])[0])

    def hidden_states(self, token_ids: Sequence[int]) -> NDArray[np.float32]:
        hidden = self._hidden(token_ids)
        out: NDArray[np.float32] = hidden.astype(self._ms.float32).asnumpy()[0]
        return out

    def layer_states(
        self, token_ids: Sequence[int], reduce: Callable[[NDArray[np.float32]], NDArray[np.float32]]
    ) -> list[NDArray[np.float32]]:
        """Embeddings, each decoder layer's output, the final norm's output, each reduced.

        Forward hooks on the model's cells (PyNative) capture each state as the forward
        pass produces it; only the reduced float32 copy is kept.
        """
        ms = self._ms
        core = self._net.model
        captured: list[NDArray[np.float32]] = []

        def keep(_cell: Any, _args: Any, output: Any) -> None:
            tensor = output[0] if isinstance(output, tuple) else output
            values = tensor.astype(ms.float32).asnumpy()
            captured.append(reduce(values.reshape(-1, values.shape[-1])))

        cells = [core.tok_embeddings, *core.layers, core.norm_out]
        handles = [cell.register_forward_hook(keep) for cell in cells]
        try:
            core(ms.Tensor(np.asarray([list(token_ids)], dtype=np.int32)))
        finally:
            for handle in handles:
                handle.remove()
        return captured
