"""The depth rule (`infergate.parity.depth`) measured on trained models at several depths.

The rule (linear-in-perturbation errors grow like sqrt(layers), quadratic ones (KL,
1 - cosine) like layers) was anchored on random-init models (`noise_depth_length.py`).
Here Qwen2 models of one width and layout (trained_gate_table.py's: head dim 128,
grouped-query attention, RoPE theta 1e6, untied head) are trained at several depths,
from the same seed, text, tokenizer and number of steps, with that script's own code
(`corpus`, `tokenizer`, `suites`, `train`, `evaluate`); each one's weights are rounded
to bf16 once, and its bf16 and fp16 copies (gate_table's `side_model`) are measured
against float32 on held-out prompts (short windows and long joined files):

- last-layer hidden state (after the final norm, as an engine reports it): per-token
  relative L2, pooled P99; 1 - cosine, pooled P1;
- logits: full-vocabulary KL(fp32 || low) per position, mean and P99; same-top rate;
- per layer (every model): the residual stream after layer L through the model's final
  norm, relative L2 P99 and 1 - cosine P1.

Same steps, not same wall clock, per model: each depth sees the same tokens in the same
order under the same schedule, so depth is the one thing that changes (same wall clock
would give a 2-layer model 14x the steps of a 28-layer one, and its distributions a
different training). The rule's projection from the shallowest model, the ratio
measured/projected, and the log-log growth exponent per family (least squares over
depths; spread: a bootstrap over 128-position blocks of the prompts, refitting each
time) are in the output, recomputed and saved after every depth, so a run cut off keeps
the depths it finished. Depths run in the given order (the anchor and the deepest
first). The default 550 steps of 32K tokens are the 543 steps of trained_gate_table.py's
28-layer model (0.28 s a step on an H100), ~330 s of training for the five depths.

    python3 experiments/gpu/trained_depth.py --work /tmp/tgt --out depth.json     # GPU
    python experiments/gpu/trained_depth.py --device cpu --work /tmp/td-cpu \\
        --hidden 128 --intermediate 384 --gqa 1 --vocab 1024 --depths 2 4 \\
        --train-steps 10 --batch-tokens 1024 --train-seq 128 --short 4 --long 1 \\
        --long-tokens 512 --max-files 300 --dtypes bfloat16 --out /tmp/td.json  # CPU check
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "operator"))

import gate_table as gt  # noqa: E402
import trained_gate_table as tgt  # noqa: E402
from noise_depth_length import per_token  # noqa: E402

from infergate.parity.depth import DEPTH_SCALED, NoiseGrowth, depth_scale  # noqa: E402

FAMILIES: dict[str, str] = {
    "hiddenRelL2P99": "max_hidden_rel_l2_p99",
    "hiddenOneMinusCosineP1": "min_hidden_cosine_p1",
    "klMean": "max_mean_kl",
    "klP99": "max_kl_p99",
    "sameTopMiss": "min_same_top_rate",
}
"""Measured family -> the threshold field whose depth scaling it tests."""
BLOCK = 128
"""Bootstrap unit: positions of one prompt in blocks of this many."""
BOOTSTRAP = 200


def family_values(
    rel: np.ndarray, cos: np.ndarray, kl: np.ndarray, same: np.ndarray
) -> dict[str, float]:
    return {
        "hiddenRelL2P99": float(np.quantile(rel, 0.99)),
        "hiddenOneMinusCosineP1": float(1.0 - np.quantile(cos, 0.01)),
        "klMean": float(kl.mean()),
        "klP99": float(np.quantile(kl, 0.99)),
        "sameTopMiss": float(1.0 - same.mean()),
    }


def measure(
    base: Any, prompts: list[gt.Prompt], dtypes: list[str], device: str
) -> dict[str, dict[str, np.ndarray]]:
    """Per-token arrays of each low-precision copy against float32, over all prompts."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = {"float32": base}
    for name in dtypes:
        models[name] = gt.side_model(base, gt.Change(f"depth-{name}", name, None))
    out: dict[str, dict[str, list[np.ndarray]]] = {
        name: {"rel": [], "cos": [], "kl": [], "same": [], "block": [], "layerRel": [],
               "layerCos": []}
        for name in dtypes
    }  # fmt: skip
    block = 0
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt.ids], device=device)
            normed: dict[str, list[torch.Tensor]] = {}
            for name, model in models.items():
                states = model.model(
                    input_ids=ids, use_cache=False, output_hidden_states=True
                ).hidden_states
                depth = len(states) - 1
                # states[L] for L < depth is the residual after layer L; states[depth]
                # already went through the final norm.
                normed[name] = [
                    (model.model.norm(h[0]) if layer < depth else h[0]).float()
                    for layer, h in enumerate(states)
                ]
                del states
            ref = normed["float32"]
            n = ids.shape[1]
            blocks = block + np.arange(n) // BLOCK
            for name in dtypes:
                low = normed[name]
                rel_l, cos_l = zip(
                    *(per_token(a.double(), b.double()) for a, b in zip(low, ref, strict=True)),
                    strict=True,
                )
                kl, same = [], []
                for start in range(0, n, gt.LOGIT_CHUNK):
                    stop = min(start + gt.LOGIT_CHUNK, n)
                    p = torch.log_softmax(models["float32"].lm_head(ref[-1][start:stop]), -1)
                    low_head = models[name].lm_head
                    q = torch.log_softmax(
                        low_head(low[-1][start:stop].to(low_head.weight.dtype)).float(), -1
                    )
                    kl.append((p.exp() * (p - q)).sum(-1).clamp_min(0).double().cpu())
                    same.append((p.argmax(-1) == q.argmax(-1)).cpu())
                acc = out[name]
                acc["rel"].append(rel_l[-1].cpu().numpy())
                acc["cos"].append(cos_l[-1].cpu().numpy())
                acc["kl"].append(torch.cat(kl).numpy())
                acc["same"].append(torch.cat(same).numpy().astype(np.float64))
                acc["block"].append(blocks)
                acc["layerRel"].append(torch.stack(rel_l).cpu().numpy())
                acc["layerCos"].append(torch.stack(cos_l).cpu().numpy())
            block = int(blocks[-1]) + 1
            del normed, ref
    return {
        name: {key: np.concatenate(parts, axis=-1) for key, parts in acc.items()}
        for name, acc in out.items()
    }


