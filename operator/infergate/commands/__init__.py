"""Subcommands of the `infergate` CLI, one module per area (see `infergate.cli`)."""
