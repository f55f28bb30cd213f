"""`infergate fixture`: generate (or find cached) the fixture model and print its path."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fixture",
        help="generate the tiny Qwen2 fixture model (cached by generator version)",
        description=(
            "Generate the fixture model (tokenizer trained locally, weights trained briefly, "
            "safetensors) into the cache, or reuse it when present; prints its directory. "
            "Needs torch, transformers and tokenizers (the vLLM engine venv)."
        ),
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="model directory (default: $INFERGATE_CACHE/models/<generator version>)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from infergate.fixture.generate import ensure_fixture_model

    path = ensure_fixture_model(args.out)
    print(path)
    return 0
