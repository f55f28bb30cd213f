"""The pinned-flag rule against vLLM's own parser (the vllm venv): every spelling the rule
refuses really reaches a pinned setting in `vllm serve`, and what it lets through does not.

The rule (infergate.api.pinned) is written from vLLM's FlexibleArgumentParser: underscores
read as dashes, `--flag.key` sub-keys, argparse abbreviations (vLLM keeps allow_abbrev).
This test keeps it honest when vLLM changes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from infergate.api.pinned import pinned_flag
from infergate.engines.venvs import EngineVenvError, engine_environment, engine_python

pytestmark = pytest.mark.engines

# The pinned part of a `vllm serve` command line, as render/vllm.py writes it.
_BASE = [
    "--model", "/models/m", "--served-model-name", "m", "--dtype", "bfloat16",
    "--max-model-len", "4096", "--tensor-parallel-size", "1", "--seed", "42",
    "--generation-config", "vllm", "--max-logprobs", "20", "--port", "8000",
]  # fmt: skip
# The settings those flags pin (argparse destinations).
_PINNED_DESTS = [
    "model", "served_model_name", "dtype", "max_model_len", "tensor_parallel_size", "seed",
    "generation_config", "max_logprobs", "hf_overrides", "revision", "host", "port",
]  # fmt: skip

_REFUSED = [
    ["--max_model_len", "131072"],
    ["--max-model", "131072"],
    ["--max-model=131072"],
    ["--hf-overrides.rms_norm_eps=1e-4"],
    ["--hf_overrides.rms_norm_eps", "1e-4"],
    ["--hf-over.rms_norm_eps=1e-4"],
    ["--hf-overrides", '{"rms_norm_eps": 1e-4}'],
    ["-t", "2"],
    ["-tp", "2"],
    ["--dty", "float16"],
    ["--see", "7"],
    ["--served", "other"],
    ["--max-logp", "5"],
    ["--rev", "main"],
    ["--ho", "10.0.0.9"],
]
_ALLOWED = [
    ["--enforce-eager"],
    ["--max-num-seqs", "8"],
    ["--max-num-batched-tokens=8192"],
    ["--config-format", "hf"],
    ["-O3"],
    ["--kv-cache-dtype", "auto"],
]

_SCRIPT = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
base, cases, dests = json.loads(sys.stdin.read())
def pinned(args):
    parsed = vars(parser.parse_args(args))
    return {d: repr(parsed.get(d)) for d in dests}
before = pinned(base)
out = []
for extra in cases:
    try:
        after = pinned(base + extra)
        out.append(sorted(d for d in dests if after[d] != before[d]))
    except SystemExit:
        out.append(["<refused by vllm>"])
print(json.dumps({"abbrev": parser.allow_abbrev, "changed": out}))
"""


def _vllm_python() -> Path:
    try:
        return engine_python("vllm")
    except EngineVenvError as exc:
        if os.environ.get("INFERGATE_REQUIRE_ENGINES") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
        raise


def _changed(cases: list[list[str]]) -> tuple[bool, list[list[str]]]:
    done = subprocess.run(
        [str(_vllm_python()), "-c", _SCRIPT],
        input=json.dumps([_BASE, cases, _PINNED_DESTS]),
        capture_output=True,
        text=True,
        env=engine_environment(),
        timeout=600,
        check=True,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return bool(answer["abbrev"]), answer["changed"]


def test_vllm_reads_every_refused_spelling_as_a_pinned_flag_and_nothing_else() -> None:
    abbreviates, changed = _changed(_REFUSED + _ALLOWED)
    assert abbreviates, "vLLM no longer abbreviates: the rule may be relaxed"
    for extra, dests in zip(_REFUSED, changed[: len(_REFUSED)], strict=True):
        assert pinned_flag(extra[0]) is not None, extra
        assert dests, f"{extra} sets nothing pinned in vLLM"
        assert dests != ["<refused by vllm>"], f"{extra} is refused by vLLM itself"
    for extra, dests in zip(_ALLOWED, changed[len(_REFUSED) :], strict=True):
        assert pinned_flag(extra[0]) is None, extra
        assert dests == [], f"{extra} changes {dests}"
