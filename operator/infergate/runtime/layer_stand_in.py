"""The layer probe of a vLLM side, answered by the transformers reference as a stand-in.

vLLM returns only its last layer. Beside a vLLM side (in its parity probe pod,
`infergate.render.layer_stand_in`), this server answers `POST /v1/parity/layer_states`
as our adapters do, from the transformers reference loaded with the side's weights,
dtype and numeric overrides (its pinned engine.json).

The model is loaded on the first probe request, not at start: the runner asks only
when a check fails, so a check that passes never pays for a second copy of the model.
`GET /health` answers at once (the probe pod's readiness must not wait for a load that
may never be wanted). A load that fails is answered, with its message, to that request
and every later one; so is an engine.json the stand-in cannot honour (`refusal`), so
the report says why rather than the pod failing the check.

Requests are served one at a time (the backend is not thread-safe), in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from infergate.runtime.backend import BackendError
from infergate.runtime.layer_states import (
    LayerProbeBackend,
    LayerStatesRequest,
    layer_states_answer,
    plan_layer_states,
)
from infergate.runtime.server import DataJSONResponse, encode_array

STAND_IN_ENGINE = "transformers"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "BadRequestError", "code": status}},
        status_code=status,
    )


def _check_ids(ids: list[int], vocab: int) -> None:
    wrong = [t for t in ids if not 0 <= t < vocab]
    if wrong:
        raise BackendError(f"input: token id {wrong[0]} is outside the vocabulary (0..{vocab - 1})")


class LayerStandIn:
    """The stand-in's routes over a backend that is loaded on first use; `app` is ASGI."""

    def __init__(
        self,
        load: Callable[[], LayerProbeBackend] | None,
        served_model_name: str,
        *,
        stand_in_for: str = "vllm",
        refusal: str | None = None,
    ) -> None:
        self._load = load
        self._model = served_model_name
        self._stand_in_for = stand_in_for
        self._failed = refusal if load is not None else refusal or "no model to load"
        self._backend: LayerProbeBackend | None = None
        self._lock = asyncio.Lock()
        self.loads = 0
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/v1/parity/stand_in", self._describe, methods=["GET"]),
                Route("/v1/parity/layer_states", self._layer_states, methods=["POST"]),
            ]
        )

    async def _health(self, _request: Request) -> Response:
        return Response(status_code=200)

    async def _describe(self, _request: Request) -> Response:
        return JSONResponse(
            {
                "engine": STAND_IN_ENGINE,
                "standInFor": self._stand_in_for,
                "model": self._model,
                "loaded": self._backend is not None,
                "refusal": self._failed,
            }
        )

    async def _loaded(self) -> LayerProbeBackend:
        """The backend, loaded by the first caller; callers hold `_lock`."""
        if self._backend is not None:
            return self._backend
        if self._failed is not None or self._load is None:
            raise BackendError(f"the {STAND_IN_ENGINE} stand-in cannot answer: {self._failed}")
        load = self._load
        self.loads += 1
        try:
            self._backend = await asyncio.to_thread(load)
        except Exception as err:  # any load failure is answered, not raised
            self._failed = f"loading the model failed: {type(err).__name__}: {err}"
            raise BackendError(
                f"the {STAND_IN_ENGINE} stand-in cannot answer: {self._failed}"
            ) from err
        return self._backend

    async def _layer_states(self, request: Request) -> Response:
        try:
            body = LayerStatesRequest.model_validate(await request.json())
        except ValueError as err:
            first = err.errors()[0] if isinstance(err, ValidationError) else None
            where = ".".join(str(p) for p in first["loc"]) if first else "request body"
            return _error(400, f"{where}: {first['msg'] if first else 'not valid JSON'}")
        if body.model is not None and body.model != self._model:
            return _error(400, f"model: {body.model!r} is not served here; served: {self._model!r}")
        async with self._lock:
            try:
                backend = await self._loaded()
                _check_ids(body.input, backend.config.vocab_size)
                plan = plan_layer_states(body, backend.config)
                states = await asyncio.to_thread(backend.layer_states, body.input, plan.reduce)
                answer: dict[str, Any] = layer_states_answer(
                    self._model, plan, states, encode_array
                )
            except BackendError as err:
                return _error(400, str(err))
        answer["engine"] = STAND_IN_ENGINE
        answer["standInFor"] = self._stand_in_for
        return DataJSONResponse(answer)


def serve(stand_in: LayerStandIn, host: str, port: int) -> None:
    """Serve until interrupted (blocks)."""
    import uvicorn

    uvicorn.run(stand_in.app, host=host, port=port, log_level="warning", access_log=False)
