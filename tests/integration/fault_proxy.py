"""A fault-injecting reverse proxy in front of the local API server, for the fault tests.

Clients (an operator process started by the test) speak plain HTTP to it on loopback;
it forwards to the API server over TLS (verifying the cluster's CA) with the client's own
headers, bearer token included, so the API server authenticates and authorizes the
client exactly as if it had come directly: RBAC and admission see the operator's
ServiceAccount, not the proxy. Watches are streamed through as they arrive.

Every exchange is logged (time, method, path, query, User-Agent, status, whether the
proxy answered it itself; with `record_reads`, the body of every GET's answer, so a test
can tell which objects a list or watch delivered), and rules decide per request, first
match wins:

- `Storm`: answer 429 Too Many Requests and 503 Service Unavailable with Retry-After, 500
  without, and 409 Conflict for updates, in turn, for most requests that are not watches,
  bounded both in count and in time;
- `Stall`: hold the n-th request that matches, tell the test, and never forward it (the
  test kills the client meanwhile: the write never reaches the API server);
- `Partition`: while on, hold every request that matches and never forward it, as a
  network partition would (the client waits until its own timeout), until healed;
- `Conflict`: answer 409 Conflict to every request that matches, as the API server answers
  a write made from a stale copy, until the test lifts it.

aiohttp serves and forwards (the asyncio HTTP stack kopf itself uses); the proxy runs its
own event loop in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Hop-by-hop headers (RFC 9110 7.6.1) and those the forwarding recomputes.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass
class Exchange:
    """One request through the proxy."""

    at: float
    """time.monotonic() when the request arrived."""
    method: str
    path: str
    query: str
    agent: str
    status: int = 0
    """The answer's status (0 while unanswered, or for a request dropped unanswered)."""
    answered: float = 0.0
    """time.monotonic() when the API server's answer reached the proxy (0: it did not, or
    the proxy answered): a forwarded write landed between `at` and this."""
    injected: bool = False
    """The proxy answered it itself (a storm's 429, 503, 500 or 409, a conflict's 409)."""
    retry_after: float | None = None
    created: str = ""
    """For a POST, the name of the object it creates: creates of several objects share the
    collection's path, so this tells one request from another."""
    received: bytearray = field(default_factory=bytearray)
    """With the proxy's `record_reads`, a GET's answer as forwarded (maybe compressed)."""
    encoding: str = ""
    """The answer's Content-Encoding."""

    def objects(self) -> Iterator[dict[str, object]]:
        """The objects a recorded list answer or watch stream delivered so far: the items of
        a list, the object of each complete watch event."""
        data = bytes(self.received)
        if self.encoding in ("gzip", "deflate"):
            # A stream cut midway decompresses as far as it goes.
            data = zlib.decompressobj(wbits=47).decompress(data)
        if not self.watch:
            with contextlib.suppress(ValueError):
                listed = json.loads(data)
                yield from (listed.get("items") or []) if isinstance(listed, dict) else []
            return
        for line in data.split(b"\n"):
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and isinstance(event.get("object"), dict):
                    yield event["object"]

    @property
    def watch(self) -> bool:
        return "watch=true" in self.query or "watch=1" in self.query

    @property
    def write(self) -> bool:
        return self.method in WRITE_METHODS


# What a storm answers in turn: the API server's throttling (429, priority and fairness)
# and unavailability (503, an aggregated API or a server shutting down) both carry
# Retry-After; a 500 (etcd timing out behind it, say) carries none.
_THROTTLED = (429, "TooManyRequests", "too many requests (injected), retry later")
_UNAVAILABLE = (
    503,
    "ServiceUnavailable",
    "the server is currently unable to handle the request (injected)",
)
_INTERNAL = (
    500,
    "InternalError",
    "an error on the server (injected): etcdserver: request timed out",
)


