"""The gate at 28 layers on a GPU, on a model trained so that its distributions are peaked.

`gate_table.py` judged a random-init model whose LM head was scaled x8: peaked, but its
margins were not a trained model's (rounding amplified by 28 random layers and the head
scale; bf16 vs fp32 flipped 14% of top tokens). No trained weights can be downloaded on
the device machine, so this script trains one there, from scratch, in a few minutes:

- text: the Python source and docs found on the machine (the standard library and
  site-packages: `.py`, `.md`, `.rst`, `.txt`), deduplicated by content; files are split
  by the hash of their content into training text and held-out text (1 in 16);
- tokenizer: a byte-level BPE of `--vocab` tokens trained there (`tokenizers`) on a
  sample of the training text;
- model: Qwen2 architecture with Qwen2.5-7B's depth and attention layout (28 layers,
  head dim 128, grouped-query attention 6:1 (Qwen2.5-1.5B's ratio), RoPE theta 1e6,
  RMS eps 1e-6, untied head), narrower (`--hidden`, `--intermediate`): Qwen2.5-7B's width
  3584 is ~7B parameters, which a few minutes of one GPU cannot train to peaked
  distributions; at a width of 768 (183M parameters) an H100 sees 18M tokens in 150 s
  (about 0.27 s a step of 32K tokens);
- training: AdamW, bf16 autocast over float32 weights, for `--train-seconds` of wall
  clock (sequences of 1,024 tokens, the last quarter of the time 8,192 so that the long
  prompts are in the trained range), then the weights are rounded to bfloat16 once (a bf16
  checkpoint) and kept in `--work`.

Then, as gate_table.py does and with its code (`gate_table.changes`, `side_model`,
`record`, `run_judge`): every side is recorded as `infergate record` records, and judged
in-process by the product's code under the static limits and under limits derived from
the model's own noise. Prompts are held-out text: the check suite 60 short prompts of
128 tokens and 4 long prompts of 8,192 tokens (64 prompts); the calibration suite the
same shape from other held-out files.

    python3 experiments/gpu/trained_gate_table.py --work /tmp/tgt --out table.json  # GPU
    python experiments/gpu/trained_gate_table.py --device cpu --work /tmp/tgt-cpu \\
        --hidden 256 --intermediate 512 --layers 4 --vocab 1024 --train-seconds 20 \\
        --short 6 --long 1 --long-tokens 512 --max-files 400 --out /tmp/t.json  # CPU check
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "operator"))

import gate_table as gt  # noqa: E402
from noise_depth_length import PRESETS  # noqa: E402

from infergate.recordio import MANIFEST  # noqa: E402

PRESET = "trained"
SUFFIXES = (".py", ".md", ".rst", ".txt")
HELD_OUT = 16
"""One file in HELD_OUT (by content hash) is held out: prompts come only from those."""
SEP = "<|endoftext|>"
STARTED = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:6.1f}s] {message}", flush=True)  # noqa: T201


def corpus(max_files: int, max_bytes: int) -> tuple[list[str], list[str], dict[str, Any]]:
    """Training and held-out texts from this machine's Python installation."""
    paths = sysconfig.get_paths()
    roots = sorted({paths["stdlib"], paths["purelib"], paths["platlib"], *sys.path[1:]})
    repo = HERE.parent.parent
    roots = [r for r in roots if r and Path(r).is_dir() and repo not in Path(r).resolve().parents]
    seen: set[str] = set()
    docs: list[tuple[str, str]] = []
    total = 0
    files = sorted({p for root in roots for p in Path(root).rglob("*") if p.suffix in SUFFIXES})
    # Read in a fixed order that mixes packages (not alphabetical: the caps would then
    # keep only the first few packages).
    files.sort(key=lambda p: hashlib.sha256(str(p).encode()).hexdigest())
    for path in files:
        try:
            if not 256 <= path.stat().st_size <= 1_000_000:
                continue
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        docs.append((digest, text))
        total += len(text)
        if len(docs) >= max_files or total >= max_bytes:
            break
    docs.sort()  # by content hash: a fixed shuffle
    train = [t for d, t in docs if int(d, 16) % HELD_OUT]
    held = [t for d, t in docs if not int(d, 16) % HELD_OUT]
    info = {
        "roots": roots,
        "files": len(docs),
        "trainFiles": len(train),
        "heldOutFiles": len(held),
        "trainChars": sum(map(len, train)),
        "heldOutChars": sum(map(len, held)),
    }
    return train, held, info


