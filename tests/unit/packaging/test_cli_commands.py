"""The `infergate` command imports only the module of the subcommand a run names."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from infergate.cli import COMMANDS, build_parser, modules_for


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("the parser has no subcommands")


def test_the_table_names_exactly_what_each_module_registers() -> None:
    added: dict[str, str] = {}
    for module in dict.fromkeys(COMMANDS.values()):
        parser = argparse.ArgumentParser()
        importlib.import_module(f"infergate.commands.{module}").register(
            parser.add_subparsers(dest="command")
        )
        for name in _subcommands(parser):
            added[name] = module
    assert added == COMMANDS


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["operator", "--leader-election"], ("operator",)),
        (["promote", "qwen"], ("control",)),
        (["golden", "list"], ("golden",)),
    ],
)
def test_a_named_subcommand_loads_its_module_alone(
    argv: list[str], expected: tuple[str, ...]
) -> None:
    assert modules_for(argv) == expected
    assert _subcommands(build_parser(expected)) == {
        name for name, module in COMMANDS.items() if module in expected
    }


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["opertor"]])
def test_help_version_and_typos_see_the_whole_tree(argv: list[str]) -> None:
    assert set(modules_for(argv)) == set(COMMANDS.values())


def test_a_typo_is_answered_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "infergate.cli", "opertor"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "invalid choice: 'opertor'" in done.stderr
    assert "operator" in done.stderr


def test_the_operator_process_loads_no_benchmark_or_cluster_stack() -> None:
    """The operator pod's memory goal: numpy (calibration, parity records) and httpx (the
    local cluster's client) stay out of the operator's process."""
    probe = (
        "import sys, infergate.cli as cli\n"
        "cli.build_parser(cli.modules_for(['operator']))\n"
        "from infergate import metrics\n"
        "from infergate.controllers import load_handlers\n"
        "load_handlers()\n"
        "print(sorted(m for m in ('numpy', 'httpx') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
