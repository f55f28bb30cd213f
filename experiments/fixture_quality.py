"""How much the fixture model behaves like a trained language model.

For one or more fixture model directories (run with the vLLM venv's Python and
PYTHONPATH=operator):

- held-out grammar sentences (`corpus.held_out_sentences`, the same text for every
  model): mean top-1 probability, mean entropy and mean loss per token, nats;
- greedy continuations of the default suite's short prompts (64 tokens, end-of-text
  ignored, float32): mean probability of the chosen token and the share of steps whose
  top-1/top-2 gap is under 0.1 nat (the bf16 fork tau) and under 0.01 nat;
- the suite's long prompts scored teacher-forced: mean top-1 probability and entropy
  per position bucket, so flatter distributions far into a prompt show.

    PYTHONPATH=operator $VLLM_VENV/bin/python experiments/fixture_quality.py \\
        --model untrained=... --model v1=~/.cache/infergate/models/tiny-qwen2-v1 \\
        --model v2=~/.cache/infergate/models/tiny-qwen2-v2 --out out/fixture-quality.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from infergate.fixture.generate import FixtureSpec, _held_out_quality, _qwen2_config
from infergate.suite import load_suite

NEAR_TIE = 0.1
TIGHT_TIE = 0.01
BUCKETS = ((0, 1024, "0-1K"), (1024, 4096, "1-4K"), (4096, 8192, "4-8K"), (8192, 1 << 30, "8K+"))


def _load(spec: str) -> tuple[str, Any, Any]:
    name, _, path = spec.partition("=")
    tokenizer_dir = Path(path)
    if name == "untrained":
        # The v2 tokenizer with the v2 initial weights (seeded), never trained.
        tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        fixture = FixtureSpec()
        torch.manual_seed(fixture.seed)
        eos = tokenizer.token_to_id("<|endoftext|>")
        model = Qwen2ForCausalLM(_qwen2_config(tokenizer.get_vocab_size(), eos, fixture))
        return name, model.float().eval(), tokenizer
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    model = Qwen2ForCausalLM.from_pretrained(tokenizer_dir, dtype=torch.float32)
    return name, model.eval(), tokenizer


def _greedy(model: Any, tokenizer: Any) -> dict[str, Any]:
    suite = load_suite("default")
    chosen, gaps = [], []
    with torch.no_grad():
        for prompt in suite.select(long=False, chat=False).prompts:
            assert prompt.text is not None  # noqa: S101 - the default suite is text
            ids = tokenizer.encode(prompt.text).ids
            for _ in range(64):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                top = logprobs.topk(2)
                chosen.append(float(top.values[0].exp()))
                gaps.append(float(top.values[0] - top.values[1]))
                ids.append(int(top.indices[0]))
    gap = torch.tensor(gaps)
    return {
        "steps": len(gaps),
        "meanChosenProb": round(sum(chosen) / len(chosen), 4),
        "nearTieShare": round(float((gap < NEAR_TIE).double().mean()), 4),
        "tightTieShare": round(float((gap < TIGHT_TIE).double().mean()), 4),
        "medianGap": round(float(gap.median()), 4),
    }


def _long(model: Any, tokenizer: Any) -> dict[str, Any]:
    suite = load_suite("default")
    sums: dict[str, list[float]] = {name: [0.0, 0.0, 0.0] for _, _, name in BUCKETS}
    with torch.no_grad():
        for prompt in suite.select(long=True).prompts:
            assert prompt.text is not None  # noqa: S101 - the default suite is text
            ids = tokenizer.encode(prompt.text).ids
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            probs = logprobs.exp()
            top1 = probs.max(dim=-1).values
            entropy = -(probs * logprobs).sum(dim=-1)
            for start, end, name in BUCKETS:
                part = slice(start, min(end, len(ids)))
                if part.start < part.stop:
                    sums[name][0] += float(top1[part].sum())
                    sums[name][1] += float(entropy[part].sum())
                    sums[name][2] += part.stop - part.start
    return {
        name: {
            "positions": int(n),
            "meanTop1Prob": round(t / n, 4),
            "meanEntropy": round(e / n, 4),
        }
        for name, (t, e, n) in sums.items()
        if n
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    results: dict[str, Any] = {}
    for spec in args.model:
        started = time.perf_counter()
        name, model, tokenizer = _load(spec)
        entry: dict[str, Any] = {
            "heldOut": _held_out_quality(model, tokenizer, FixtureSpec()),
            "greedy": _greedy(model, tokenizer),
        }
        if not args.skip_long:
            entry["longPrompts"] = _long(model, tokenizer)
        entry["seconds"] = round(time.perf_counter() - started, 1)
        results[name] = entry
        print(name, json.dumps(entry), flush=True)  # noqa: T201 - progress
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
