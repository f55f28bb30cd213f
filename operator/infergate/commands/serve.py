"""`infergate serve`: run one engine's server on this machine.

`--engine mindformers|transformers` serves our runtime adapter (OpenAI-compatible
subset plus the hidden-state probe); `--engine vllm` replaces this process with vLLM's
own OpenAI server, unmodified, given the same knobs as flags (`--probe` switches it to
the pooling runner that serves hidden states on /pooling). Run it with the engine
venv's Python: `$VENV/bin/python -m infergate.cli serve ...`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from infergate.runtime.backend import (
    ALLOWED_DTYPES,
    BackendError,
    check_dtype,
    parse_config_overrides,
)

_ENGINES = ("vllm", "mindformers", "transformers")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve one engine (vLLM, MindFormers adapter or transformers adapter)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--engine", required=True, choices=_ENGINES)
    parser.add_argument(
        "--engine-config",
        type=Path,
        default=None,
        metavar="ENGINE_JSON",
        help="the pinned engine.json an engine pod mounts from its revision's ConfigMap; "
        "gives the model, dtype, max length, seed, served name and numeric overrides",
    )
    parser.add_argument("--model", type=Path, help="model directory (HF layout)")
    parser.add_argument("--dtype", choices=ALLOWED_DTYPES)
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="numeric override: rms_norm_eps or rope_theta (repeatable)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None, help="default: the directory name")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--probe", action="store_true", help="vllm only: the pooling runner (hidden states)"
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.engine_config is not None:
            _apply_engine_config(args)
        _require_model(args)
        overrides = parse_config_overrides(args.config)
        name = args.served_model_name or args.model.name
        if args.engine == "vllm":
            _exec_vllm(args, overrides, name)
        backend = _backend(args, overrides)
    except BackendError as exc:
        print(f"infergate serve: {exc}", file=sys.stderr)
        return 2
    from infergate.runtime.server import serve

    serve(backend, name, args.host, args.port)
    return 0


def _require_model(args: argparse.Namespace) -> None:
    if args.model is None or args.dtype is None:
        raise BackendError("--model and --dtype are required unless --engine-config gives them")


def _apply_engine_config(args: argparse.Namespace) -> None:
    """Fill the flags from the pinned engine.json; flags given explicitly are errors."""
    import json

    from infergate.runtime.engine_config import EngineConfigError, serve_settings

    try:
        settings = serve_settings(json.loads(args.engine_config.read_text()))
    except (OSError, ValueError, EngineConfigError) as exc:
        raise BackendError(f"--engine-config {args.engine_config}: {exc}") from exc
    if args.model is not None or args.dtype is not None or args.config:
        raise BackendError("--engine-config pins the model, dtype and config; drop those flags")
    args.model = settings.model
    args.dtype = settings.dtype
    args.config = [f"{key}={value}" for key, value in settings.overrides.items()]
    args.max_model_len = args.max_model_len or settings.max_model_len
    args.seed = settings.seed
    args.served_model_name = args.served_model_name or settings.served_model_name
    for note in settings.notes:
        print(f"infergate serve: {note}", file=sys.stderr)


def _backend(args: argparse.Namespace, overrides: dict[str, float]) -> Any:
    if args.engine == "mindformers":
        from infergate.runtime.mindformers_backend import MindFormersBackend

        return MindFormersBackend(
            args.model, args.dtype, overrides, seed=args.seed, max_model_len=args.max_model_len
        )
    from infergate.runtime.transformers_backend import TransformersBackend

    return TransformersBackend(
        args.model, args.dtype, overrides, seed=args.seed, max_model_len=args.max_model_len
    )


# What a CPU machine needs beside the rendered flags (the local executor runs the rendered
# line alone; these tune the recorder's throughput, not its numerics): one chunk holds a
# whole prompt, a few sequences at once, no CUDA-graph capture, quiet access log.
_LOCAL_VLLM_ARGS = ("--max-num-seqs", "8", "--enforce-eager", "--disable-uvicorn-access-log")


def _exec_vllm(args: argparse.Namespace, overrides: dict[str, float], name: str) -> None:
    from infergate.render.vllm import VllmServe, pooling_args, vllm_serve_args
    from infergate.runtime.model_config import load_model_config

    max_len = args.max_model_len or load_model_config(args.model).max_position_embeddings
    if importlib.util.find_spec("vllm") is None:
        raise BackendError(f"engine vllm: not installed for {sys.executable}; use the vLLM venv")
    check_dtype(args.dtype)
    serve_args = vllm_serve_args(
        VllmServe(
            model=str(args.model),
            served_model_name=name,
            dtype=args.dtype,
            max_model_len=max_len,
            seed=args.seed,
            host=args.host,
            port=args.port,
            config=overrides,
            extra=(*_LOCAL_VLLM_ARGS, "--max-num-batched-tokens", str(max_len)),
        )
    )
    if args.probe:
        serve_args = pooling_args(serve_args)
    # The venv's `vllm` command (hack/engine-commands.py), as engine pods run it.
    vllm = Path(sys.executable).parent / "vllm"
    if not vllm.exists():
        raise BackendError(f"engine vllm: {vllm} is missing; run `make engines`")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # as engine pods here: no core-0 pile-up
    os.execve(vllm, [str(vllm), *serve_args], env)  # noqa: S606 - argv built from our own flags


def main(argv: list[str] | None = None) -> int:
    """`python -m infergate.commands.serve ...`: this command alone, so an engine venv
    needs none of the other commands' dependencies."""
    parser = argparse.ArgumentParser(prog="infergate")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
