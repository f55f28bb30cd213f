"""The adapter server: an OpenAI-compatible subset over any `EngineBackend`.

Routes: `GET /health`, `GET /v1/models`, `POST /v1/completions` (greedy, top-k
`logprobs`, vLLM-style `prompt_logprobs` for teacher-forced scoring, token-id or text
prompts, text tokenized with the tokenizer's special tokens as vLLM does),
`POST /v1/chat/completions` (the chat rendered by the model's chat template),
`POST /tokenize`, `POST /detokenize`, `GET /metrics` (Prometheus text), and the probe
channel `POST /v1/parity/hidden_states`, `GET /v1/parity/config` (engine, dtype,
effective config and fingerprints), `GET /v1/parity/fingerprints`, and the per-layer
probe `POST /v1/parity/layer_states` (`infergate.runtime.layer_states`).

Parity extensions: each generated token's raw logit magnitude
(`logprobs.parity_logit_scale`), and with `parity_full_logprobs: N` the full next-token
distributions of the last N scored positions (base64 float32), computed a chunk of
positions at a time. Non-finite numbers (an fp16 overflow) are answered as JSON NaN /
Infinity, not refused: they are data for the parity check, never a 500.

The backend is not thread-safe and its calls block, so every model call runs in a
worker thread under one lock: requests are served one at a time, in arrival order.
Each answer of an engine route carries the seconds it spent inside the engine (lock
held, queueing not counted) in the header `X-Infergate-Engine-Seconds`, so a client can
count the engine's time for its own requests even while others use the engine too
(the runner's overhead: `infergate.accounting`).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from infergate.accounting import ENGINE_SECONDS_HEADER
from infergate.runtime.backend import BackendError, EngineBackend, GreedyOutput, top_k_rows
from infergate.runtime.layer_states import (
    LayerProbeBackend,
    LayerStatesRequest,
    layer_states_answer,
    plan_layer_states,
)
from infergate.runtime.metrics import METRICS_CONTENT_TYPE, AdapterMetrics
from infergate.runtime.protocol import (
    MAX_FULL_LOGPROB_VALUES,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    HiddenStatesRequest,
    TokenizeRequest,
)

_Req = TypeVar("_Req", bound=BaseModel)
_T = TypeVar("_T")

# The engine seconds of the request being answered (each request runs in a task of its
# own, with a copy of the context: `_answer` sets a fresh counter, `_run` adds to it).
_REQUEST_ENGINE_SECONDS: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "request_engine_seconds", default=None
)


class _BadRequestError(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class DataJSONResponse(JSONResponse):
    """JSON that carries NaN and Infinity as JSON's NaN/Infinity literals (Python's json and
    httpx read them back as floats): a broken engine's numbers are evidence, not a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=True, separators=(",", ":")
        ).encode("utf-8")


def encode_array(array: np.ndarray[Any, Any]) -> dict[str, Any]:
    """A float32 array as JSON: shape, dtype and little-endian bytes in base64."""
    data = np.ascontiguousarray(array, dtype="<f4")
    return {
        "shape": list(data.shape),
        "dtype": "float32",
        "encoding": "base64",
        "data": base64.b64encode(data.tobytes()).decode("ascii"),
    }


