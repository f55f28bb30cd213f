"""An injected fault for the performance checks: a vLLM logits processor that makes every
model step a fixed few milliseconds longer and changes nothing else.

It models a slower kernel or a slower card: the same answers, token for token, at a lower
throughput. The processor waits `STEP_MS` milliseconds in each step that samples tokens
and returns the logits untouched, so greedy choices, returned logprobs and prompt
logprobs are those of the unchanged model. The wait sleeps rather than spins, so the
engine it slows takes no CPU from an engine beside it.

vLLM v1 loads it with `--logits-processors tests.faults.slow_step:SlowStep`, the
repository root on the engine's PYTHONPATH. It runs inside the vLLM venv (torch, vLLM
0.32.0): never imported by the product or the dev venv's tests.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

STEP_MS = float(os.environ.get("INFERGATE_SLOW_STEP_MS", "10"))
"""Milliseconds added to each model step that samples."""


class SlowStep(LogitsProcessor):
    """Waits a fixed time in every sampling step; the logits pass through unchanged."""

    def __init__(  # vLLM's constructor signature; the fault needs none of it
        self,
        vllm_config: VllmConfig,  # noqa: ARG002
        device: torch.device,  # noqa: ARG002
        is_pin_memory: bool,  # noqa: ARG002
    ) -> None:
        self.seconds = STEP_MS / 1000.0

    def is_argmax_invariant(self) -> bool:
        # vLLM skips argmax-invariant processors in all-greedy batches; the delay must apply
        # to every step, greedy or sampled, so it claims not to be (its logits are unchanged).
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:  # noqa: ARG002
        return

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return logits
