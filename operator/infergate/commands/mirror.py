"""`infergate mirror serve`: the mirroring proxy before an InferenceDeployment's stable Service.

infergate mirror serve --deployment NAME --namespace NS [--host H] [--port 8000]
                       [--control-port 8001] [--upstream SERVICE] [--kubeconfig PATH]

Clients call port `--port`; every request goes to a ready endpoint of the stable
Service (default: the deployment's own, `NAME`) and its answer comes back untouched.
A `source: shadow` ParityCheck's runner opens a session on `--control-port`; while it
runs, a sampled share of finished exchanges is scored on the canary (see
`infergate.mirror`). What the operator renders runs this in the operator's image.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uvicorn import Server

    from infergate.mirror.app import Mirror


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="the mirroring proxy of shadow parity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="mirror_command", metavar="COMMAND", required=True)
    serve = commands.add_parser("serve", help="run the proxy and its control API")
    serve.add_argument("--deployment", required=True, help="the InferenceDeployment's name")
    serve.add_argument("--namespace", required=True)
    serve.add_argument("--upstream", default=None, help="Service to forward to (default: NAME)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--control-port", type=int, default=8001)
    serve.add_argument("--max-body-bytes", type=int, default=1024 * 1024)
    serve.add_argument("--kubeconfig", default=None, help="default: in-cluster, then $KUBECONFIG")
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_serve(args))
    return 0


async def _serve(args: argparse.Namespace) -> None:
    from infergate.kube.client import KubeClient
    from infergate.kube.paritycheck_api import CheckClient
    from infergate.mirror.app import Mirror
    from infergate.mirror.upstream import Endpoints

    reads = CheckClient(KubeClient.from_environment(args.kubeconfig), args.namespace)
    upstream = Endpoints(reads, args.upstream or args.deployment)
    mirror = Mirror(args.deployment, reads, upstream, max_body=args.max_body_bytes)
    await serve_mirror(mirror, mirror_servers(mirror, args.host, args.port, args.control_port))


def mirror_servers(mirror: Mirror, host: str, port: int, control_port: int) -> list[Server]:
    """The proxy's and the control API's servers, as a mirror pod runs them (a benchmark
    runs the same ones before local engines; set `should_exit` on each to stop them)."""
    import uvicorn

    from infergate.mirror.app import control_app, proxy_app

    return [
        uvicorn.Server(
            uvicorn.Config(
                app,
                host=host,
                port=listen,
                log_level="warning",
                access_log=False,
                # The proxy holds a connection per client; keep idle ones a while.
                timeout_keep_alive=30,
            )
        )
        for app, listen in ((proxy_app(mirror), port), (control_app(mirror), control_port))
    ]


async def serve_mirror(mirror: Mirror, servers: list[Server]) -> None:
    """Read the stable endpoints once, keep them fresh, serve until the servers exit."""
    await asyncio.to_thread(mirror.upstream.read)
    mirror.upstream.start()
    try:
        await asyncio.gather(*(server.serve() for server in servers))
    finally:
        await mirror.upstream.stop()
        await mirror.close()
