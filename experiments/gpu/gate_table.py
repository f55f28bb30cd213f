"""The gate at the depth of a real model: benign and harmful changes judged on a GPU.

A Qwen2 model of Qwen2.5-7B's shape (28 layers; `noise_depth_length.PRESETS`) is built
from a fixed seed, its weights rounded to bfloat16 once (a bf16 checkpoint), and its LM
head scaled so that its next-token distributions are peaked as a trained model's are
(random init alone gives flat ones, top-1 probability near 1/vocab; the scale is chosen
by measurement, `--target-top1`, and reported). No weights are downloaded and the model
is not trained: the peakedness is what the gate's same-top, fork and KL rules depend on,
the rest is the dtype's rounding carried through the depth.

Each side is a copy of that model with one change, run by transformers on the GPU, and
writes a ParityRecord the way `infergate record` does (`infergate.engines.record`):
greedy outputs with top-20 logprobs and the chosen logit's magnitude, every position of
the baseline's sequence teacher-forced (from position 1, so long prompts are scored on
their own text), last-layer hidden states. Then, with the same code as a rollout:

1. calibration, as `infergate parity calibrate` does, on a separate calibration suite
   (other random prompts): the A/A pairs (float32 and bfloat16, batch 1 against batch 4)
   and the expected change (bfloat16 against float32): this model's own noise record
   (`calibration.kept.model_noise`);
2. judging, as the runner does, every candidate against its baseline on the check suite
   (<= 64 prompts, long ones of 8K tokens) under the profile a user would choose: with
   the profile's static limits (depth-scaled by `parity.depth`), and with the limits
   derived from the noise record (`parity.calibrated.derive_limits`: k x noise).

Numbers only: both sides report the same fingerprints (the model's depth) and every
config difference is allowed, so the numeric rules alone decide, as gate-bench's
"numbers only" column does.

    python3 experiments/gpu/gate_table.py --stage record --work /tmp/gt   # GPU, <10 min
    python3 experiments/gpu/gate_table.py --stage judge --work /tmp/gt --out table.json
    python experiments/gpu/gate_table.py --preset tiny --device cpu --work /tmp/gt \\
        --stage all --short 6 --long 1 --long-tokens 256 --out /tmp/gt.json   # CPU check
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "operator"))

from noise_depth_length import PRESETS  # noqa: E402

from infergate.engines.record import make_meta  # noqa: E402
from infergate.parity.record import PromptRecord, TeacherForced, TopLogprobs  # noqa: E402
from infergate.recordio import MANIFEST, RecordReader, RecordWriter  # noqa: E402
from infergate.suite import LONG_TAG  # noqa: E402

TOP_K = 20
SHORT_TOKENS = 16
LONG_OUT_TOKENS = 8
Q8_BLOCK = 32
LOGIT_CHUNK = 1024
"""Positions per LM-head chunk: [1024, vocab] float32 at a time, not [8K, vocab]."""


@dataclass(frozen=True)
class Change:
    """One side: a dtype, an edit of the weights or config, how it is run."""

    key: str
    dtype: str
    against: str | None
    kind: str = "baseline"
    profile: str | None = None
    text: str = ""
    edit: Callable[[Qwen2ForCausalLM], None] | None = None
    batch: int = 1
    attention: str = "sdpa"
    suite: str = "check"


def _rope_inv_freq(model: Qwen2ForCausalLM, theta: float, *, bf16: bool = False) -> None:
    rotary = model.model.rotary_emb
    dim = rotary.inv_freq.shape[0] * 2
    device = rotary.inv_freq.device
    freq = 1.0 / (
        theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim)
    )
    if bf16:
        freq = freq.to(torch.bfloat16).to(torch.float32)
    rotary.inv_freq = freq
    rotary.original_inv_freq = freq


def _set_eps(model: Qwen2ForCausalLM, eps: float) -> None:
    for module in model.modules():
        if hasattr(module, "variance_epsilon"):
            module.variance_epsilon = eps


def _q8_0(model: Qwen2ForCausalLM) -> None:
    """llama.cpp q8_0 and back: blocks of 32 along the input dim, one scale each."""
    for name, param in model.named_parameters():
        if param.ndim != 2:
            continue
        rows, cols = param.shape
        blocks = param.float().reshape(rows, cols // Q8_BLOCK, Q8_BLOCK)
        scale = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        param.copy_((torch.round(blocks / scale) * scale).reshape(rows, cols).to(param.dtype))
        del name


def _final_norm(model: Qwen2ForCausalLM) -> None:
    model.model.norm.weight.mul_(1.02)


def _transposed_head(model: Qwen2ForCausalLM) -> None:
    """One query head of the middle layer in the other rotary layout (interleaved pairs
    instead of two halves): the permutation a checkpoint converter applies to q and k,
    applied to one head of one layer only."""
    layer = model.model.layers[len(model.model.layers) // 2].self_attn
    head_dim = layer.head_dim
    rows = layer.q_proj.weight[:head_dim]
    order = torch.arange(head_dim, device=rows.device).reshape(2, head_dim // 2).T.reshape(-1)
    layer.q_proj.weight[:head_dim] = rows[order].clone()
    if layer.q_proj.bias is not None:
        layer.q_proj.bias[:head_dim] = layer.q_proj.bias[:head_dim][order].clone()


def changes() -> list[Change]:
    """The table's rows: baselines, then benign and harmful candidates."""
    harmful: list[tuple[str, str, Callable[[Qwen2ForCausalLM], None]]] = [
        ("q8_0-weights", "every matrix rounded as llama.cpp q8_0, run in bf16", _q8_0),
        ("final-norm-x1.02", "final norm weight x 1.02", _final_norm),
        (
            "transposed-head",
            "layer 14 query head 0 in the interleaved rotary layout",
            _transposed_head,
        ),
        (
            "rope-inv-freq-bf16",
            "RoPE inv_freq rounded to bfloat16",
            lambda m: _rope_inv_freq(m, 1e6, bf16=True),
        ),
        ("eps-1e-5", "rms_norm_eps 1e-6 -> 1e-5", lambda m: _set_eps(m, 1e-5)),
        ("rope-theta-1e4", "rope theta 1e6 -> 1e4", lambda m: _rope_inv_freq(m, 1e4)),
    ]
    rows = [
        Change("base32", "float32", None),
        Change("base16", "bfloat16", None),
        Change(
            "bf16-vs-fp32",
            "bfloat16",
            "base32",
            "benign",
            "dtype-change",
            "float32 -> bfloat16 (same bf16 weights)",
        ),
        Change(
            "fp16-vs-fp32",
            "float16",
            "base32",
            "benign",
            "dtype-change",
            "float32 -> float16 (same bf16 weights)",
        ),
        Change(
            "bf16-batch4",
            "bfloat16",
            "base16",
            "benign",
            "bf16-kernel",
            "bfloat16: one prompt at a time -> batches of 4",
            batch=4,
        ),
        Change(
            "bf16-eager",
            "bfloat16",
            "base16",
            "benign",
            "bf16-kernel",
            "bfloat16: SDPA attention -> eager attention",
            attention="eager",
        ),
    ]
    rows += [
        Change(key, "bfloat16", "base16", "harmful", "bf16-kernel", text, edit)
        for key, text, edit in harmful
    ]
    rows += [
        Change("cal-base32", "float32", None, "calibration", suite="calibration"),
        Change(
            "cal-aa32",
            "float32",
            "cal-base32",
            "calibration",
            text="A/A: batch 1 -> 4",
            batch=4,
            suite="calibration",
        ),
        Change(
            "cal-bf16",
            "bfloat16",
            "cal-base32",
            "calibration",
            text="expected change: float32 -> bfloat16",
            suite="calibration",
        ),
        Change("cal-base16", "bfloat16", None, "calibration", suite="calibration"),
        Change(
            "cal-aa16",
            "bfloat16",
            "cal-base16",
            "calibration",
            text="A/A: batch 1 -> 4",
            batch=4,
            suite="calibration",
        ),
    ]
    return rows