class AdapterServer:
    """Binds one backend to the HTTP routes; `app` is the ASGI application."""

    def __init__(self, backend: EngineBackend, served_model_name: str) -> None:
        self._backend = backend
        self._model = served_model_name
        self._lock = asyncio.Lock()
        self._metrics = AdapterMetrics()
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/version", self._version, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/detokenize", self._detokenize, methods=["POST"]),
                Route("/metrics", self._metrics_route, methods=["GET"]),
                Route("/v1/parity/hidden_states", self._hidden_states, methods=["POST"]),
                Route("/v1/parity/config", self._config, methods=["GET"]),
                Route("/v1/parity/fingerprints", self._fingerprints, methods=["GET"]),
                Route("/v1/parity/layer_states", self._layer_states, methods=["POST"]),
            ]
        )
        self._fingerprint_cache: dict[str, Any] | None = None

    # -- plumbing ---------------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T]) -> _T:
        async with self._lock:
            start = time.perf_counter()
            try:
                return await asyncio.to_thread(fn)
            finally:
                spent = time.perf_counter() - start
                self._metrics.busy_seconds += spent
                counter = _REQUEST_ENGINE_SECONDS.get()
                if counter is not None:
                    counter[0] += spent

    async def _parse(self, request: Request, model: type[_Req]) -> _Req:
        try:
            body = await request.json()
        except ValueError as exc:
            raise _BadRequestError("request body: not valid JSON") from exc
        try:
            parsed = model.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first["loc"]) or None
            message = str(first["msg"]).removeprefix("Value error, ")
            # Model-level checks name their field in the message already.
            text = f"{param}: {message}" if param else message
            raise _BadRequestError(text, param) from exc
        name = getattr(parsed, "model", None)
        if name is not None and name != self._model:
            raise _BadRequestError(
                f"model: {name!r} is not served here; served: {self._model!r}", "model"
            )
        return parsed

    async def _answer(
        self, route: str, request: Request, handler: Callable[[Request], Awaitable[Any]]
    ) -> Response:
        counter = [0.0]
        _REQUEST_ENGINE_SECONDS.set(counter)
        try:
            body = await handler(request)
        except _BadRequestError as exc:
            self._metrics.count(route, 400)
            return _error(400, str(exc), exc.param)
        except BackendError as exc:
            self._metrics.count(route, 400)
            return _error(400, str(exc), None)
        self._metrics.count(route, 200)
        return DataJSONResponse(body, headers={ENGINE_SECONDS_HEADER: f"{counter[0]:.6f}"})

    # -- routes -----------------------------------------------------------------------

    async def _health(self, _request: Request) -> Response:
        self._metrics.count("/health", 200)
        return Response(status_code=200)

    async def _version(self, _request: Request) -> Response:
        self._metrics.count("/version", 200)
        return JSONResponse({"version": self._backend.engine_version})

    async def _models(self, _request: Request) -> Response:
        self._metrics.count("/v1/models", 200)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self._model,
                        "object": "model",
                        "created": int(self._metrics.started),
                        "owned_by": "infergate",
                        "root": self._model,
                        "max_model_len": self._backend.max_model_len,
                    }
                ],
            }
        )

    async def _metrics_route(self, _request: Request) -> Response:
        text = self._metrics.render(self._backend.engine, self._model)
        self._metrics.count("/metrics", 200)
        return Response(text, media_type=METRICS_CONTENT_TYPE)

    async def _fingerprint_values(self) -> dict[str, Any]:
        if self._fingerprint_cache is None:
            # Digests read every weight byte once; later answers come from memory.
            self._fingerprint_cache = await self._run(self._backend.fingerprints)
        return self._fingerprint_cache

    async def _config(self, _request: Request) -> Response:
        self._metrics.count("/v1/parity/config", 200)
        backend = self._backend
        return DataJSONResponse(
            {
                "engine": backend.engine,
                "engine_version": backend.engine_version,
                "dtype": backend.dtype,
                "model": self._model,
                "effective_config": backend.effective_config(),
                "fingerprints": await self._fingerprint_values(),
            }
        )

    async def _fingerprints(self, _request: Request) -> Response:
        self._metrics.count("/v1/parity/fingerprints", 200)
        return DataJSONResponse(await self._fingerprint_values())

    async def _tokenize(self, request: Request) -> Response:
        async def handle(req: Request) -> Any:
            body = await self._parse(req, TokenizeRequest)
            backend = self._backend
            if body.messages is not None:
                chat = [m.model_dump() for m in body.messages]
                text = await self._run(lambda: backend.render_chat(chat))
                special = bool(body.add_special_tokens)
            else:
                text = body.prompt or ""
                special = body.add_special_tokens is not False
            tokens = await self._run(lambda: backend.tokenize(text, special))
            return {
                "tokens": tokens,
                "count": len(tokens),
                "max_model_len": self._backend.max_model_len,
            }

        return await self._answer("/tokenize", request, handle)

    async def _detokenize(self, request: Request) -> Response:
        async def handle(req: Request) -> Any:
            body = await self._parse(req, DetokenizeRequest)
            return {"prompt": await self._run(lambda: self._backend.detokenize(body.tokens))}

        return await self._answer("/detokenize", request, handle)

    async def _hidden_states(self, request: Request) -> Response:
        async def handle(req: Request) -> Any:
            body = await self._parse(req, HiddenStatesRequest)
            try:
                sequences = body.sequences()
            except ValueError as exc:
                raise _BadRequestError(str(exc), "input") from exc
            data = []
            for index, ids in enumerate(sequences):
                self._check_ids(ids, extra=0, param="input")
                states = await self._run(lambda ids=ids: self._backend.hidden_states(ids))  # type: ignore[misc]
                self._metrics.prompt_tokens += len(ids)
                data.append({"index": index, "object": "hidden_states", **encode_array(states)})
            return {"object": "list", "model": self._model, "data": data}

        return await self._answer("/v1/parity/hidden_states", request, handle)

    async def _layer_states(self, request: Request) -> Response:
        """Every layer's hidden states, reduced as captured (`infergate.runtime.layer_states`)."""

        async def handle(req: Request) -> Any:
            body = await self._parse(req, LayerStatesRequest)
            backend = self._backend
            if not isinstance(backend, LayerProbeBackend):
                raise _BadRequestError(
                    f"{backend.engine} does not serve per-layer hidden states", "input"
                )
            self._check_ids(body.input, extra=0, param="input")
            plan = plan_layer_states(body, backend.config)
            states = await self._run(lambda: backend.layer_states(body.input, plan.reduce))
            self._metrics.prompt_tokens += len(body.input)
            return layer_states_answer(self._model, plan, states, encode_array)

        return await self._answer("/v1/parity/layer_states", request, handle)

    async def _completions(self, request: Request) -> Response:
        async def handle(req: Request) -> Any:
            body = await self._parse(req, CompletionRequest)
            try:
                prompts = body.prompts()
            except ValueError as exc:
                raise _BadRequestError(str(exc), "prompt") from exc
            choices = []
            prompt_total = 0
            completion_total = 0
            special = body.add_special_tokens
            for index, prompt in enumerate(prompts):
                ids = (
                    await self._run(lambda p=prompt: self._backend.tokenize(p, special))  # type: ignore[misc]
                    if isinstance(prompt, str)
                    else list(prompt)
                )
                self._check_ids(ids, extra=body.max_tokens, param="prompt")
                choice = await self._complete_one(index, ids, body)
                prompt_total += len(ids)
                completion_total += len(choice["token_ids"])
                if not body.return_token_ids:
                    del choice["token_ids"], choice["prompt_token_ids"]
                choices.append(choice)
            self._metrics.prompt_tokens += prompt_total
            self._metrics.generation_tokens += completion_total
            return {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self._model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_total,
                    "completion_tokens": completion_total,
                    "total_tokens": prompt_total + completion_total,
                },
            }

        return await self._answer("/v1/completions", request, handle)

    async def _chat(self, request: Request) -> Response:
        async def handle(req: Request) -> Any:
            body = await self._parse(req, ChatCompletionRequest)
            backend = self._backend
            chat = [m.model_dump() for m in body.messages]
            text = await self._run(lambda: backend.render_chat(chat))
            ids = await self._run(lambda: backend.tokenize(text, body.add_special_tokens))
            self._check_ids(ids, extra=body.tokens, param="messages")
            k = body.top_logprobs or 0 if body.logprobs else 0
            out = await self._run(
                lambda: backend.generate_greedy(ids, body.tokens, k, ignore_eos=body.ignore_eos)
            )
            self._metrics.prompt_tokens += len(ids)
            self._metrics.generation_tokens += len(out.token_ids)
            as_ids = body.return_tokens_as_token_ids
            choice: dict[str, Any] = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": await self._run(lambda: backend.detokenize(out.token_ids)),
                },
                "logprobs": self._chat_logprobs(out, as_ids) if body.logprobs else None,
                "finish_reason": out.finish_reason,
                "stop_reason": None,
            }
            answer: dict[str, Any] = {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self._model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": len(out.token_ids),
                    "total_tokens": len(ids) + len(out.token_ids),
                },
            }
            if body.return_token_ids:
                choice["token_ids"] = out.token_ids
                answer["prompt_token_ids"] = ids
            return answer

        return await self._answer("/v1/chat/completions", request, handle)

    def _chat_logprobs(self, out: GreedyOutput, as_ids: bool) -> dict[str, Any]:
        content = [
            {
                "token": self._token_name(token, as_ids),
                "logprob": logprob,
                "bytes": None,
                "top_logprobs": [
                    {"token": self._token_name(int(t), as_ids), "logprob": float(lp), "bytes": None}
                    for t, lp in zip(top_ids, top_lps, strict=True)
                ],
            }
            for token, logprob, top_ids, top_lps in zip(
                out.token_ids, out.chosen_logprobs, out.top_ids, out.top_logprobs, strict=True
            )
        ]
        return {"content": content, "parity_logit_scale": out.logit_scale}

    # -- helpers ----------------------------------------------------------------------

    def _check_ids(self, ids: Sequence[int], *, extra: int, param: str) -> None:
        if not ids:
            raise _BadRequestError(f"{param}: the prompt has no tokens", param)
        limit = self._backend.max_model_len
        if len(ids) + extra > limit:
            raise _BadRequestError(
                f"{param}: {len(ids)} prompt tokens + max_tokens {extra} exceed the "
                f"maximum model length {limit}",
                param,
            )

    def _token_name(self, token_id: int, as_ids: bool) -> str:
        return f"token_id:{token_id}" if as_ids else self._backend.token_text(token_id)

    async def _complete_one(
        self, index: int, ids: list[int], body: CompletionRequest
    ) -> dict[str, Any]:
        backend = self._backend
        k = body.logprobs or 0
        out = await self._run(
            lambda: backend.generate_greedy(ids, body.max_tokens, k, ignore_eos=body.ignore_eos)
        )
        as_ids = body.return_tokens_as_token_ids
        choice: dict[str, Any] = {
            "index": index,
            "text": await self._run(lambda: backend.detokenize(out.token_ids)),
            "finish_reason": out.finish_reason,
            "stop_reason": None,
            "token_ids": out.token_ids,
            "prompt_token_ids": ids,
            "logprobs": None,
            "prompt_logprobs": None,
        }
        if body.logprobs is not None:
            choice["logprobs"] = {
                "tokens": [self._token_name(t, as_ids) for t in out.token_ids],
                "token_logprobs": out.chosen_logprobs,
                "top_logprobs": [
                    {
                        self._token_name(int(t), as_ids): float(lp)
                        for t, lp in zip(top_ids, top_lps, strict=True)
                    }
                    for top_ids, top_lps in zip(out.top_ids, out.top_logprobs, strict=True)
                ],
                "text_offset": [],
                "parity_logit_scale": out.logit_scale,
            }
        if body.prompt_logprobs is not None:
            full = body.parity_full_logprobs or 0
            if full > len(ids) - 1:
                raise _BadRequestError(
                    f"parity_full_logprobs: {full} positions asked, the prompt scores "
                    f"{len(ids) - 1}",
                    "parity_full_logprobs",
                )
            if full * self._vocab() > MAX_FULL_LOGPROB_VALUES:
                raise _BadRequestError(
                    f"parity_full_logprobs: {full} positions x {self._vocab()} tokens exceed "
                    f"{MAX_FULL_LOGPROB_VALUES} values; ask for fewer positions",
                    "parity_full_logprobs",
                )
            entries, rows = await self._run(
                lambda: self._prompt_logprobs(ids, body.prompt_logprobs or 0, full)
            )
            choice["prompt_logprobs"] = entries
            if rows is not None:
                choice["parity_full_logprobs"] = encode_array(rows)
        return choice

    def _vocab(self) -> int:
        vocab = self._backend.effective_config().get("vocab_size")
        return int(vocab) if isinstance(vocab, int) else 1

    def _prompt_logprobs(
        self, ids: list[int], k: int, full: int
    ) -> tuple[list[dict[str, dict[str, Any]] | None], np.ndarray[Any, Any] | None]:
        """vLLM's shape: None for position 0, then {id: {logprob, rank, decoded_token}}.

        Rows come a chunk of positions at a time; the last `full` rows are also kept whole.
        """
        result: list[dict[str, dict[str, Any]] | None] = [None]
        kept: list[np.ndarray[Any, Any]] = []
        first_full = len(ids) - 1 - full
        for start, rows in self._backend.prompt_logprob_chunks(ids):
            top_ids, top_lps = top_k_rows(rows, k)
            for offset, row in enumerate(rows):
                pos = start + offset + 1
                target = ids[pos]
                entries = {
                    str(target): {
                        "logprob": float(row[target]),
                        "rank": int((row > row[target]).sum()) + 1,
                        "decoded_token": self._backend.token_text(target),
                    }
                }
                for rank, (tid, lp) in enumerate(
                    zip(top_ids[offset], top_lps[offset], strict=True)
                ):
                    entries.setdefault(
                        str(int(tid)),
                        {
                            "logprob": float(lp),
                            "rank": rank + 1,
                            "decoded_token": self._backend.token_text(int(tid)),
                        },
                    )
                result.append(entries)
            if full and start + rows.shape[0] > first_full:
                kept.append(rows[max(first_full - start, 0) :].copy())
        return result, (np.concatenate(kept) if kept else None)


def _error(status: int, message: str, param: str | None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "BadRequestError", "param": param, "code": status}},
        status_code=status,
    )


def serve(backend: EngineBackend, served_model_name: str, host: str, port: int) -> None:
    """Serve `backend` until interrupted (blocks)."""
    import uvicorn

    server = AdapterServer(backend, served_model_name)
    uvicorn.run(server.app, host=host, port=port, log_level="warning", access_log=False)
