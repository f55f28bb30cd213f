"""The `infergate` command.

Each subcommand lives in its own module under `infergate.commands` and exposes
`register(subparsers)`; the table below is the whole command tree. A subcommand's
handler returns the process exit code.

A run imports only the module of the subcommand it names: the modules bring very
different stacks (the benchmark and calibration code pulls in numpy), and the
operator's pod is a long-lived process whose memory is a goal of its own (issue 16:
<= 200 MB at 500 deployments). Help, `--version` and an unknown word still see the
whole tree. The development commands (local cluster, Helm chart) are not here: they
are `infergate-dev`, a package of their own that no image installs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from infergate import __version__

# Each subcommand and the module under infergate.commands that adds it (a module may
# add several), in the order help lists them.
COMMANDS: dict[str, str] = {
    "crds": "crds",
    "parity": "parity",
    "fixture": "fixture",
    "serve": "serve",
    "fingerprints": "fingerprints",
    "layer-stand-in": "layer_stand_in",
    "record": "record",
    "operator": "operator",
    "promote": "control",
    "abort": "control",
    "rollback": "control",
    "status": "control",
    "diff": "control",
    "golden": "golden",
    "mirror": "mirror",
}


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules a run of `argv` needs: the named subcommand's alone, or every
    one (in table order) when the first argument names none (help, --version, a typo)."""
    first = argv[0] if argv else ""
    if first in COMMANDS:
        return (COMMANDS[first],)
    return tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(modules: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser with the subcommands of `modules` (default: all of them)."""
    parser = argparse.ArgumentParser(
        prog="infergate",
        description="Roll out LLM inference engines behind a canary parity check.",
    )
    parser.add_argument("--version", action="version", version=f"infergate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in modules if modules is not None else modules_for(()):
        module = importlib.import_module(f"infergate.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(modules_for(words))
    args = parser.parse_args(words)
    handler = args.handler
    code: int = handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
