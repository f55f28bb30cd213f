"""An injected fault for the load checks: a vLLM logits processor whose greedy choice
changes only when the batch holds more than one sequence.

Served alone, a request is answered exactly as without the processor. When a model step
samples two or more sequences together, every row whose two best logits lie within
`MARGIN` of each other has them swapped in effect: the runner-up gets the winner's
logit plus a little, so greedy decoding picks it. That models batch-composition drift
(a kernel chosen by batch size that rounds a near-tie the other way), deterministically:
the same batch always flips the same near-ties.

vLLM v1 loads it with `--logits-processors tests.faults.batch_drift:BatchDrift`, the
repository root on the engine's PYTHONPATH. It runs inside the vLLM venv (torch, vLLM
0.32.0): never imported by the product or the dev venv's tests. The flip acts on the
sampled token only; vLLM's returned logprobs are computed before logits processors
(`logprobs_mode` raw_logprobs) and prompt logprobs never pass through them, so
teacher-forced scores stay those of the unchanged model.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

if TYPE_CHECKING:
    from vllm.config import VllmConfig

MARGIN = float(os.environ.get("INFERGATE_BATCH_DRIFT_MARGIN", "1.0"))
"""Logit gap (natural-log units) under which a near-tie flips in a batch of two or more."""


class BatchDrift(LogitsProcessor):
    """Flips near-ties of the top two logits, only in batches of more than one sequence."""

    def __init__(  # vLLM's constructor signature; the fault needs none of it
        self,
        vllm_config: VllmConfig,  # noqa: ARG002
        device: torch.device,  # noqa: ARG002
        is_pin_memory: bool,  # noqa: ARG002
    ) -> None:
        self.margin = MARGIN

    def is_argmax_invariant(self) -> bool:
        # It changes greedy choices: vLLM must apply it before argmax.
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:  # noqa: ARG002
        # Stateless: the batch's size is the logits' first dimension.
        return

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.dim() != 2 or logits.shape[0] <= 1:
            return logits
        top = torch.topk(logits, 2, dim=-1)
        gap = top.values[:, 0] - top.values[:, 1]
        rows = torch.nonzero(gap < self.margin).flatten()
        if rows.numel():
            runner_up = top.indices[rows, 1]
            logits[rows, runner_up] = top.values[rows, 0] + 1.0
        return logits
