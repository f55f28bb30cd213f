"""Subcommands of the `infergate-dev` CLI, one module per area (see `infergate_dev.cli`)."""
