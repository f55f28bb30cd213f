"""How the low-precision noise floor grows with depth and sequence position.

A Qwen2 model of Qwen2.5-7B's shape (28 layers, hidden 3584, 28 query / 4 key-value
heads, intermediate 18944, vocab 152064, rope theta 1e6) is initialised from a fixed
seed (normal, std 0.02, biases zero, norm weights one: transformers' own Qwen2 init;
no weights are downloaded) and its weights are rounded to bfloat16 once, as a bf16
checkpoint's are, so the float32, bfloat16 and float16 copies hold the same numbers
and only the compute precision differs. The same random token ids (8K by default) go
through each copy, teacher-forced (one forward pass, no decoding), with TF32 off so
float32 is float32.

Measured against float32, for bfloat16 and float16:

- per layer depth L (0 = embeddings, 28 = the real last layer): the residual stream
  after layer L passed through the model's final norm, i.e. the last-layer hidden state
  a model cut after L layers would report; per token relative L2 error and cosine,
  suite mean, P99 / P1, and per position bucket;
- at the last layer, by 512-position bins: relative L2 and cosine (is it flat?);
- logits at the last layer (all positions): full-vocabulary KL(fp32 || low), top-1
  agreement, the share of positions whose float32 top-1/top-2 gap is under 0.1 nat,
  and the signed mean change of the float32 top token's logprob;
- logit-lens KL per depth on every 8th position (final norm and lm_head applied after
  layer L), to see how the logit-level noise grows with depth.

    python3 experiments/gpu/noise_depth_length.py --out noise.json            # H200
    python experiments/gpu/noise_depth_length.py --preset tiny --device cpu \\
        --seq 512 --out /tmp/tiny.json                                          # CPU check

Random init is not a trained model: its logits are flatter (top-1/top-2 gaps are
small), so its top-1 agreement understates a trained model's and its KL is a
magnitude, not a prediction. The hidden-state errors are the dtype's rounding carried
through the depth, which is what a profile's hidden thresholds must allow for.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-7b": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    # The fixture model's shape (infergate.fixture.generate.FixtureSpec), random init.
    "fixture": {
        "vocab_size": 2048,
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    },
    # For a CPU check of the script itself.
    "tiny": {
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}
BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0-1K", 0, 1024),
    ("1-4K", 1024, 4096),
    ("4-8K", 4096, 8192),
    ("8K+", 8192, None),
)
BIN = 512
LENS_STRIDE = 8
LOGIT_CHUNK = 512
NEAR_TIE_NATS = 0.1
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def build(preset: str, seed: int, device: str, max_positions: int) -> Any:
    shape = PRESETS[preset]
    config = Qwen2Config(
        **shape,
        max_position_embeddings=max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        rms_norm_eps=1e-6,
        initializer_range=0.02,
        tie_word_embeddings=False,
        use_sliding_window=False,
    )
    config._attn_implementation = "sdpa"  # the kernel vLLM-like servers use
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            # A bf16 checkpoint: every copy below holds exactly these numbers.
            param.copy_(param.to(torch.bfloat16).to(torch.float32))
    return model


def keep_rope_float32(low: Any, base: Any) -> Any:
    """Give a cast copy back its float32 rope frequencies.

    `.to(bfloat16)` casts every floating buffer, the rotary `inv_freq` too; then every
    rotation angle is off by up to 2^-9 relative, which at position 8K is radians, and
    the copy no longer computes the same model (at Qwen2.5-7B shape: relative L2 ~1 at
    the last layer, growing with position). `from_pretrained(dtype=...)` and serving
    engines keep the frequencies in float32 and round only cos/sin; so do we.
    """
    for module, ref in zip(low.modules(), base.modules(), strict=True):
        for attr in ("inv_freq", "original_inv_freq"):
            if isinstance(getattr(module, attr, None), torch.Tensor):
                setattr(module, attr, getattr(ref, attr).detach().clone())
    return low


def per_token(a: Any, b: Any) -> tuple[Any, Any]:
    """Relative L2 (to b) and cosine per row of [n, h] float32 tensors."""
    diff = (a - b).norm(dim=-1)
    nb = b.norm(dim=-1)
    na = a.norm(dim=-1)
    rel = diff / nb
    cos = (a * b).sum(dim=-1) / (na * nb)
    return rel.double(), cos.double()


def summarise(rel: Any, cos: Any, positions: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "relL2Mean": float(rel.mean()),
        "relL2P99": float(torch.quantile(rel.float(), 0.99)),
        "relL2Max": float(rel.max()),
        "cosineMean": float(cos.mean()),
        "cosineP1": float(torch.quantile(cos.float(), 0.01)),
        "cosineMin": float(cos.min()),
        "buckets": {},
    }
    for name, start, end in BUCKETS:
        mask = positions >= start
        if end is not None:
            mask &= positions < end
        if bool(mask.any()):
            out["buckets"][name] = {
                "tokens": int(mask.sum()),
                "relL2Mean": float(rel[mask].mean()),
                "cosineMean": float(cos[mask].mean()),
            }
    return out


def logit_stats(ref: Any, low: Any, positions: Any) -> dict[str, Any]:
    """KL(ref || low) over the full vocabulary and top-1 figures, chunked over positions."""
    kls, agree, near, shift = [], [], [], []
    for start in range(0, ref.shape[0], LOGIT_CHUNK):
        p = torch.log_softmax(ref[start : start + LOGIT_CHUNK].float(), dim=-1)
        q = torch.log_softmax(low[start : start + LOGIT_CHUNK].float(), dim=-1)
        kls.append((p.exp() * (p - q)).sum(dim=-1).clamp_min(0).double())
        top2 = p.topk(2, dim=-1)
        top = top2.indices[:, 0]
        agree.append(q.argmax(dim=-1) == top)
        near.append((top2.values[:, 0] - top2.values[:, 1]) < NEAR_TIE_NATS)
        shift.append((q.gather(1, top[:, None]) - p.gather(1, top[:, None]))[:, 0].double())
    kl = torch.cat(kls)
    same = torch.cat(agree)
    out: dict[str, Any] = {
        "positions": int(kl.numel()),
        "klMean": float(kl.mean()),
        "klP99": float(torch.quantile(kl.float(), 0.99)),
        "klMax": float(kl.max()),
        "top1Agreement": float(same.double().mean()),
        "referenceNearTieShare": float(torch.cat(near).double().mean()),
        "topLogprobShiftMean": float(torch.cat(shift).mean()),
        "buckets": {},
    }
    for name, start, end in BUCKETS:
        mask = positions >= start
        if end is not None:
            mask &= positions < end
        if bool(mask.any()):
            out["buckets"][name] = {
                "klMean": float(kl[mask].mean()),
                "top1Agreement": float(same[mask].double().mean()),
            }
    return out


def _lens(model: Any, normed: Any) -> Any:
    """Logits of already-normed hidden states through the model's lm_head, in its dtype."""
    return model.lm_head(normed.to(model.lm_head.weight.dtype))