def tokenizer(train: list[str], vocab: int, sample_chars: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[SEP],
        show_progress=False,
    )
    sample, size = [], 0
    for text in train:
        sample.append(text)
        size += len(text)
        if size >= sample_chars:
            break
    tok.train_from_iterator(sample, trainer)
    return tok


def encode(tok: Any, texts: list[str]) -> list[np.ndarray]:
    return [np.asarray(e.ids, np.int32) for e in tok.encode_batch(texts)]


def shape(args: argparse.Namespace) -> dict[str, int]:
    return {
        "vocab_size": args.vocab,
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.hidden // 128,
        "num_key_value_heads": max(1, args.hidden // 128 // args.gqa),
    }


def config(args: argparse.Namespace) -> Qwen2Config:
    return Qwen2Config(
        **shape(args),
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
    )


def train(
    args: argparse.Namespace, stream: torch.Tensor
) -> tuple[Qwen2ForCausalLM, dict[str, Any]]:
    """Train from a fixed seed for `args.train_seconds` of wall clock, or for
    `args.train_steps` steps where that is set (the schedule then runs on steps)."""
    device = args.device
    torch.manual_seed(args.seed)
    cfg = config(args)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    fused = device == "cuda"
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
    )
    torch.backends.cuda.matmul.allow_tf32 = True
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    stream = stream.to(device)
    n = stream.numel()
    began = time.perf_counter()
    losses: list[tuple[int, float, float, int]] = []
    step, tokens, ema = 0, 0, None
    steps = getattr(args, "train_steps", 0)  # trained_depth.py: a fixed number of steps
    while True:
        frac = step / steps if steps else (time.perf_counter() - began) / args.train_seconds
        if frac >= 1:
            break
        long_phase = frac >= 1 - args.long_fraction
        seq = args.long_tokens if long_phase else args.train_seq
        batch = max(1, args.batch_tokens // seq)
        warm = min(1.0, (step + 1) / args.warmup)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, n - seq - 1, (batch,), generator=gen)
        x = torch.stack([stream[s : s + seq] for s in starts.tolist()]).long()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += batch * seq
        if step % 25 == 0 or step == 1:
            value = float(loss.detach())
            ema = value if ema is None else 0.8 * ema + 0.2 * value
            losses.append((step, round(time.perf_counter() - began, 1), round(value, 4), seq))
            if step % 100 == 0 or step == 1:
                log(f"step {step} seq {seq} loss {value:.3f} lr {lr:.2e} tokens {tokens}")
    del opt
    model.eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).to(torch.float32))
    info = {
        "parameters": params,
        "steps": step,
        "tokens": tokens,
        "trainSeconds": round(time.perf_counter() - began, 1),
        "lossCurve": losses,
        "finalTrainLoss": losses[-1][2] if losses else None,
    }
    return model, info


def evaluate(model: Qwen2ForCausalLM, prompts: list[gt.Prompt], device: str) -> dict[str, Any]:
    with torch.no_grad():
        return _evaluate(model, prompts, device)