@dataclass
class Storm:
    """429 and 503 (with Retry-After), 500 (without) and, for updates and deletes, 409
    Conflict answers in turn, at most `count` of them and only within `seconds` of
    `start()`. Of the requests it may answer, one in `pass_every` goes through, so some
    writes land and the rest meet the storm partway through a reconcile. Watches, and
    requests `spare` accepts, pass."""

    seconds: float
    count: int
    retry_after: int = 2
    pass_every: int = 3
    spare: Callable[[Exchange], bool] = lambda _: False
    started: float | None = None
    answered: int = 0
    considered: int = 0
    updates: int = 0
    last: float = 0.0
    """When the last injected answer was given."""

    def start(self) -> None:
        self.started = time.monotonic()

    @property
    def ended(self) -> float | None:
        """When the storm ended (its time ran out or its answers were spent), if it did."""
        if self.started is None:
            return None
        if self.answered >= self.count:
            return self.last
        end = self.started + self.seconds
        return end if time.monotonic() >= end else None

    def answer(self, exchange: Exchange) -> tuple[int, dict[str, str], dict[str, object]] | None:
        if self.started is None or exchange.watch or self.spare(exchange):
            return None
        if self.answered >= self.count or exchange.at > self.started + self.seconds:
            return None
        self.considered += 1
        if self.considered % self.pass_every == 0:
            return None
        self.answered += 1
        self.last = exchange.at
        if exchange.method in {"PUT", "PATCH", "DELETE"}:
            self.updates += 1
            if self.updates % 2 == 1:
                message = "the object has been modified; please apply your changes to the latest "
                return 409, {}, _status(409, "Conflict", message + "version (injected)")
        code, reason, message = (_THROTTLED, _UNAVAILABLE, _INTERNAL)[self.answered % 3]
        body = _status(code, reason, message)
        if code == 500:
            return code, {}, body
        body["details"] = {"retryAfterSeconds": self.retry_after}
        return code, {"Retry-After": str(self.retry_after)}, body


@dataclass
class Stall:
    """Hold the `nth` request `matches` accepts, once every predicate of `after` has seen an
    answered request, in that order, and never forward it; `held` is set once one is held."""

    matches: Callable[[Exchange], bool]
    after: tuple[Callable[[Exchange], bool], ...] = ()
    nth: int = 1
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    """Set by the test once the client is dead: the held request then ends, unforwarded."""
    seen: int = 0
    passed: int = 0
    """How many of `after` have been seen."""
    taken: Exchange | None = None
    """The request held."""

    def observe(self, exchange: Exchange) -> None:
        """Every answered exchange: moves along `after`."""
        if self.passed < len(self.after) and self.after[self.passed](exchange):
            self.passed += 1

    def take(self, exchange: Exchange) -> bool:
        if self.held.is_set() or self.passed < len(self.after) or not self.matches(exchange):
            return False
        self.seen += 1
        if self.seen < self.nth:
            return False
        self.taken = exchange
        self.held.set()
        return True

    def wait(self, timeout: float) -> None:
        if not self.held.wait(timeout):
            raise AssertionError(f"no matching request was held within {timeout:.0f}s")


@dataclass
class Partition:
    """Once `start()`ed and until `heal()`ed, hold every request `matches` accepts and never
    forward it: its client waits for an answer until its own timeout, as behind a network
    partition, while the requests `matches` refuses pass (a partition of one kind of
    traffic, e.g. only the Lease's). Healing ends the held ones unforwarded (a 502, to a
    client still waiting)."""

    matches: Callable[[Exchange], bool]
    started: float | None = None
    healed: threading.Event = field(default_factory=threading.Event)
    held: list[Exchange] = field(default_factory=list)

    def start(self) -> None:
        self.started = time.monotonic()

    def heal(self) -> None:
        self.healed.set()

    def take(self, exchange: Exchange) -> bool:
        if self.started is None or self.healed.is_set() or not self.matches(exchange):
            return False
        self.held.append(exchange)
        return True


@dataclass
class Conflict:
    """Answer 409 Conflict to every request `matches` accepts (the write never reaches the
    API server) until `lift()`; `answered` counts the answers given."""

    matches: Callable[[Exchange], bool]
    answered: int = 0
    lifted: bool = False

    def lift(self) -> None:
        self.lifted = True

    def answer(self, exchange: Exchange) -> tuple[int, dict[str, str], dict[str, object]] | None:
        if self.lifted or exchange.watch or not self.matches(exchange):
            return None
        self.answered += 1
        message = "the object has been modified; please apply your changes to the latest version"
        return 409, {}, _status(409, "Conflict", message + " (injected)")


def _status(code: int, reason: str, message: str) -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def path_matches(method: str, pattern: str) -> Callable[[Exchange], bool]:
    """A predicate: this method, a path matching the regular expression `pattern`."""
    compiled = re.compile(pattern)
    return lambda e: e.method == method and compiled.search(e.path) is not None