def run_sequence(models: dict[str, Any], ids: Any, device: str) -> dict[str, Any]:
    ref_model = models["float32"]
    n = ids.shape[1]
    positions = torch.arange(n, device=device)
    lens_rows = torch.arange(0, n, LENS_STRIDE, device=device)
    outputs: dict[str, Any] = {}
    timing: dict[str, float] = {}
    with torch.inference_mode():
        for name, model in models.items():
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
            if device == "cuda":
                torch.cuda.synchronize()
            timing[name] = round(time.perf_counter() - start, 3)
            depth = len(out.hidden_states) - 1
            # hidden_states[L] for L < depth is the residual stream after layer L;
            # hidden_states[depth] already went through the final norm.
            normed = [
                model.model.norm(h[0]).float() if layer < depth else h[0].float()
                for layer, h in enumerate(out.hidden_states)
            ]
            outputs[name] = {
                "normed": normed,
                "logits": out.logits[0],
                "nonfinite": int((~torch.isfinite(out.logits)).sum()),
            }
            del out
        ref = outputs.pop("float32")
        result: dict[str, Any] = {"forwardSeconds": timing}
        for name, low in outputs.items():
            per_depth = []
            for layer, (a, b) in enumerate(zip(low["normed"], ref["normed"], strict=True)):
                rel, cos = per_token(a, b)
                entry = summarise(rel, cos, positions)
                entry["depth"] = layer
                lens = logit_stats(
                    _lens(ref_model, b[lens_rows]), _lens(models[name], a[lens_rows]), lens_rows
                )
                entry["lensKlMean"] = lens["klMean"]
                entry["lensTop1Agreement"] = lens["top1Agreement"]
                per_depth.append(entry)
            rel, cos = per_token(low["normed"][-1], ref["normed"][-1])
            bins = []
            for start in range(0, n, BIN):
                bins.append(
                    {
                        "start": start,
                        "relL2Mean": float(rel[start : start + BIN].mean()),
                        "cosineMean": float(cos[start : start + BIN].mean()),
                    }
                )
            result[name] = {
                "perDepth": per_depth,
                "lastLayerBins": bins,
                "logits": logit_stats(ref["logits"], low["logits"], positions),
                "nonfiniteLogits": low["nonfinite"],
            }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen2.5-7b")
    parser.add_argument("--also", nargs="*", default=["fixture"], help="extra presets to run")
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    report: dict[str, Any] = {
        "seq": args.seq,
        "sequences": args.sequences,
        "seed": args.seed,
        "init": "transformers Qwen2 init: normal std 0.02, biases 0, norms 1; weights "
        "rounded to bfloat16 once, shared by all three copies",
        "tokens": "uniform random token ids, seeded",
        "attention": "sdpa",
        "tf32": False,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        "runs": {},
    }
    for preset in [args.preset, *args.also]:
        started = time.perf_counter()
        base = build(preset, args.seed, args.device, max(32768, args.seq + 1))
        models = {"float32": base}
        for name, dtype in DTYPES.items():
            models[name] = keep_rope_float32(copy.deepcopy(base).to(dtype), base)
        built = time.perf_counter() - started
        gen = torch.Generator().manual_seed(args.seed + 1)
        vocab = PRESETS[preset]["vocab_size"]
        sequences = []
        for index in range(args.sequences):
            ids = torch.randint(0, vocab, (1, args.seq), generator=gen).to(args.device)
            sequences.append(run_sequence(models, ids, args.device))
            print(f"{preset}: sequence {index} done", flush=True)  # noqa: T201 - progress
        report["runs"][preset] = {
            "shape": PRESETS[preset],
            "buildSeconds": round(built, 1),
            "sequences": sequences,
        }
        del models, base
        if args.device == "cuda":
            report["runs"][preset]["peakGiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for preset, run in report["runs"].items():
        for name in DTYPES:
            last = run["sequences"][0][name]
            depth = last["perDepth"]
            print(  # noqa: T201 - the summary is the script's output
                f"{preset} {name}: relL2 after L1 {depth[1]['relL2Mean']:.4g}, "
                f"last {depth[-1]['relL2Mean']:.4g}; KL {last['logits']['klMean']:.3g}; "
                f"top1 {last['logits']['top1Agreement']:.4f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