def _evaluate(model: Qwen2ForCausalLM, prompts: list[gt.Prompt], device: str) -> dict[str, Any]:
    """Held-out loss and top-1 probability (float32, the bf16-rounded weights)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, Any] = {}
    for name, group in (
        ("short", [p for p in prompts if not p.long]),
        ("long", [p for p in prompts if p.long]),
    ):
        nll, top1, margin = [], [], []
        for p in group:
            ids = torch.tensor([p.ids], device=device)
            hidden = model.model(input_ids=ids).last_hidden_state[0]
            for start in range(0, ids.shape[1] - 1, gt.LOGIT_CHUNK):
                stop = min(start + gt.LOGIT_CHUNK, ids.shape[1] - 1)
                rows = torch.log_softmax(model.lm_head(hidden[start:stop]).float(), -1)
                nxt = ids[0, start + 1 : stop + 1]
                nll.append(-rows.gather(1, nxt[:, None])[:, 0].cpu())
                two = rows.topk(2, dim=-1).values
                top1.append(two[:, 0].exp().cpu())
                margin.append((two[:, 0] - two[:, 1]).cpu())
        if not nll:
            continue
        nll_t, top_t, margin_t = torch.cat(nll), torch.cat(top1), torch.cat(margin)
        out[name] = {
            "positions": int(nll_t.numel()),
            "loss": round(float(nll_t.mean()), 4),
            "medianTop1": round(float(top_t.median()), 4),
            "meanTop1": round(float(top_t.mean()), 4),
            "shareTop1Over0.9": round(float((top_t > 0.9).float().mean()), 4),
            "shareMarginUnder0.1nat": round(float((margin_t < 0.1).float().mean()), 4),
        }
        if name == "long":
            pos = torch.arange(nll_t.numel()) % (group[0].ids.__len__() - 1)
            out[name]["lossBeyond1024"] = round(float(nll_t[pos >= 1024].mean()), 4)
    return out


def suites(tok: Any, held: list[str], args: argparse.Namespace) -> dict[str, list[gt.Prompt]]:
    """Check and calibration suites of held-out text: short prompts are 128-token windows
    of distinct files (a seeded offset), long ones consecutive held-out files joined by
    the separator until 8,192 tokens. The two suites share no file."""
    rng = np.random.default_rng(args.seed)
    encoded = encode(tok, held)
    sep = tok.token_to_id(SEP)
    order = rng.permutation(len(encoded)).tolist()
    result: dict[str, list[gt.Prompt]] = {}
    cursor = 0
    for name, (short, long) in (
        ("check", (args.short, args.long)),
        ("calibration", (args.cal_short, args.cal_long)),
    ):
        prompts: list[gt.Prompt] = []
        while len(prompts) < short:
            ids = encoded[order[cursor]]
            cursor += 1
            if len(ids) < args.short_tokens + 32:
                continue
            at = int(rng.integers(0, len(ids) - args.short_tokens))
            window = ids[at : at + args.short_tokens].tolist()
            prompts.append(gt.Prompt(f"{name}-s{len(prompts):02d}", window, False))
        for i in range(long):
            joined: list[int] = []
            while len(joined) < args.long_tokens:
                joined += [*encoded[order[cursor]].tolist(), sep]
                cursor += 1
            prompts.append(gt.Prompt(f"{name}-l{i}", joined[: args.long_tokens], True))
        result[name] = prompts
    return result


def record_all(
    args: argparse.Namespace,
    base: Qwen2ForCausalLM,
    prompts: dict[str, list[gt.Prompt]],
    timings: dict[str, float],
    saved: Callable[[], None],
) -> dict[str, float]:
    """Calibration and baselines first, then candidates, while time is left; `timings` is
    filled and `saved` called after each side (a run cut off keeps what it recorded)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = gt.changes()
    first = [c for c in rows if c.kind in ("baseline", "calibration")]
    rest = [c for c in rows if c not in first]
    for change in first + rest:
        if time.perf_counter() - STARTED > args.record_until:
            log(f"out of time: {change.key} not recorded")
            continue
        with torch.no_grad():
            model = gt.side_model(base, change)
            seconds = gt.record(model, change, prompts[change.suite], args.work, PRESET)
        timings[change.key] = round(seconds, 1)
        log(f"recorded {change.key} in {seconds:.1f} s")
        saved()
        if model is not base:
            del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return timings