def build(preset: str, seed: int, device: str, head_scale: float) -> Qwen2ForCausalLM:
    """The float32 model, its weights bf16-representable, its LM head scaled."""
    config = Qwen2Config(
        **PRESETS[preset],
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).to(torch.float32))
    return model.eval()


def side_model(base: Qwen2ForCausalLM, change: Change) -> Qwen2ForCausalLM:
    """`base` itself for an unchanged float32 side; else a copy built in the side's dtype
    (never a second float32 copy: at 7B shape that is 30 GB) with the change applied."""
    dtype = getattr(torch, change.dtype)
    if dtype == torch.float32 and change.edit is None and change.attention == "sdpa":
        return base
    config = copy.deepcopy(base.config)
    config._attn_implementation = change.attention
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model = model.to_empty(device=base.lm_head.weight.device)
    model.load_state_dict(base.state_dict())
    # Rotary frequencies stay float32 in every dtype, as transformers computes them.
    _rope_inv_freq(model, 1e6)
    if change.edit is not None:
        change.edit(model)
    return model.eval()


@dataclass
class Prompt:
    id: str
    ids: list[int]
    long: bool


def suite(
    name: str, vocab: int, counts: tuple[int, int], short_len: int, long_len: int
) -> list[Prompt]:
    """Random token ids, seeded by the suite's name: short ones of one length (so they batch
    without padding), long ones of `long_len` tokens; `counts` is (short, long)."""
    short, long = counts
    rng = np.random.default_rng({"check": 20261207, "calibration": 20261208}[name])
    prompts = [
        Prompt(f"{name}-s{i:02d}", rng.integers(0, vocab, short_len).tolist(), False)
        for i in range(short)
    ]
    prompts += [
        Prompt(f"{name}-l{i}", rng.integers(0, vocab, long_len).tolist(), True) for i in range(long)
    ]
    return prompts


