"""`infergate layer-stand-in`: the layer probe of a vLLM side, from the transformers reference.

Runs beside a vLLM revision in its parity probe pod (operator/infergate/render/
layer_stand_in.py), in the side's vLLM image with the infergate runtime, and reads the
revision's pinned engine.json: the model directory, dtype and numeric overrides the
engine loaded. It answers `POST /v1/parity/layer_states` as our adapters do, loading
the model on the first request only.

  infergate layer-stand-in --engine-config /etc/infergate/engine/engine.json --port 8002
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "layer-stand-in",
        help="answer the layer probe for a vLLM side (in its parity probe pod)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--engine-config", type=Path, required=True, metavar="ENGINE_JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from infergate.runtime.engine_config import EngineConfigError, stand_in_settings
    from infergate.runtime.layer_stand_in import LayerStandIn, serve

    try:
        config = json.loads(args.engine_config.read_text())
    except (OSError, ValueError) as error:
        print(f"infergate layer-stand-in: --engine-config {args.engine_config}: {error}",
              file=sys.stderr)  # fmt: skip
        return 2
    name = str(config.get("servedModelName") or "model")
    try:
        settings = stand_in_settings(config)
    except (ValueError, EngineConfigError) as error:
        # Served as a refusal, not an exit: the probe pod (and so the check) must not fail
        # because the stand-in, which only a failed check ever asks, cannot load.
        print(f"infergate layer-stand-in: refusing every request: {error}", file=sys.stderr)
        serve(LayerStandIn(None, name, refusal=str(error)), args.host, args.port)
        return 0

    def load() -> Any:
        from infergate.runtime.transformers_backend import TransformersBackend

        return TransformersBackend(
            settings.model,
            settings.dtype,
            settings.overrides,
            seed=settings.seed,
            max_model_len=settings.max_model_len,
        )

    serve(LayerStandIn(load, settings.served_model_name), args.host, args.port)
    return 0
