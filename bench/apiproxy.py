"""A counting TLS reverse proxy in front of the API server, for one client's requests.

The API server's own `apiserver_request_total` has no user label, and the local
cluster runs it without API Priority and Fairness (whose per-FlowSchema counters could
single out a ServiceAccount), so the requests of one client are counted here instead:
the client (the operator's pod, through KUBERNETES_SERVICE_HOST/PORT) connects to this
proxy, which presents a serving certificate signed by the cluster CA for its loopback
address, reads each HTTP/1.1 request head, counts it by verb and resource, and forwards
the bytes unchanged to the API server over a TLS connection of its own. The client's
bearer token passes through, so the API server authenticates and authorizes the client
exactly as without the proxy. Responses (watch streams included) are piped back as they
come. One upstream connection per client connection keeps keep-alive as it was.

    python bench/apiproxy.py --upstream 127.0.0.1:6443 --cert C --key K --ca CA

prints one JSON line {"listen": "127.0.0.1:P", "stats": "http://127.0.0.1:S/"} and
serves until terminated; GET on the stats address answers the counts so far as JSON:
{"total", "by_verb", "by_request" ("VERB resource"), "by_agent", "watches_open",
"by_pod"}. `by_pod` splits the requests by the pod whose ServiceAccount token sent them
(the pod name a bound token carries in its claims, read without verifying: the API server
verifies it), so the requests of one replica, the Lease holder's, can be told apart.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import ssl
import sys
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

_HEAD_LIMIT = 1 << 20
_CHUNK = 1 << 16
_METHOD_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def classify(method: str, target: str) -> tuple[str, str]:
    """(verb, resource) of one request, as the API server's audit log names them.

    `resource` is "group/plural[/subresource]" ("core" for the legacy group); paths that
    name no resource (discovery, /version, /openapi) are verb "get", resource "discovery".
    """
    url = urlsplit(target)
    parts = [p for p in url.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "core", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return method.lower(), "discovery"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), "discovery"
    named = len(rest) >= 2
    resource = f"{group}/{rest[0]}" + (f"/{rest[2]}" if len(rest) >= 3 else "")
    if method == "GET":
        watch = parse_qs(url.query).get("watch", [""])[0] in ("true", "1")
        verb = "watch" if watch else ("get" if named else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _METHOD_VERB.get(method, method.lower())
    return verb, resource


class Counts:
    def __init__(self) -> None:
        self.started = time.time()
        self.by_request: Counter[str] = Counter()
        self.by_agent: Counter[str] = Counter()
        self.by_pod: dict[str, Counter[str]] = {}
        self.watches_open = 0

    def snapshot(self) -> dict[str, object]:
        by_verb: Counter[str] = Counter()
        for key, value in self.by_request.items():
            by_verb[key.split(" ", 1)[0]] += value
        return {
            "time": time.time(),
            "started": self.started,
            "total": sum(self.by_request.values()),
            "by_verb": dict(by_verb),
            "by_request": dict(self.by_request),
            "by_agent": dict(self.by_agent),
            "watches_open": self.watches_open,
            "by_pod": {pod: dict(counted) for pod, counted in self.by_pod.items()},
        }


def token_pod(authorization: bytes | None) -> str:
    """The pod a bound ServiceAccount token was issued for ("-" when none is named)."""
    if authorization is None or not authorization.lower().startswith(b"bearer "):
        return "-"
    parts = authorization[7:].strip().split(b".")
    if len(parts) != 3:  # header.payload.signature
        return "-"
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
        return str(payload["kubernetes.io"]["pod"]["name"])
    except (ValueError, KeyError, TypeError):
        return "-"


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _forward_body(
    head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    length = _header(head, b"content-length")
    if length is not None:
        writer.write(await reader.readexactly(int(length)))
        return
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                # Trailers (none in practice), then the empty line that ends the body.
                while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                    writer.write(line)
                writer.write(b"\r\n")
                return
            writer.write(await reader.readexactly(size + 2))


class Proxy:
    def __init__(self, upstream: tuple[str, int], client_ssl: ssl.SSLContext) -> None:
        self.upstream = upstream
        self.client_ssl = client_ssl
        self.counts = Counts()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.upstream
        try:
            up_reader, up_writer = await asyncio.open_connection(
                host, port, ssl=self.client_ssl, server_hostname=host, limit=_HEAD_LIMIT
            )
        except OSError:
            writer.close()
            return
        back = asyncio.create_task(_pipe(up_reader, writer))
        watching = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                verb, resource = classify(method, target)
                agent = (_header(head, b"user-agent") or b"-").decode("latin-1").split(" ")[0]
                self.counts.by_request[f"{verb} {resource}"] += 1
                self.counts.by_agent[agent] += 1
                pod = token_pod(_header(head, b"authorization"))
                self.counts.by_pod.setdefault(pod, Counter())[f"{verb} {resource}"] += 1
                if verb == "watch" and not watching:
                    watching = True
                    self.counts.watches_open += 1
                up_writer.write(head)
                await _forward_body(head, reader, up_writer)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except (ssl.SSLError, OSError, ValueError):
            pass
        finally:
            if watching:
                self.counts.watches_open -= 1
            back.cancel()
            for closing in (up_writer, writer):
                with contextlib.suppress(Exception):
                    closing.close()

    async def stats(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps(self.counts.snapshot()).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()


async def _serve(args: argparse.Namespace) -> None:
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(args.cert, args.key)
    server_ssl.set_alpn_protocols(["http/1.1"])
    client_ssl = ssl.create_default_context(cafile=args.ca)
    client_ssl.set_alpn_protocols(["http/1.1"])
    host, port = args.upstream.rsplit(":", 1)
    proxy = Proxy((host, int(port)), client_ssl)
    listen_host, listen_port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(
        proxy.handle, listen_host, int(listen_port), ssl=server_ssl, limit=_HEAD_LIMIT
    )
    stats = await asyncio.start_server(proxy.stats, listen_host, 0)
    listen = server.sockets[0].getsockname()
    stats_at = stats.sockets[0].getsockname()
    sys.stdout.write(
        json.dumps(
            {
                "listen": f"{listen[0]}:{listen[1]}",
                "stats": f"http://{stats_at[0]}:{stats_at[1]}/",
            }
        )
        + "\n"
    )
    sys.stdout.flush()
    async with server, stats:
        await asyncio.gather(server.serve_forever(), stats.serve_forever())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the API server")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on")
    parser.add_argument("--cert", required=True, help="serving certificate (PEM)")
    parser.add_argument("--key", required=True, help="its private key (PEM)")
    parser.add_argument("--ca", required=True, help="CA that signed the API server's cert")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