def model_arguments(parser: argparse.ArgumentParser) -> None:
    """The device, the model's shape, its training and its text: what this script and
    trained_depth.py share (each adds its depth, training length and suites)."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--intermediate", type=int, default=2048)
    parser.add_argument("--gqa", type=int, default=6, help="query heads per key-value head")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=8e-4)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--train-seq", type=int, default=1024)
    parser.add_argument("--batch-tokens", type=int, default=32768)
    parser.add_argument("--long-fraction", type=float, default=0.25)
    parser.add_argument("--max-files", type=int, default=60000)
    parser.add_argument("--max-chars", type=int, default=120_000_000)
    parser.add_argument("--tokenizer-chars", type=int, default=12_000_000)
    parser.add_argument("--short-tokens", type=int, default=128)
    parser.add_argument("--long-tokens", type=int, default=8192)


def main() -> None:  # noqa: PLR0915 - one experiment's steps, in order
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    model_arguments(parser)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--train-seconds", type=float, default=190)
    parser.add_argument("--short", type=int, default=60)
    parser.add_argument("--long", type=int, default=4)
    parser.add_argument("--cal-short", type=int, default=60)
    parser.add_argument("--cal-long", type=int, default=4)
    parser.add_argument(
        "--record-until",
        type=float,
        default=450,
        help="seconds since start after which no further side is recorded",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    PRESETS[PRESET] = shape(args)
    document: dict[str, Any] = {"shape": shape(args), "args": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
    }}  # fmt: skip

    def save() -> None:  # atomic: a copy taken while it runs is whole
        part = args.out.with_name(args.out.name + ".part")
        part.write_text(json.dumps(document, indent=1) + "\n")
        part.replace(args.out)

    train_text, held, document["corpus"] = corpus(args.max_files, args.max_chars)
    log(f"corpus {document['corpus']}")
    if (args.work / "tokenizer.json").exists():  # a later call: the same ids as before
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(args.work / "tokenizer.json"))
    else:
        tok = tokenizer(train_text, args.vocab, args.tokenizer_chars)
        tok.save(str(args.work / "tokenizer.json"))
    prompts = suites(tok, held, args)
    log("tokenizer trained, suites built")
    weights = args.work / "model.pt"
    if weights.exists():
        with torch.device(args.device):
            base = Qwen2ForCausalLM(config(args))
        base.load_state_dict(torch.load(weights, map_location=args.device))
        document["training"] = json.loads((args.work / "training.json").read_text())
        log("weights loaded from an earlier call")
    else:
        sep = tok.token_to_id(SEP)
        pieces = []
        for ids in encode(tok, train_text):
            pieces += [ids, np.asarray([sep], np.int32)]
        stream = torch.from_numpy(np.concatenate(pieces))
        document["corpus"]["trainTokens"] = int(stream.numel())
        log(f"training stream {stream.numel()} tokens")
        base, document["training"] = train(args, stream)
        torch.save(base.state_dict(), weights)
        (args.work / "training.json").write_text(json.dumps(document["training"]))
    base = base.eval()
    document["heldOut"] = evaluate(base, prompts["check"], args.device)
    log(f"held out {document['heldOut']}")
    document["device"] = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    document["torch"] = torch.__version__
    save()
    document["recordSeconds"] = {}
    record_all(args, base, prompts, document["recordSeconds"], save)
    del base
    save()
    recorded = gt.changes
    gt.changes = lambda: [  # judge only the rows that were recorded
        c for c in recorded() if (args.work / c.key / MANIFEST).exists()
    ]
    began = time.perf_counter()

    def judged(partial: dict[str, Any]) -> None:
        document.update(partial)
        save()

    document.update(gt.run_judge(args, judged))
    document["judgeSeconds"] = round(time.perf_counter() - began, 1)
    save()
    log("done")


if __name__ == "__main__":
    main()