def _log_softmax_rows(model: Qwen2ForCausalLM, hidden: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(model.lm_head(hidden).float(), dim=-1)


def generate(model: Qwen2ForCausalLM, batch: list[list[int]], steps: int) -> list[dict[str, Any]]:
    """Greedy decode with the KV cache, a batch of equal-length prompts at once."""
    device = model.lm_head.weight.device
    ids = torch.tensor(batch, device=device)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    tokens: list[list[int]] = [[] for _ in batch]
    tops: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in batch]
    scales: list[list[float]] = [[] for _ in batch]
    for step in range(steps):
        logits = out.logits[:, -1].float()
        rows = torch.log_softmax(logits, dim=-1)
        top = torch.topk(rows, TOP_K, dim=-1)
        chosen = top.indices[:, 0]
        raw = logits.gather(1, chosen[:, None])[:, 0].abs()
        for b in range(len(batch)):
            tokens[b].append(int(chosen[b]))
            tops[b].append((top.indices[b].cpu().numpy(), top.values[b].cpu().numpy()))
            scales[b].append(float(raw[b]))
        if step + 1 < steps:
            out = model(
                input_ids=chosen[:, None], past_key_values=out.past_key_values, use_cache=True
            )
    return [{"tokens": tokens[b], "top": tops[b], "scale": scales[b]} for b in range(len(batch))]


def score(model: Qwen2ForCausalLM, batch: list[list[int]]) -> list[dict[str, np.ndarray]]:
    """Teacher-forced scores from position 1 and last-layer hidden states of each sequence."""
    device = model.lm_head.weight.device
    ids = torch.tensor(batch, device=device)
    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
    results = []
    for b, seq in enumerate(batch):
        top_ids, top_lps, target = [], [], []
        for start in range(0, len(seq) - 1, LOGIT_CHUNK):
            stop = min(start + LOGIT_CHUNK, len(seq) - 1)
            rows = _log_softmax_rows(model, hidden[b, start:stop])
            top = torch.topk(rows, TOP_K, dim=-1)
            nxt = ids[b, start + 1 : stop + 1]
            target.append(rows.gather(1, nxt[:, None])[:, 0].double().cpu().numpy())
            top_ids.append(top.indices.cpu().numpy())
            top_lps.append(top.values.double().cpu().numpy())
        results.append(
            {
                "target": np.concatenate(target),
                "top_ids": np.concatenate(top_ids),
                "top_lps": np.concatenate(top_lps),
                "hidden": hidden[b].float().cpu().numpy(),
            }
        )
    return results