def summary(arrays: dict[str, np.ndarray], long_mask: np.ndarray) -> dict[str, Any]:
    """Pooled families (all prompts, short, long) and the per-layer curve."""
    pick = ("rel", "cos", "kl", "same")
    result: dict[str, Any] = {
        "all": family_values(*(arrays[k] for k in pick)),
        "positions": int(arrays["rel"].size),
    }
    for label, mask in (("short", ~long_mask), ("long", long_mask)):
        if mask.any():
            result[label] = family_values(*(arrays[k][mask] for k in pick))
    result["perLayer"] = [
        {
            "layer": layer,
            "relL2P99": float(np.quantile(arrays["layerRel"][layer], 0.99)),
            "oneMinusCosineP1": float(1.0 - np.quantile(arrays["layerCos"][layer], 0.01)),
        }
        for layer in range(arrays["layerRel"].shape[0])
    ]
    return result


def slope(depths: list[int], values: list[float]) -> tuple[float, float | None] | None:
    """Least-squares log-log slope and its standard error (None: fewer than 2 usable)."""
    pts = [(math.log(d), math.log(v)) for d, v in zip(depths, values, strict=True) if v > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    fit = np.polyfit(x, y, 1)
    if len(pts) == 2:
        return float(fit[0]), None
    resid = y - np.polyval(fit, x)
    se = math.sqrt(float(resid @ resid) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
    return float(fit[0]), se


def analyse(depths: dict[int, dict[str, Any]], seed: int) -> dict[str, Any]:
    """Per dtype and family: measured, the rule's projection from the shallowest depth,
    measured/projected, and the fitted exponent with a block-bootstrap spread."""
    order = sorted(depths)
    anchor = order[0]
    rng = np.random.default_rng(seed)
    result: dict[str, Any] = {"anchorLayers": anchor, "dtypes": {}}
    dtypes = sorted({d for entry in depths.values() for d in entry["arrays"]})
    for dtype in dtypes:
        fams: dict[str, Any] = {}
        present = [d for d in order if dtype in depths[d]["arrays"]]
        boot: dict[str, list[list[float]]] = {f: [] for f in FAMILIES}
        for _ in range(BOOTSTRAP if len(present) >= 2 else 0):
            drawn: dict[str, list[float]] = {f: [] for f in FAMILIES}
            for d in present:
                a = depths[d]["arrays"][dtype]
                n_blocks = int(a["block"].max()) + 1
                take = rng.integers(0, n_blocks, n_blocks)
                counts = np.bincount(take, minlength=n_blocks)[a["block"]]
                idx = np.repeat(np.arange(a["block"].size), counts)
                vals = family_values(a["rel"][idx], a["cos"][idx], a["kl"][idx], a["same"][idx])
                for f in FAMILIES:
                    drawn[f].append(vals[f])
            for f in FAMILIES:
                boot[f].append(drawn[f])
        for family, field in FAMILIES.items():
            growth = DEPTH_SCALED[field]
            measured = [depths[d]["summary"][dtype]["all"][family] for d in present]
            base = measured[0]
            rows = []
            for d, value in zip(present, measured, strict=True):
                projected = base * depth_scale(growth, d, anchor)
                rows.append(
                    {
                        "layers": d,
                        "measured": value,
                        "projected": projected,
                        "ratio": value / projected if projected > 0 else None,
                    }
                )
            fit = slope(present, measured)
            slopes = [s[0] for s in (slope(present, b) for b in boot[family]) if s is not None]
            fams[family] = {
                "field": field,
                "ruleExponent": 0.5 if growth is NoiseGrowth.LINEAR else 1.0,
                "rows": rows,
                "exponent": None if fit is None else fit[0],
                "exponentSE": None if fit is None else fit[1],
                "exponentBootstrap5": float(np.quantile(slopes, 0.05)) if slopes else None,
                "exponentBootstrap95": float(np.quantile(slopes, 0.95)) if slopes else None,
                "maxRatio": max((r["ratio"] for r in rows if r["ratio"] is not None), default=None),
            }
        result["dtypes"][dtype] = fams
    return result


def report(document: dict[str, Any]) -> str:
    """The markdown tables of a saved run: per dtype, each family's measured value,
    projection from the shallowest depth and ratio per depth, then the exponents."""
    analysis = document["analysis"]
    lines = []
    for dtype, fams in analysis["dtypes"].items():
        depths = [r["layers"] for r in next(iter(fams.values()))["rows"]]
        lines += [
            f"{dtype} vs float32 (projection from {analysis['anchorLayers']} layers)",
            "",
            "| layers | held-out loss | "
            + " | ".join(f"{f} measured / projected (ratio)" for f in fams)
            + " |",
            "|---|---|" + "---|" * len(fams),
        ]
        for i, d in enumerate(depths):
            loss = document["depths"][str(d)]["heldOut"].get("short", {}).get("loss")
            cells = []
            for fam in fams.values():
                row = fam["rows"][i]
                ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
                cells.append(f"{row['measured']:.3g} / {row['projected']:.3g} ({ratio})")
            lines.append(f"| {d} | {loss} | " + " | ".join(cells) + " |")
        lines += ["", "| family | rule exponent | fitted (SE) | bootstrap 5-95% | max ratio |"]
        lines.append("|---|---|---|---|---|")
        for name, fam in fams.items():
            fit = "-" if fam["exponent"] is None else f"{fam['exponent']:.2f}"
            if fam["exponentSE"] is not None:
                fit += f" ({fam['exponentSE']:.2f})"
            lo, hi = fam["exponentBootstrap5"], fam["exponentBootstrap95"]
            spread = "-" if lo is None else f"{lo:.2f} .. {hi:.2f}"
            worst = "-" if fam["maxRatio"] is None else f"{fam['maxRatio']:.2f}"
            lines.append(f"| {name} | {fam['ruleExponent']} | {fit} | {spread} | {worst} |")
        lines.append("")
    return "\n".join(lines)


def finite(value: Any) -> Any:
    """`value` with NaN and infinities as null (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def main() -> None:  # noqa: PLR0915 - one experiment's steps, in order
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    tgt.model_arguments(parser)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="print a saved run's tables and exit")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 28, 8, 4, 14])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--train-steps", type=int, default=550)
    parser.add_argument("--short", type=int, default=32)
    parser.add_argument("--long", type=int, default=2)
    args = parser.parse_args()
    if args.report:
        print(report(json.loads(args.report.read_text())))  # noqa: T201 - the tables
        return
    if args.work is None or args.out is None:
        parser.error("--work and --out are required")
    args.cal_short = args.cal_long = 0  # suites(): no calibration suite here
    args.train_seconds = math.inf  # train(): the schedule runs on train_steps
    args.layers = args.depths[0]
    args.work.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "depths": {},
    }
    depths: dict[int, dict[str, Any]] = {}

    def save() -> None:  # atomic: a copy taken while it runs is whole
        document["analysis"] = analyse(depths, args.seed)
        part = args.out.with_name(args.out.name + ".part")
        part.write_text(json.dumps(finite(document), indent=1) + "\n")
        part.replace(args.out)

    train_text, held, document["corpus"] = tgt.corpus(args.max_files, args.max_chars)
    tok = tgt.tokenizer(train_text, args.vocab, args.tokenizer_chars)
    prompts = tgt.suites(tok, held, args)["check"]
    long_mask = np.concatenate([np.full(len(p.ids), p.long) for p in prompts])
    sep = tok.token_to_id(tgt.SEP)
    pieces = []
    for ids in tgt.encode(tok, train_text):
        pieces += [ids, np.asarray([sep], np.int32)]
    stream = torch.from_numpy(np.concatenate(pieces))
    document["corpus"]["trainTokens"] = int(stream.numel())
    document["prompts"] = {
        "short": sum(not p.long for p in prompts),
        "long": sum(p.long for p in prompts),
        "positions": int(long_mask.size),
    }
    tgt.log(f"corpus {document['corpus']}; prompts {document['prompts']}")
    for layers in args.depths:
        args.layers = layers
        tgt.log(f"training {layers} layers")
        model, training = tgt.train(args, stream)
        training.pop("lossCurve")
        entry: dict[str, Any] = {"shape": tgt.shape(args), "training": training}
        entry["heldOut"] = tgt.evaluate(model, prompts, args.device)
        began = time.perf_counter()
        arrays = measure(model, prompts, args.dtypes, args.device)
        entry["measureSeconds"] = round(time.perf_counter() - began, 1)
        entry["summary"] = {name: summary(a, long_mask) for name, a in arrays.items()}
        depths[layers] = {"summary": entry["summary"], "arrays": arrays}
        document["depths"][str(layers)] = entry
        save()
        tgt.log(
            f"{layers} layers: {json.dumps({k: v['all'] for k, v in entry['summary'].items()})}"
        )
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
    tgt.log(f"done\n{report(json.loads(args.out.read_text()))}")


if __name__ == "__main__":
    main()
