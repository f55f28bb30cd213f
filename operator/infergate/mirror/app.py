"""The mirror's two HTTP servers: the proxy clients call, and the control API the runner calls.

Proxy (port `http`): any method and path is forwarded to a ready endpoint of the stable
Service, and the answer streamed back as it arrives, status, headers and body
untouched. The body is kept aside (up to `max_body` bytes) only while a session runs
and the route is one a copy can be made of; once the client has the whole answer, the
exchange is offered to the session, which admits or refuses it without waiting. A
copy that cannot be made (too big, not admitted, a queue full) changes nothing for
the client, and nothing of the session's work runs before the client's last byte.

Control (port `control`): `GET /mirror/health`; `POST /mirror/sessions` (a
`SessionRequest`), `GET /mirror/sessions/{id}` (counts), `GET
/mirror/sessions/{id}/result` (the session and its scored pairs), `DELETE
/mirror/sessions/{id}`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infergate.mirror.capture import Captured, route_of
from infergate.mirror.scoring import ScoredPair, SideScorer, score_copy
from infergate.mirror.session import Copy, Session, SessionRequest
from infergate.mirror.upstream import Endpoints, NotARevisionError, ServiceReads, revision_service
from infergate.runner.endpoints import (
    EndpointResolutionError,
    ignored_note,
    ready_endpoints,
    trusted_slices,
)

log = logging.getLogger(__name__)
MAX_BODY_DEFAULT = 1024 * 1024
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _forwarded(headers: Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP]


@dataclass
class Mirror:
    """The state of one mirror process: upstream endpoints, HTTP clients, sessions."""

    deployment: str
    reads: ServiceReads
    upstream: Endpoints
    max_body: int = MAX_BODY_DEFAULT
    sessions: dict[str, Session] = field(default_factory=dict)
    proxy_http: httpx.AsyncClient = field(
        default_factory=lambda: httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
    )
    # Scoring has its own connections: it never takes one a client's request could use.
    score_http: httpx.AsyncClient = field(
        default_factory=lambda: httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=10.0),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=4),
        )
    )

    def active(self) -> Session | None:
        """The session copies go to (the newest collecting one), if any."""
        live = [s for s in self.sessions.values() if s.collecting]
        return max(live, key=lambda s: s.started) if live else None

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.stop()
        await self.proxy_http.aclose()
        await self.score_http.aclose()

    # -- proxy -------------------------------------------------------------------------

    async def proxy(self, request: Request) -> Response:
        target = self.upstream.pick()
        if target is None:
            log.warning("no stable endpoint for %s: %s", request.url.path, self.upstream.problem)
            return JSONResponse(
                {"error": f"no stable endpoint: {self.upstream.problem}"}, status_code=503
            )
        body = await request.body()
        path = request.url.path
        url = target + path + (f"?{request.url.query}" if request.url.query else "")
        outgoing = self.proxy_http.build_request(
            request.method, url, headers=_forwarded(request.headers), content=body
        )
        try:
            answer = await self.proxy_http.send(outgoing, stream=True)
        except httpx.TransportError as err:
            log.warning("stable endpoint %s failed for %s: %s", target, path, err)
            return JSONResponse({"error": f"stable endpoint {target}: {err}"}, status_code=502)
        session = self.active()
        keep = session is not None and route_of(path) is not None and len(body) <= self.max_body
        return StreamingResponse(
            self._relay(answer, path, body, session if keep else None),
            status_code=answer.status_code,
            headers=dict(_forwarded(answer.headers)),
        )

    async def _relay(
        self, answer: httpx.Response, path: str, body: bytes, session: Session | None
    ) -> AsyncIterator[bytes]:
        kept: bytearray | None = bytearray() if session is not None else None
        complete = False
        try:
            async for chunk in answer.aiter_raw():
                if kept is not None:
                    if len(kept) + len(chunk) > self.max_body:
                        kept = None
                    else:
                        kept.extend(chunk)
                yield chunk
            complete = True
        finally:
            await answer.aclose()
            if session is not None and kept is not None and complete:
                session.offer(
                    Copy(
                        path,
                        body,
                        answer.status_code,
                        answer.headers.get("content-type", ""),
                        bytes(kept),
                    )
                )

    # -- control -----------------------------------------------------------------------

    async def health(self, _: Request) -> Response:
        urls = self.upstream.urls
        return JSONResponse(
            {
                "upstream": len(urls),
                "problem": self.upstream.problem,
                "sessions": len(self.sessions),
            }
        )

    async def open_session(self, request: Request) -> Response:
        try:
            asked = SessionRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        existing = self.sessions.get(asked.id)
        if existing is not None:
            return JSONResponse(existing.counts())
        try:
            service = await asyncio.to_thread(
                revision_service, self.reads, self.deployment, asked.candidate_revision
            )
            slices = await asyncio.to_thread(
                self.reads.endpoint_slices, service["metadata"]["name"]
            )
            # Copies go only to pods the cluster published for the Service: a slice
            # anyone else made could send them to a pod serving the stable model.
            trusted, ignored = trusted_slices(service, slices)
            canary = ready_endpoints(service, trusted)
        except NotARevisionError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        except EndpointResolutionError as err:
            return JSONResponse({"error": str(err)}, status_code=503)
        if not canary:
            error = f"the canary has no ready endpoint{ignored_note(ignored)}"
            return JSONResponse({"error": error}, status_code=503)
        canary_scorer = SideScorer(self.score_http, canary[0].url, asked.model)

        async def score(prompt_id: str, captured: Captured) -> ScoredPair | None:
            stable = self.upstream.pick()
            if stable is None:
                raise RuntimeError(f"no stable endpoint: {self.upstream.problem}")
            return await score_copy(
                prompt_id,
                captured,
                SideScorer(self.score_http, stable, asked.model),
                canary_scorer,
                top_logprobs=asked.top_logprobs,
            )

        for old in list(self.sessions.values()):
            if old.abandoned:
                await old.stop()
                self.sessions.pop(old.request.id, None)
        session = Session(asked, score)
        session.start()
        self.sessions[asked.id] = session
        log.info("session %s: canary %s at %s", asked.id, asked.candidate_revision, canary[0].url)
        return JSONResponse(session.counts(), status_code=201)

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(str(request.path_params["id"]))

    async def session_counts(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(session.counts())

    async def session_result(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(await asyncio.to_thread(session.result))

    async def close_session(self, request: Request) -> Response:
        session = self.sessions.pop(str(request.path_params["id"]), None)
        if session is not None:
            await session.stop()
        return Response(status_code=204)


def proxy_app(mirror: Mirror) -> Starlette:
    return Starlette(routes=[Route("/{path:path}", mirror.proxy, methods=_METHODS)])


def control_app(mirror: Mirror) -> Starlette:
    return Starlette(
        routes=[
            Route("/mirror/health", mirror.health, methods=["GET"]),
            Route("/mirror/sessions", mirror.open_session, methods=["POST"]),
            Route("/mirror/sessions/{id:path}/result", mirror.session_result, methods=["GET"]),
            Route("/mirror/sessions/{id:path}", mirror.session_counts, methods=["GET"]),
            Route("/mirror/sessions/{id:path}", mirror.close_session, methods=["DELETE"]),
        ]
    )
