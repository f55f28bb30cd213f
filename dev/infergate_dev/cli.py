"""The `infergate-dev` command: the local cluster and the Helm chart generator.

`infergate-dev localcluster up|down|status|show|prometheus` runs the local test
cluster; `infergate-dev chart --out|--check DIR` writes or checks the Helm chart
generated from manifests/. Each subcommand lives in its own module under
`infergate_dev.commands` and exposes `register(subparsers)`; a handler returns the
process exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from infergate import __version__
from infergate_dev.commands import chart, localcluster


def build_parser() -> argparse.ArgumentParser:
    """The parser with every development subcommand."""
    parser = argparse.ArgumentParser(
        prog="infergate-dev",
        description="Development machinery of infergate: the local cluster, the Helm chart.",
    )
    parser.add_argument("--version", action="version", version=f"infergate-dev {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    localcluster.register(subparsers)
    chart.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
