"""Client of the per-layer probe (`POST /v1/parity/layer_states` of our adapters).

The runner asks both sides (or, for vLLM, the transformers stand-in that
`infergate.parity.layers.layer_probe_plan` names) for the same token ids and feeds the
two answers to `infergate.parity.layers.per_layer_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from numpy.typing import NDArray

from infergate.engines.client import EngineClientError, decode_float32


@dataclass(frozen=True, eq=False)
class LayerStates:
    """One side's answer: state names, positions, states [states, positions, width] and,
    for sketches, the exact norms [states, positions]."""

    names: tuple[str, ...]
    positions: tuple[int, ...]
    states: NDArray[np.float32]
    norms: NDArray[np.float32] | None
    sketch_dims: int | None


def parse_layer_states(answer: dict[str, Any]) -> LayerStates:
    """The answer's arrays, checked for the shapes the names and positions imply."""
    names = tuple(str(n) for n in answer["names"])
    positions = tuple(int(p) for p in answer["positions"])
    states = decode_float32(answer["states"])
    norms = decode_float32(answer["norms"]) if "norms" in answer else None
    sketch = answer.get("sketch")
    if states.ndim != 3 or states.shape[:2] != (len(names), len(positions)):
        raise EngineClientError(
            f"layer states: shape {states.shape} does not match {len(names)} states x "
            f"{len(positions)} positions"
        )
    if norms is not None and norms.shape != states.shape[:2]:
        raise EngineClientError(f"layer states: norms of shape {norms.shape}")
    return LayerStates(
        names, positions, states, norms, None if sketch is None else int(sketch["dims"])
    )


class LayerProbe:
    """An adapter server's per-layer probe."""

    def __init__(self, base_url: str, model: str, *, timeout: float = 600.0) -> None:
        self._model = model
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def layer_states(
        self,
        token_ids: Sequence[int],
        *,
        positions: Sequence[int] | None = None,
        sketch_dims: int | None = None,
    ) -> LayerStates:
        body: dict[str, Any] = {"model": self._model, "input": list(token_ids)}
        if positions is not None:
            body["positions"] = list(positions)
        if sketch_dims is not None:
            body["sketchDims"] = sketch_dims
        response = self._http.post("/v1/parity/layer_states", json=body)
        if response.status_code != 200:
            raise EngineClientError(
                f"POST /v1/parity/layer_states: HTTP {response.status_code}: {response.text[:500]}"
            )
        return parse_layer_states(response.json())
