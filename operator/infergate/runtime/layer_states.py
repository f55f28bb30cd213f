"""The per-layer probe: every layer's hidden states on given token ids, bounded.

`POST /v1/parity/layer_states` (served by the adapter server for backends that implement
`LayerProbeBackend`: MindFormers and the transformers reference) takes one token-id
sequence and returns the n + 2 states of `infergate.parity.layers` (embeddings, the
output of each decoder layer, the final norm), each reduced as it is captured so the
engine never holds more than the answer:

    {"input": [ids], "positions": [0, 17, 42]}     full states at those positions
    {"input": [ids], "sketchDims": 64}             every position as its L2 norm plus a
                                                   fixed 64-dim projection (the same one
                                                   golden summaries use)
    {"input": [ids], "positions": [...], "sketchDims": 64}   both

Answer: `names` (one per state), `positions`, `states` [states, positions, hidden or
dims] and, with a sketch, `norms` [states, positions]; arrays as the server's other
float32 arrays (shape, base64 little-endian bytes). A request whose answer would exceed
`MAX_LAYER_FLOATS` floats is refused naming positions and sketchDims, never truncated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from infergate.golden.summary import SKETCH_SEED, summarize
from infergate.parity.layers import layer_state_names
from infergate.runtime.backend import BackendError
from infergate.runtime.model_config import ModelConfig

MAX_LAYER_FLOATS: Final = 1 << 24
"""Most float32 values one answer may carry (64 MiB): e.g. Qwen2.5-7B (30 states x 3584)
at 156 full positions, or 8K positions as 64-dim sketches."""
MAX_POSITIONS: Final = 65536

Reducer = Callable[[NDArray[np.float32]], NDArray[np.float32]]


@runtime_checkable
class LayerProbeBackend(Protocol):
    """A backend that can return every layer's hidden states."""

    @property
    def engine(self) -> str: ...

    @property
    def config(self) -> ModelConfig: ...

    def layer_states(self, token_ids: Sequence[int], reduce: Reducer) -> list[NDArray[np.float32]]:
        """The n + 2 states in order, each [len, hidden] float32 passed through `reduce`."""


class LayerStatesRequest(BaseModel):
    """`POST /v1/parity/layer_states`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    model: str | None = None
    input: list[int] = Field(min_length=1)
    positions: list[int] | None = Field(default=None, min_length=1, max_length=MAX_POSITIONS)
    sketch_dims: int | None = Field(default=None, alias="sketchDims", ge=8, le=1024)
    sketch_seed: int = Field(default=SKETCH_SEED, alias="sketchSeed")


@dataclass(frozen=True)
class LayerStatesPlan:
    """What one request asks for, checked against the model and the size bound."""

    names: tuple[str, ...]
    positions: tuple[int, ...]
    sketch_dims: int | None
    sketch_seed: int

    def reduce(self, states: NDArray[np.float32]) -> NDArray[np.float32]:
        """One state [len, hidden] -> [positions, hidden] or [positions, 1 + dims]."""
        chosen = np.asarray(states, dtype=np.float32)[list(self.positions)]
        if self.sketch_dims is None:
            return np.ascontiguousarray(chosen)
        summary = summarize(chosen, self.sketch_dims, self.sketch_seed)
        return np.concatenate([summary.norms[:, None], summary.sketch], axis=1)


def plan_layer_states(request: LayerStatesRequest, config: ModelConfig) -> LayerStatesPlan:
    """Check positions and size; BackendError (a 400) names the field and the bound."""
    length = len(request.input)
    if request.positions is None:
        positions = tuple(range(length))
    else:
        positions = tuple(request.positions)
        wrong = [p for p in positions if not 0 <= p < length]
        if wrong:
            raise BackendError(f"positions: {wrong[0]} is outside the input (0..{length - 1})")
        if len(set(positions)) != len(positions):
            raise BackendError("positions: each position may be asked for once")
    names = layer_state_names(config.num_hidden_layers)
    width = config.hidden_size if request.sketch_dims is None else request.sketch_dims + 1
    floats = len(names) * len(positions) * width
    if floats > MAX_LAYER_FLOATS:
        raise BackendError(
            f"positions/sketchDims: the answer would hold {floats} floats ({len(names)} states x "
            f"{len(positions)} positions x {width}); at most {MAX_LAYER_FLOATS}: ask for fewer "
            "positions or set sketchDims"
        )
    return LayerStatesPlan(names, positions, request.sketch_dims, request.sketch_seed)


def layer_states_answer(
    model: str,
    plan: LayerStatesPlan,
    states: Sequence[NDArray[np.float32]],
    encode: Callable[[NDArray[Any]], dict[str, Any]],
) -> dict[str, Any]:
    """The JSON answer; refuses a backend that returned the wrong number of states."""
    if len(states) != len(plan.names):
        raise BackendError(
            f"the engine returned {len(states)} layer states; the model has {len(plan.names)}"
        )
    stacked = np.stack(states)
    answer: dict[str, Any] = {
        "object": "layer_states",
        "model": model,
        "names": list(plan.names),
        "positions": list(plan.positions),
    }
    if plan.sketch_dims is None:
        answer["states"] = encode(stacked)
    else:
        answer["norms"] = encode(stacked[:, :, 0])
        answer["states"] = encode(stacked[:, :, 1:])
        answer["sketch"] = {"dims": plan.sketch_dims, "seed": plan.sketch_seed}
    return answer