def record(
    model: Qwen2ForCausalLM, change: Change, prompts: list[Prompt], work: Path, preset: str
) -> float:
    out = work / change.key
    if (out / MANIFEST).exists():
        return 0.0
    if out.exists():
        for path in sorted(out.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    baseline = RecordReader(work / change.against) if change.against else None
    meta = make_meta(
        engine="transformers",
        engine_version=f"torch {torch.__version__} {change.attention}",
        dtype=change.dtype,
        model=f"{preset}-shape",
        suite=prompts[0].id.split("-")[0],
        effective_config={
            "dtype": change.dtype,
            "attention": change.attention,
            "batch": change.batch,
        },
        # Both sides report the model's depth (parity.profiles.model_depth), so the static
        # limits are depth-scaled and the calibration knows what it measured.
        fingerprints={"model_config.num_hidden_layers": PRESETS[preset]["num_hidden_layers"]},
    )
    began = time.perf_counter()
    short = [p for p in prompts if not p.long]
    groups = [short[i : i + change.batch] for i in range(0, len(short), change.batch)]
    groups += [[p] for p in prompts if p.long]
    with RecordWriter(out, meta) as writer:
        for group in groups:
            steps = LONG_OUT_TOKENS if group[0].long else SHORT_TOKENS
            outputs = generate(model, [p.ids for p in group], steps)
            if baseline is not None:
                bases = [baseline.get(p.id) for p in group]
                seqs = [b.prompt_token_ids.tolist() + b.output_token_ids.tolist() for b in bases]
            else:
                seqs = [p.ids + o["tokens"] for p, o in zip(group, outputs, strict=True)]
            scored = score(model, seqs)
            for prompt, output, seq, sc in zip(group, outputs, seqs, scored, strict=True):
                writer.add(
                    PromptRecord(
                        prompt_id=prompt.id,
                        prompt_token_ids=np.asarray(prompt.ids, np.int64),
                        output_token_ids=np.asarray(output["tokens"], np.int64),
                        top_logprobs=TopLogprobs(
                            np.stack([t[0] for t in output["top"]]),
                            np.stack([t[1] for t in output["top"]]),
                        ),
                        teacher_forced=TeacherForced(
                            np.asarray(seq[1:], np.int64),
                            sc["target"],
                            TopLogprobs(sc["top_ids"], sc["top_lps"]),
                            1,
                        ),
                        hidden_states=sc["hidden"],
                        tags={LONG_TAG: "true"} if prompt.long else {},
                        logit_scale=np.asarray(output["scale"]),
                    )
                )
    return time.perf_counter() - began


def choose_head_scale(
    preset: str, seed: int, device: str, target: float, probe: list[int]
) -> tuple[float, dict[str, float]]:
    """The smallest LM-head scale whose median top-1 probability reaches `target`."""
    model = build(preset, seed, device, 1.0)
    ids = torch.tensor([probe], device=device)
    hidden = model.model(input_ids=ids).last_hidden_state[0]
    logits = model.lm_head(hidden).float()
    seen: dict[str, float] = {}
    chosen = 1.0
    for scale in (1, 2, 4, 6, 8, 12, 16, 24, 32):
        top1 = torch.softmax(logits * scale, dim=-1).max(dim=-1).values
        seen[str(scale)] = float(top1.median())
        chosen = float(scale)
        if seen[str(scale)] >= target:
            break
    del model
    return chosen, seen


def run_record(args: argparse.Namespace) -> dict[str, Any]:
    """Every side's record (those already complete are kept), without autograd."""
    with torch.no_grad():
        return _record_all(args)


def _record_all(args: argparse.Namespace) -> dict[str, Any]:
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = PRESETS[args.preset]["vocab_size"]
    suites = {
        "check": suite(
            "check", vocab, (args.short, args.long), args.short_tokens, args.long_tokens
        ),
        "calibration": suite(
            "calibration",
            vocab,
            (args.cal_short, args.cal_long),
            args.short_tokens,
            args.long_tokens,
        ),
    }
    info_path = work / "model.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
    else:
        scale, seen = choose_head_scale(
            args.preset, args.seed, args.device, args.target_top1, suites["check"][0].ids
        )
        info = {
            "headScale": scale,
            "medianTop1ByScale": seen,
            "preset": args.preset,
            "shape": PRESETS[args.preset],
            "seed": args.seed,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        }
        info_path.write_text(json.dumps(info, indent=1) + "\n")
    base = build(args.preset, args.seed, args.device, info["headScale"])
    timings = info.setdefault("recordSeconds", {})
    for change in changes():
        if args.only and change.key not in args.only:
            continue
        model = side_model(base, change)
        seconds = record(model, change, suites[change.suite], work, args.preset)
        if seconds:
            timings[change.key] = round(seconds, 1)
            print(f"recorded {change.key} in {seconds:.1f} s", flush=True)  # noqa: T201 - progress
        if model is not base:
            del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
        info_path.write_text(json.dumps(info, indent=1) + "\n")
    return dict(info)


def _deciding(document: dict[str, Any]) -> str:
    """The failed and inconclusive checks, or the passing check nearest its limit."""
    checks = document.get("checks", [])
    failed = [c["key"] for c in checks if c.get("outcome") == "fail"]
    unsure = [c["key"] for c in checks if c.get("outcome") == "inconclusive"]
    parts = [f"hygiene: {r}" for r in document.get("reasons", []) if "hygiene" in r.lower()][:2]
    if failed:
        parts.append("failed: " + ", ".join(failed))
    if unsure:
        parts.append("inconclusive: " + ", ".join(unsure))
    if not parts:
        # Only checks whose bounds are the value's own (a count or position check's
        # bounds are of a rate, not of the value shown).
        near = [
            c
            for c in checks
            if c.get("outcome") == "pass"
            and c.get("threshold")
            and c.get("lower") is not None
            and c["lower"] <= c["value"] <= c["upper"]
        ]
        shares = [(_share(c), c) for c in near]
        if shares:
            ratio, check = max(shares, key=lambda pair: pair[0])
            parts.append(
                f"nearest: {check['key']} {_bound(check):.4g} vs {check['threshold']:.4g} "
                f"({100 * ratio:.0f}% of the limit)"
            )
    return " / ".join(parts)


def _bound(check: dict[str, Any]) -> float:
    """The bound a check decided on (upper for maxima, lower for minima), else its value."""
    value = check.get("lower" if check["op"] == ">=" else "upper")
    return float(check["value"] if value is None else value)


def _share(check: dict[str, Any]) -> float:
    """How much of its limit a passing check used (minima: of the room below 1)."""
    limit = float(check["threshold"])
    if check["op"] == ">=" and limit <= 1:
        return (1 - _bound(check)) / max(1 - limit, 1e-12)
    if check["op"] == ">=":  # a count or position floor: how far above it the bound is
        return limit / max(_bound(check), 1e-12)
    return abs(_bound(check) / limit)


CHECK_FIELDS = ("key", "op", "value", "lower", "upper", "threshold", "outcome")
"""What each check of a judged pair keeps in the table's json (to read a decision)."""

CALIBRATION_PAIRS = (
    ("aa-fp32", "cal-base32", "cal-aa32"),
    ("aa-bf16", "cal-base16", "cal-aa16"),
    ("bf16-vs-fp32", "cal-base32", "cal-bf16"),
)


def run_judge(
    args: argparse.Namespace, progress: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Calibrate on the calibration suite, then judge every candidate as a rollout would:
    static profile limits, and limits derived from the model's own noise. `progress` gets
    the partial result after the calibration and after each row (a run cut off keeps it)."""
    from datetime import UTC, datetime

    from infergate.calibration.kept import model_noise
    from infergate.calibration.measure import analyse_pair
    from infergate.parity.calibrated import (
        CalibrationNeed,
        NeedKind,
        calibration_need,
        derive_limits,
        with_measured,
    )
    from infergate.parity.compare import compare_sources
    from infergate.parity.profiles import PROFILES, plan_gate
    from infergate.parity.thresholds import ProfileName, RegressionTolerance
    from infergate.parity.verdict import decide
    from infergate.recordio import RecordReader

    work: Path = args.work
    reports, digests = [], set()
    for label, base, cand in CALIBRATION_PAIRS:
        report, digest = analyse_pair(label, work / base, work / cand)
        reports.append(report)
        digests.add(digest)
    noise = model_noise(
        reports, revision=None, digest=digests.pop(), measured=datetime.now(UTC).isoformat(),
        method="experiments/gpu/gate_table.py: " + ", ".join(p[0] for p in CALIBRATION_PAIRS),
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    noise_json = noise.model_dump(mode="json", by_alias=True)
    if progress is not None:
        progress({"noise": noise_json, "rows": rows})
    for change in changes():
        if change.kind not in ("benign", "harmful"):
            continue
        baseline, candidate = (
            RecordReader(work / str(change.against)),
            RecordReader(work / change.key),
        )
        profile = ProfileName(str(change.profile))
        gate = plan_gate(baseline.meta, candidate.meta, profile=profile)
        row: dict[str, Any] = {
            "key": change.key, "kind": change.kind, "change": change.text,
            "profile": profile.value, "against": change.against, "layers": gate.layers,
        }  # fmt: skip
        need = calibration_need(profile, candidate.meta.dtype, gate.layers)
        derived = derive_limits(
            gate.thresholds, need=need, noise=noise, layers=gate.layers,
            static_layers=PROFILES[profile].calibrated_layers,
        )  # fmt: skip
        # Every family from the bf16-vs-fp32 pair, decode families included: the variant
        # measured on 2026-12-07 (GPU_GATE_TABLE.md). The product's rule ("calibrated" for
        # bf16-kernel since then) takes only the output families from the pair.
        envelope = None
        if profile is ProfileName.BF16_KERNEL and "dtype bfloat16" in noise.changes:
            envelope = derive_limits(
                gate.thresholds,
                need=CalibrationNeed(NeedKind.CHANGE, "dtype bfloat16", need.required),
                noise=noise, layers=gate.layers,
                static_layers=PROFILES[profile].calibrated_layers,
            )  # fmt: skip
        sets = {"static": None, "calibrated": derived, "envelope": envelope}
        for name in [n for n in sets if n == "static" or sets[n] is not None]:
            chosen = sets[name]
            thresholds = gate.thresholds if chosen is None else chosen.thresholds
            limits = gate.limits if chosen is None else with_measured(gate.limits, chosen)
            began = time.perf_counter()
            result = compare_sources(
                baseline, candidate, thresholds, ("*",), disabled=gate.disabled, limits=limits
            )
            verdict = decide(result, gate.warn, None, RegressionTolerance())
            document = verdict.model_dump(mode="json", by_alias=True)
            status = verdict.status.value
            if chosen is not None and chosen.inconclusive:
                status = "Inconclusive"
            row[name] = {
                "status": status,
                "deciding": chosen.inconclusive
                if chosen is not None and chosen.inconclusive
                else _deciding(document),
                "seconds": round(time.perf_counter() - began, 1),
                "limits": {
                    p.key: p.value for p in chosen.provenance if p.source == "measured"
                } if chosen is not None else {},
                "control": result.model_dump(mode="json", by_alias=True).get("control"),
                "checks": [
                    {k: c.get(k) for k in CHECK_FIELDS} for c in document.get("checks", [])
                ],
            }  # fmt: skip
            ok = status == "Passed" if change.kind == "benign" else status != "Passed"
            row[name]["correct"] = ok
        rows.append(row)
        print(json.dumps(row), flush=True)  # noqa: T201 - progress
        if progress is not None:
            progress({"noise": noise_json, "rows": rows})
    return {"noise": noise_json, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=("record", "judge", "all"), default="all")
    parser.add_argument("--preset", default="qwen2.5-7b", choices=sorted(PRESETS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--short", type=int, default=60)
    parser.add_argument("--long", type=int, default=4)
    parser.add_argument("--cal-short", type=int, default=32)
    parser.add_argument("--cal-long", type=int, default=2)
    parser.add_argument("--short-tokens", type=int, default=128)
    parser.add_argument("--long-tokens", type=int, default=8192)
    parser.add_argument(
        "--target-top1",
        type=float,
        default=0.6,
        help="median top-1 probability the LM-head scale is chosen for",
    )
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    document: dict[str, Any] = {}
    if args.stage in ("record", "all"):
        document["model"] = run_record(args)
    if args.stage in ("judge", "all"):
        document["model"] = json.loads((args.work / "model.json").read_text())
        document.update(run_judge(args))
    if args.out:
        args.out.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
