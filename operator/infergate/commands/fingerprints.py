"""`infergate fingerprints`: serve what a vLLM side loaded, beside it in its probe pod.

vLLM has no route that says which tokenizer, chat template, generation config, weights
and numeric config it loaded. The ParityCheck's probe pod runs this server next to a
vLLM revision, with the revision's pinned engine.json and the very model directory the
engine mounts, and serves `GET /v1/parity/fingerprints` (the keys our adapters serve).

  infergate fingerprints --engine-config /etc/infergate/engine/engine.json --port 8001
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fingerprints",
        help="serve the fingerprints of a vLLM side (in its parity probe pod)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--engine-config", type=Path, required=True, metavar="ENGINE_JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from infergate.runtime.engine_config import EngineConfigError, fingerprint_settings
    from infergate.runtime.fingerprint_server import main

    try:
        settings = fingerprint_settings(json.loads(args.engine_config.read_text()))
    except (OSError, ValueError, EngineConfigError) as error:
        print(
            f"infergate fingerprints: --engine-config {args.engine_config}: {error}",
            file=sys.stderr,
        )
        return 2
    argv = ["--model", str(settings.model), "--dtype", settings.dtype]
    argv += [
        a for key, value in settings.overrides.items() for a in ("--config", f"{key}={value!r}")
    ]
    return main([*argv, "--host", args.host, "--port", str(args.port)])