class FaultProxy:
    """One listener on 127.0.0.1 forwarding to `upstream` (https), with fault rules."""

    def __init__(self, upstream: str, ca_file: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self.log: list[Exchange] = []
        self.storms: list[Storm] = []
        self.stalls: list[Stall] = []
        self.partitions: list[Partition] = []
        self.conflicts: list[Conflict] = []
        self.record_reads = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def release_stalled(self) -> None:
        """Let held requests end (unforwarded: their clients get a 502, if still there)."""
        with self._lock:
            for stall in self.stalls:
                stall.released.set()
            for partition in self.partitions:
                partition.heal()

    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self.log)

    def dump(self, path: Path) -> None:
        """Every exchange but watches, one a line (seconds from the first), for a post-mortem."""
        exchanges = [e for e in self.exchanges() if not e.watch]
        start = exchanges[0].at if exchanges else 0.0
        with path.open("w") as out:
            for e in exchanges:
                mark = " injected" if e.injected else ""
                out.write(f"{e.at - start:9.3f} {e.method:6} {e.status} {e.path}?{e.query}{mark}\n")

    async def _serve(self) -> None:
        # No total timeout: watches stay open for minutes.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        # Bound to port 0: the address the runner reports says which port it got.
        self.port = int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self.release_stalled()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        exchange = Exchange(
            at=time.monotonic(),
            method=request.method,
            path=request.path,
            query=request.query_string,
            agent=request.headers.get("User-Agent", ""),
        )
        if request.method == "POST" and request.can_read_body:
            with contextlib.suppress(ValueError, KeyError, AttributeError, TypeError):
                exchange.created = str(json.loads(await request.read())["metadata"]["name"])
        with self._lock:
            self.log.append(exchange)
            cut_off = next((p for p in self.partitions if p.take(exchange)), None)
            stalled = (
                next((stall for stall in self.stalls if stall.take(exchange)), None)
                if cut_off is None
                else None
            )
            injected = None
            if stalled is None and cut_off is None:
                rules: list[Storm | Conflict] = [*self.conflicts, *self.storms]
                injected = next(
                    (a for a in (r.answer(exchange) for r in rules) if a is not None), None
                )
        if cut_off is not None:
            while not cut_off.healed.is_set():
                await asyncio.sleep(0.1)
            return web.Response(status=502, text="cut off by the fault proxy and never forwarded")
        if stalled is not None:
            while not stalled.released.is_set():
                await asyncio.sleep(0.1)
            return web.Response(status=502, text="held by the fault proxy and never forwarded")
        if injected is not None:
            status, headers, body = injected
            exchange.status, exchange.injected = status, True
            if "Retry-After" in headers:
                exchange.retry_after = float(headers["Retry-After"])
            return web.json_response(body, status=status, headers=headers)
        return await self._forward(request, exchange)

    async def _forward(self, request: web.Request, exchange: Exchange) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        # aiohttp keeps a body once read (as _handle reads a POST's): read it from there.
        body = (await request.read()) or None
        try:
            async with self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body,
                ssl=self._ssl,
                allow_redirects=False,
            ) as upstream:
                answer = web.StreamResponse(
                    status=upstream.status,
                    headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP},
                )
                exchange.status = upstream.status
                exchange.answered = time.monotonic()
                exchange.encoding = upstream.headers.get("Content-Encoding", "")
                record = self.record_reads and request.method == "GET"
                self._observe(exchange)
                await answer.prepare(request)
                try:
                    async for chunk in upstream.content.iter_any():
                        if record:
                            exchange.received.extend(chunk)
                        await answer.write(chunk)
                    await answer.write_eof()
                except (ConnectionError, aiohttp.ClientConnectionResetError):
                    pass  # the client went away (a watch it closed, a process killed)
                return answer
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as error:
            if exchange.status:
                raise  # the stream broke midway: the client sees it end
            exchange.status = 502
            return web.json_response(
                _status(502, "BadGateway", f"fault proxy: upstream unreachable: {error}"),
                status=502,
            )

    def _observe(self, exchange: Exchange) -> None:
        with self._lock:
            for stall in self.stalls:
                stall.observe(exchange)


def write_kubeconfig(path: Path, server: str, token: str, namespace: str) -> Path:
    """A kubeconfig for a client of the proxy: its URL, a bearer token, a namespace."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "proxy", "cluster": {"server": server}}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [
            {
                "name": "proxy",
                "context": {"cluster": "proxy", "user": "operator", "namespace": namespace},
            }
        ],
        "current-context": "proxy",
    }
    path.write_text(json.dumps(config))
    return path
