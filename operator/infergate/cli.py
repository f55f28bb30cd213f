"""The `infergate` command.

Each subcommand lives in its own module under `infergate.commands` and exposes
`register(subparsers)`; the module list below is the whole command tree. A
subcommand's handler returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from infergate import __version__

# Modules under infergate.commands, each adding one or more subcommands.
_COMMAND_MODULES: tuple[str, ...] = (
    "localcluster",
    "crds",
    "chart",
    "parity",
    "fixture",
    "serve",
    "fingerprints",
    "record",
    "operator",
    "control",
    "golden",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infergate",
        description="Roll out LLM inference engines behind a canary parity check.",
    )
    parser.add_argument("--version", action="version", version=f"infergate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        module = importlib.import_module(f"infergate.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    code: int = handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
